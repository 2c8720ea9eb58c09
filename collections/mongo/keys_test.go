package mongo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/loomdb/loom/collections"
)

// The order keys and the query translation are pure functions; these tests
// check them against the reference evaluator (collections.Compare, Match,
// CompareDocs, Cursor.After) on random values, with a small model of
// MongoDB's matching and sorting over the stored record. No server needed.

func seed(t *testing.T) uint64 {
	if s := os.Getenv("LOOM_MONGO_KEYS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LOOM_MONGO_KEYS_SEED: %v", err)
		}
		return v
	}
	v := rand.Uint64()
	t.Logf("seed %d (set LOOM_MONGO_KEYS_SEED to replay)", v)
	return v
}

type gen struct{ r *rand.Rand }

func (g gen) number() any {
	switch g.r.IntN(12) {
	case 0:
		return json.Number(g.pick("0", "-0", "1", "-1", "2", "3", "10", "9007199254740992", "9007199254740993",
			"-9007199254740993", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551616"))
	case 1:
		return json.Number(g.pick("0.0", "-0.0", "1.0", "1.5", "-1.5", "2.5", "1e2", "100.0", "1e400", "-1e400",
			"9007199254740992.0", "9.223372036854775807e18", "9.223372036854775808e18", "-9.223372036854775808e18",
			"5e-324", "-5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "0.1", "0.30000000000000004"))
	case 2:
		return json.Number(strconv.FormatInt(g.r.Int64N(2000)-1000, 10))
	case 3:
		return json.Number(strconv.FormatFloat((g.r.Float64()-0.5)*2000, 'g', -1, 64))
	case 4:
		return json.Number(strconv.FormatInt(int64(g.r.Uint64()), 10))
	case 5:
		return json.Number(strconv.FormatFloat(math.Float64frombits(g.r.Uint64()&^(0x7ff<<52)|uint64(g.r.IntN(0x7ff))<<52), 'g', -1, 64))
	case 6:
		return float64(g.r.IntN(20)-10) / 4
	case 7:
		return int64(g.r.IntN(20) - 10)
	case 8:
		return g.r.IntN(20) - 10
	case 9:
		return uint64(math.MaxUint64 - g.r.Uint64N(3))
	case 10:
		return float32(g.r.IntN(20)-10) / 8
	}
	return json.Number(strconv.FormatInt(g.r.Int64N(10), 10) + "." + strconv.Itoa(g.r.IntN(10)))
}

func (g gen) str() string {
	return g.pick("", "a", "ab", "abc", "b", "B", "é", "ê", "a b", "1", "d01", "a\x00", "\U0010ffff", "\u07ff", "\ud7ff", "z")
}

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g gen) scalar() any {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2, 3:
		return g.number()
	}
	return g.str()
}

func (g gen) value(depth int) any {
	switch n := g.r.IntN(10); {
	case n < 7 || depth > 2:
		return g.scalar()
	case n < 9:
		a := make([]any, g.r.IntN(3))
		for i := range a {
			a[i] = g.value(depth + 1)
		}
		return a
	}
	m := map[string]any{}
	for range g.r.IntN(3) {
		m[g.pick("x", "y", "a.b", "$z")] = g.value(depth + 1)
	}
	return m
}

func TestOrderKey_Compare(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(seed(t), 1))}
	for i := 0; i < 200000; i++ {
		var a, b any
		if i%2 == 0 {
			a, b = g.number(), g.number()
		} else {
			a, b = g.value(0), g.value(0)
		}
		ka, _ := orderKey(a)
		kb, _ := orderKey(b)
		want := collections.Compare(a, true, b, true)
		if got := strings.Compare(ka, kb); got != want {
			t.Fatalf("keys of %#v (%q) and %#v (%q) compare %d, Compare says %d", a, ka, b, kb, got, want)
		}
		if isScalar(a) && isScalar(b) && (ka == kb) != collections.Equal(a, b) {
			t.Fatalf("keys of %#v and %#v equal=%v, Equal=%v", a, b, ka == kb, collections.Equal(a, b))
		}
		if strings.Contains(ka, "\x00") && collections.TypeClass(a, true) != 4 {
			t.Fatalf("key of %#v contains NUL: %q", a, ka)
		}
	}
}

func isScalar(v any) bool { return !isContainer(v) }

func TestNumberKey_Edges(t *testing.T) {
	// Ascending, with equal neighbours marked.
	order := []struct {
		v     any
		equal bool // equal to the previous one
	}{
		{json.Number("-1e400"), false},
		{json.Number("-9223372036854775808"), false},
		{json.Number("-9.223372036854775808e18"), true},
		{json.Number("-9007199254740993"), false},
		{json.Number("-9007199254740992"), false},
		{json.Number("-1.5"), false},
		{json.Number("-1"), false},
		{json.Number("-5e-324"), false},
		{json.Number("0"), false},
		{json.Number("-0.0"), true},
		{json.Number("5e-324"), false},
		{json.Number("1"), false},
		{1.0, true},
		{json.Number("1.5"), false},
		{json.Number("9007199254740992"), false},
		{json.Number("9007199254740993"), false},
		{json.Number("9223372036854775807"), false},
		{json.Number("9223372036854775808"), false},
		{json.Number("1.7976931348623157e308"), false},
		{json.Number("1e400"), false},
	}
	for i := 1; i < len(order); i++ {
		a, b := numberKey(order[i-1].v), numberKey(order[i].v)
		want := -1
		if order[i].equal {
			want = 0
		}
		if got := strings.Compare(a, b); got != want {
			t.Errorf("%v (%s) vs %v (%s): %d, want %d", order[i-1].v, a, order[i].v, b, got, want)
		}
	}
}

