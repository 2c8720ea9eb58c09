package mongo

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/loomdb/loom/collections"
)

// model is a stored record as MongoDB matches and sorts it.
type model map[string]any

func toModel(t *testing.T, db string, d *collections.Document) model {
	t.Helper()
	data, err := collections.EncodeData(d.Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := record(db, d, data)
	if err != nil {
		t.Fatal(err)
	}
	m := model{"_id": r.Key, fieldDB: r.DB, fieldPath: r.Path, fieldColl: r.Coll, fieldShape: r.Shape,
		fieldDepth: r.Depth, fieldSys: r.Sys, fieldID: r.ID, fieldDeleted: r.Deleted, fieldSeq: r.Seq}
	for k, v := range r.Keys {
		m[fieldKeys+"."+k] = v // key names never contain "."
	}
	return m
}

// match evaluates the operators translate emits, with MongoDB's rules: a
// comparison only matches a present value of the operand's BSON type;
// $ne and $nin match a missing field.
func (m model) match(t *testing.T, f bson.D) bool {
	for _, e := range f {
		switch e.Key {
		case "$and":
			for _, c := range e.Value.(bson.A) {
				if !m.match(t, c.(bson.D)) {
					return false
				}
			}
		case "$or":
			any := false
			for _, c := range e.Value.(bson.A) {
				any = any || m.match(t, c.(bson.D))
			}
			if !any {
				return false
			}
		default:
			v, present := m[e.Key]
			ops, isOps := e.Value.(bson.D)
			if !isOps {
				if !present || v != e.Value {
					return false
				}
				continue
			}
			for _, op := range ops {
				if !matchOp(t, v, present, op) {
					return false
				}
			}
		}
	}
	return true
}

func matchOp(t *testing.T, v any, present bool, op bson.E) bool {
	s, isStr := v.(string)
	switch op.Key {
	case "$exists":
		return present == op.Value.(bool)
	case "$ne":
		return !present || v != op.Value
	case "$in":
		return present && slices.Contains(op.Value.(bson.A), v)
	case "$nin":
		return !present || !slices.Contains(op.Value.(bson.A), v)
	case "$gt", "$gte", "$lt", "$lte":
		w := op.Value.(string)
		if !present || !isStr {
			return false
		}
		c := strings.Compare(s, w)
		switch op.Key {
		case "$gt":
			return c > 0
		case "$gte":
			return c >= 0
		case "$lt":
			return c < 0
		}
		return c <= 0
	}
	t.Fatalf("operator %s not modelled", op.Key)
	return false
}

// less sorts as MongoDB does on string keys: missing first, then binary.
func (m model) compare(sort bson.D, o model) int {
	for _, e := range sort {
		a, aok := m[e.Key]
		b, bok := o[e.Key]
		var c int
		switch {
		case !aok && !bok:
		case !aok:
			c = -1
		case !bok:
			c = 1
		default:
			c = strings.Compare(a.(string), b.(string))
		}
		if e.Value.(int32) < 0 {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

var ops = []collections.Op{collections.OpEq, collections.OpNe, collections.OpLt, collections.OpLe, collections.OpGt, collections.OpGe,
	collections.OpIn, collections.OpNotIn, collections.OpArrayContains, collections.OpArrayContainsAny, collections.OpPrefix}

func (g gen) query() collections.Query {
	q := collections.Query{Collection: g.pick("c", "d", "u/1/c", "u/*/c", "*", "*/*/c", "u/*/*", "_sys"), ShowDeleted: g.r.IntN(4) == 0}
	for range g.r.IntN(3) {
		f := collections.Filter{Field: fields[g.r.IntN(len(fields))], Op: ops[g.r.IntN(len(ops))]}
		switch f.Op {
		case collections.OpLt, collections.OpLe, collections.OpGt, collections.OpGe:
			for f.Value = g.scalar(); f.Value == nil; f.Value = g.scalar() {
			}
		case collections.OpIn, collections.OpNotIn, collections.OpArrayContainsAny:
			l := make([]any, g.r.IntN(4))
			for i := range l {
				l[i] = g.value(1)
			}
			f.Value = l
		case collections.OpPrefix:
			f.Value = g.pick("", "a", "ab", "é", "\U0010ffff", "\u07ff", "\ud7ff", "b")
		default:
			f.Value = g.value(0)
		}
		q.Filters = append(q.Filters, f)
	}
	for range g.r.IntN(3) {
		q.OrderBy = append(q.OrderBy, collections.Order{Field: fields[g.r.IntN(len(fields))], Direction: g.pick("asc", "desc")})
	}
	return q
}

// exactFilter reports whether translate is exact for f (no Go refinement
// needed): scalar operands and no array operators.
func exactFilter(f collections.Filter) bool {
	switch f.Op {
	case collections.OpArrayContains, collections.OpArrayContainsAny:
		return false
	case collections.OpIn, collections.OpNotIn:
		for _, v := range f.Value.([]any) {
			if isContainer(v) {
				return false
			}
		}
		return true
	}
	return !isContainer(f.Value)
}

func TestTranslate_Model(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(seed(t), 3))}
	for round := 0; round < 300; round++ {
		var docs []*collections.Document
		var models []model
		for i := range 30 {
			d := g.doc(i)
			docs = append(docs, d)
			models = append(models, toModel(t, "db", d))
		}
		// A document of another database never matches.
		other := g.doc(99)
		otherModel := toModel(t, "other", other)
		for qi := 0; qi < 20; qi++ {
			q := g.query()
			if err := q.Normalize(); err != nil {
				t.Fatalf("query %+v: %v", q, err)
			}
			filter, sort := translate("db", &q, nil)
			exact := q.Collection == "c" || q.Collection == "d" || q.Collection == "u/1/c" || q.Collection == "_sys"
			for _, f := range q.Filters {
				exact = exact && exactFilter(f)
			}
			for i, d := range docs {
				want, got := q.Matches(d), models[i].match(t, filter)
				if want && !got {
					t.Fatalf("query %+v: %s matches but the MongoDB filter %v drops it (keys %v)", q, d.Path, filter, models[i])
				}
				if got && collections.WildRoot(q.Collection) && collections.IsSystemPath(d.Path) {
					t.Fatalf("query %+v: the MongoDB filter selects the system document %s", q, d.Path)
				}
				if exact && got != want {
					t.Fatalf("query %+v: %s Matches=%v, filter=%v, want exact (filter %v)", q, d.Path, want, got, filter)
				}
			}
			if otherModel.match(t, filter) {
				t.Fatalf("query %+v matches a document of another database", q)
			}
			// Sort: the key order is CompareDocs.
			idx := make([]int, len(docs))
			for i := range idx {
				idx[i] = i
			}
			slices.SortFunc(idx, func(a, b int) int { return models[a].compare(sort, models[b]) })
			for i := 1; i < len(idx); i++ {
				a, b := docs[idx[i-1]], docs[idx[i]]
				if c := collections.CompareDocs(q.OrderBy, a, b); c >= 0 {
					t.Fatalf("orderBy %v: MongoDB sorts %s (%v) before %s (%v), CompareDocs says %d", q.OrderBy, a.Path, a.Data, b.Path, b.Data, c)
				}
			}
			// Cursor: the continuation is exactly Cursor.After.
			c, err := collections.DecodeCursor(collections.MakeCursor(q.OrderBy, docs[g.r.IntN(len(docs))]), q.OrderBy)
			if err != nil {
				t.Fatal(err)
			}
			cond := cursorCond(q.OrderBy, c)
			for i, d := range docs {
				if want, got := c.After(q.OrderBy, d), models[i].match(t, cond); want != got {
					t.Fatalf("orderBy %v cursor at %s: %s After=%v, MongoDB condition=%v (%v)", q.OrderBy, c.Path, d.Path, want, got, cond)
				}
			}
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct {
		p, want string
		ok      bool
	}{
		{"ab", "ac", true},
		{"a\u007f", "a\u0080", true},
		{"\ud7ff", "\ue000", true},
		{"x\U0010ffff", "", false},
		{"", "", false},
	} {
		got, ok := prefixEnd(tc.p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("prefixEnd(%q)=%q,%v, want %q,%v", tc.p, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSortSpec_RepeatedField(t *testing.T) {
	got := sortSpec([]collections.Order{{Field: "a", Direction: "asc"}, {Field: "a", Direction: "desc"}, {Field: "b.c", Direction: "desc"}})
	want := bson.D{{Key: "k.a", Value: int32(1)}, {Key: "k.b%2Ec", Value: int32(-1)}, {Key: "path", Value: int32(1)}}
	if len(got) != len(want) {
		t.Fatalf("sortSpec=%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sortSpec=%v, want %v", got, want)
		}
	}
}

// prefix is exact (docs/mongo.md): a prefix ending in U+10FFFF, which has
// no successor rune, bounds its range by the rune before it, not by the
// end of the string class.
func TestFilterCond_PrefixExact(t *testing.T) {
	for _, p := range []string{"a\U0010ffff", "a\U0010ffff\U0010ffff", "\U0010ffff", "", "ab", "é\U0010ffff"} {
		f := collections.Filter{Field: "s", Op: collections.OpPrefix, Value: p}
		cond := filterCond(f)
		for _, s := range []string{"", "a", "a\U0010ffff", "a\U0010ffffz", "a\U0010ffff\U0010ffff", "ab", "abc", "b", "é", "é\U0010ffff!", "ê", "\U0010ffff", "\U0010ffffx"} {
			m := model{keyPath("s"): keyString + s}
			if got, want := m.match(t, cond), strings.HasPrefix(s, p); got != want {
				t.Errorf("prefix %q on %q: filter %v selects=%v, want %v", p, s, cond, got, want)
			}
		}
	}
}

// NaN cannot come from JSON, but a Go caller may filter on it, and
// collections.Compare ranks it equal to every number: the filter must not
// drop a document that Matches selects (Go then decides).
func TestFilterCond_NaN(t *testing.T) {
	nan := math.NaN()
	values := []any{json.Number("5"), json.Number("0"), json.Number("-1.5"), "x", nil, true}
	for _, f := range []collections.Filter{
		{Field: "n", Op: collections.OpEq, Value: nan},
		{Field: "n", Op: collections.OpLe, Value: nan},
		{Field: "n", Op: collections.OpGe, Value: float32(nan)},
		{Field: "n", Op: collections.OpIn, Value: []any{nan}},
		{Field: "n", Op: collections.OpNe, Value: nan},
		{Field: "n", Op: collections.OpNotIn, Value: []any{nan, "y"}},
	} {
		cond := filterCond(f)
		for _, v := range values {
			d := &collections.Document{Path: "c/a", Collection: "c", ID: "a", Data: map[string]any{"n": v}}
			key, _ := orderKey(v)
			m := model{keyPath("n"): key}
			if collections.MatchFilters(d, []collections.Filter{f}) && cond != nil && !m.match(t, cond) {
				t.Errorf("filter n %s %v: value %v matches, but the MongoDB filter %v drops it", f.Op, f.Value, v, cond)
			}
		}
	}
}
