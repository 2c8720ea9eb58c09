package collections_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/loomdb/loom/collections"
)

// wireBoth returns the envelope AppendJSON writes from the decoded data
// (the decoded path) and from the stored bytes (the raw path).
func wireBoth(t testing.TB, stored []byte) (decoded, raw []byte) {
	t.Helper()
	m, err := collections.DecodeObject(stored)
	if err != nil {
		t.Fatalf("WireData accepted %q, which does not decode: %v", stored, err)
	}
	env := collections.Document{Path: "c/x", Collection: "c", ID: "x", Version: 3, CreatedAt: 1, UpdatedAt: 2}
	d1, d2 := env, env
	d1.Data = m
	d2.Raw = stored
	var b1, b2 bytes.Buffer
	if err := d1.AppendJSON(&b1); err != nil {
		t.Fatal(err)
	}
	if err := d2.AppendJSON(&b2); err != nil {
		t.Fatal(err)
	}
	return b1.Bytes(), b2.Bytes()
}

func checkWire(t testing.TB, stored []byte) {
	t.Helper()
	if !collections.WireData(stored) {
		return
	}
	dec, raw := wireBoth(t, stored)
	if !bytes.Equal(dec, raw) {
		t.Fatalf("stored %q: raw envelope\n%s\ndiffers from decoded\n%s", stored, raw, dec)
	}
}

// randValue draws JSON values with the characters json.Marshal escapes,
// numbers in several spellings, nesting, and keys out of order.
func randValue(r *rand.Rand, depth int) any {
	strs := []string{"", "a", "é", "a b", "<b>", "x&y", "q\"q", "back\\slash", "nl\nx", "\t", "\x01",
		"\u2028", "\ufffd", "\xff", "日本", "😀", "/", "\x7f", "\b\f"}
	switch n := r.IntN(10); {
	case n == 0 && depth < 4:
		m := map[string]any{}
		for range r.IntN(5) {
			m[strs[r.IntN(len(strs))]+strs[r.IntN(3)]] = randValue(r, depth+1)
		}
		return m
	case n == 1 && depth < 4:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randValue(r, depth+1)
		}
		return a
	case n == 2:
		return json.Number([]string{"0", "-0", "1", "2.0", "1e1", "1E+2", "-1.5e-3", "9007199254740993", "123456789012345678901234567890"}[r.IntN(9)])
	case n == 3:
		return r.Float64() * 1e30
	case n == 4:
		return r.IntN(2) == 0
	case n == 5:
		return nil
	case n == 6:
		return int64(r.Int64())
	}
	return strs[r.IntN(len(strs))]
}

// TestWireDataRandom: for random documents stored as the engines store them
// (EncodeData), the envelope written from the stored bytes is byte for
// byte the one written from the decoded data, and the usual documents are
// recognised as wire data (so the raw path is taken).
func TestWireDataRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	accepted := 0
	for range 20000 {
		m := map[string]any{}
		for range r.IntN(6) {
			m[[]string{"a", "b", "n", "s", "tags", "c", "z", "é", "<k>", "k\"", "\xfe"}[r.IntN(11)]] = randValue(r, 0)
		}
		stored, err := collections.EncodeData(m, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkWire(t, stored)
		if collections.WireData(stored) {
			accepted++
		}
		// A client-written document: what the REST API decodes, cleaned.
		if dm, err := collections.DecodeObject(stored); err == nil {
			again, _ := collections.EncodeData(dm, 0)
			checkWire(t, again)
		}
	}
	if accepted < 5000 {
		t.Fatalf("only %d of 20000 random documents take the raw path", accepted)
	}
	plain, _ := collections.EncodeData(map[string]any{"worker": json.Number("3"), "n": json.Number("12"), "group": "g7", "text": "hello world"}, 0)
	if !collections.WireData(plain) {
		t.Fatalf("an ordinary document %s is not wire data", plain)
	}
}

func TestWireDataRejects(t *testing.T) {
	for _, s := range []string{
		``, `[]`, `null`, `{"a":1} `, ` {"a":1}`, `{"a": 1}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`,
		`{"a":"<"}`, `{"a":"\u003C"}`, `{"a":"\u0041"}`, `{"a":"\ufffd"}`, `{"a":"\/"}`, `{"a":"` + "\x01" + `"}`,
		`{"a":"` + "\xff" + `"}`, `{"a":"` + "\u2028" + `"}`, `{"a\n":1}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
		`{"a":1e}`, `{"a":+1}`, `{"a":tru}`, `{"a":[1,]}`, `{"a":{}`, `{"a"}`, `{"a":1,}`,
	} {
		if collections.WireData([]byte(s)) {
			t.Errorf("WireData(%q) = true", s)
		}
	}
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":"\u003c\u003e\u0026\"\\\n\r\t","b":[],"c":{},"d":[null,true,false,-0.5e+3]}`} {
		if !collections.WireData([]byte(s)) {
			t.Errorf("WireData(%q) = false", s)
		}
		checkWire(t, []byte(s))
	}
}

// FuzzWireData: whatever WireData accepts decodes, and the envelope written
// from it equals the one written from its decoded data.
func FuzzWireData(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":"x\u003cy","b":[1,{"c":null}]}`, `{"b":1,"a":2}`, `{"a":"é"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkWire(t, b)
	})
}

// TestDocumentDecodeRaw: DecodeRaw fills Data from Raw once and keeps Raw;
// decoded and nil documents are left alone; corrupt bytes are an error.
func TestDocumentDecodeRaw(t *testing.T) {
	d := &collections.Document{Path: "a/b", Raw: []byte(`{"n":1,"s":"x"}`)}
	if err := d.DecodeRaw(); err != nil {
		t.Fatal(err)
	}
	if d.Data["n"] != json.Number("1") || d.Data["s"] != "x" || string(d.Raw) != `{"n":1,"s":"x"}` {
		t.Fatalf("DecodeRaw: Data %v, Raw %s", d.Data, d.Raw)
	}
	d.Raw = []byte(`not json`) // Data is set: not decoded again
	if err := d.DecodeRaw(); err != nil || d.Data["s"] != "x" {
		t.Fatalf("DecodeRaw of a decoded document: %v, %v", err, d.Data)
	}
	if err := (*collections.Document)(nil).DecodeRaw(); err != nil {
		t.Fatal(err)
	}
	bad := &collections.Document{Path: "a/c", Raw: []byte(`{"n":`)}
	if err := bad.DecodeRaw(); err == nil || bad.Data != nil {
		t.Fatalf("DecodeRaw of corrupt bytes: %v, Data %v", err, bad.Data)
	}
}