func TestFieldName(t *testing.T) {
	for field, want := range map[string]string{
		"a":       "a",
		"a.b":     "a%2Eb",
		"$x":      "%24x",
		"50%":     "50%25",
		"a%2Eb":   "a%252Eb",
		"n\x00ul": "n%00ul",
	} {
		if got := fieldName(field); got != want {
			t.Errorf("fieldName(%q)=%q, want %q", field, got, want)
		}
	}
}

// doc builds a random document in one of a few collections.
func (g gen) doc(i int) *collections.Document {
	coll := g.pick("c", "c", "d", "u/1/c", "u/2/c", "_sys", "u/1/d")
	data := map[string]any{}
	for _, f := range []string{"a", "b", "c", "n"} {
		if g.r.IntN(4) > 0 {
			data[f] = g.value(0)
		}
	}
	if g.r.IntN(3) == 0 {
		data["o"] = map[string]any{"x": g.scalar(), "a.b": g.scalar(), "y": map[string]any{"z": g.scalar()}}
	}
	if g.r.IntN(5) == 0 {
		data["id"] = "shadowed" // the envelope wins in Lookup
	}
	// Round-trip as an engine stores it.
	b, _ := json.Marshal(data)
	m, err := collections.DecodeObject(b)
	if err != nil {
		panic(err)
	}
	id := fmt.Sprintf("d%02d", i)
	return &collections.Document{Path: coll + "/" + id, Collection: coll, ID: id, Version: int64(g.r.IntN(3) + 1),
		CreatedAt: int64(g.r.IntN(3)), UpdatedAt: int64(g.r.IntN(3)), Deleted: g.r.IntN(5) == 0, Data: m}
}

var fields = []string{"a", "b", "c", "n", "o", "o.x", "o.y", "o.y.z", "o.a.b", "missing", "id", "version", "deleted", "collection", "createdAt"}

func TestDocKeys_Lookup(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(seed(t), 2))}
	for i := 0; i < 3000; i++ {
		d := g.doc(i)
		keys, ok := docKeys(d)
		if !ok {
			t.Fatalf("docKeys of a small document failed")
		}
		for _, f := range fields {
			v, present := collections.Lookup(d, f)
			k, has := keys[fieldName(f)]
			if has != present {
				t.Fatalf("doc %v field %s: key present=%v, Lookup present=%v", d.Data, f, has, present)
			}
			if want, _ := orderKey(v); present && k != want {
				t.Fatalf("doc %v field %s: key %q, want %q", d.Data, f, k, want)
			}
		}
	}
}

func TestDocKeys_Bounded(t *testing.T) {
	big := strings.Repeat("x", maxKeyBytes)
	d := &collections.Document{Path: "c/a", Collection: "c", ID: "a", Data: map[string]any{"s": big}}
	if _, ok := docKeys(d); ok {
		t.Errorf("docKeys of a document with %d bytes of keys succeeded, want the no-keys marker", maxKeyBytes)
	}
	r, err := record("db", d, []byte(`{"s":"`+big+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !r.NoKeys || r.Keys != nil {
		t.Errorf("record of an oversized document: NoKeys=%v keys=%d, want the marker and no keys", r.NoKeys, len(r.Keys))
	}
}

// TestDocKeys_BSONBound checks that maxKeyBytes bounds the order keys as
// MongoDB stores them: each key costs its name and value plus 7 bytes of
// BSON (type, name terminator, length, value terminator). Counting names
// and values alone let a document of many small fields store several times
// maxKeyBytes, and a system document near its bound then exceeds MongoDB's
// 16 MiB limit instead of being stored without keys.
func TestDocKeys_BSONBound(t *testing.T) {
	data := map[string]any{}
	for i := 0; i < 400000; i++ {
		data["x"+strconv.FormatInt(int64(i), 36)] = []any{}
	}
	d := &collections.Document{Path: "_outbox/a", Collection: "_outbox", ID: "a", Data: data}
	keys, ok := docKeys(d)
	if !ok {
		return // stored without keys: within every bound
	}
	b, err := bson.Marshal(keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxKeyBytes {
		t.Errorf("order keys of %d fields encode to %d bytes of BSON, above maxKeyBytes=%d", len(keys), len(b), maxKeyBytes)
	}
}

// Lookup shadows only the envelope field itself: "version.x" reads the data
// under a top-level "version" object (data that skipped CleanInput, as a Go
// caller may store). Its keys must be there too, or a filter on it drops
// the document that Matches selects.
func TestDocKeys_UnderEnvelopeName(t *testing.T) {
	d := &collections.Document{Path: "c/a", Collection: "c", ID: "a", Version: 2, Data: map[string]any{
		"version": map[string]any{"x": json.Number("1"), "y": map[string]any{"z": "s"}},
		"id":      "other",
	}}
	keys, ok := docKeys(d)
	if !ok {
		t.Fatal("docKeys failed")
	}
	for _, f := range []string{"version", "version.x", "version.y", "version.y.z", "id", "id.x"} {
		v, present := collections.Lookup(d, f)
		k, has := keys[fieldName(f)]
		want, _ := orderKey(v)
		if has != present || present && k != want {
			t.Errorf("field %s: key %q (present %v), Lookup %v (present %v)", f, k, has, v, present)
		}
	}
}
