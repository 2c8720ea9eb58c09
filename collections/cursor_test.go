package collections_test

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"

	"github.com/loomdb/loom/collections"
)

// cursorDocs covers the kinds of sort values a cursor must carry exactly.
func cursorDocs(t testing.TB) []*collections.Document {
	return []*collections.Document{
		testDoc(t, "r/a", `{}`),
		testDoc(t, "r/b", `{"a":null}`),
		testDoc(t, "r/c", `{"a":false}`),
		testDoc(t, "r/d", `{"a":9007199254740992}`),
		testDoc(t, "r/e", `{"a":9007199254740993}`),
		testDoc(t, "r/f", `{"a":9007199254740993,"b":"x"}`),
		testDoc(t, "r/g", `{"a":0.1}`),
		testDoc(t, "r/h", `{"a":""}`),
		testDoc(t, "r/i", `{"a":"é\"\u0000"}`),
		testDoc(t, "r/j", `{"a":[1,{"x":2}]}`),
		testDoc(t, "r/k", `{"a":{"y":[3]}}`),
		testDoc(t, "r/l", `{"a":{"b":1},"b":null}`),
	}
}

var cursorOrders = [][]collections.Order{
	nil,
	{{Field: "a", Direction: "asc"}},
	{{Field: "a", Direction: "desc"}},
	{{Field: "a", Direction: "asc"}, {Field: "b", Direction: "desc"}},
	{{Field: "a.b", Direction: "asc"}},
	{{Field: "version", Direction: "desc"}, {Field: "id", Direction: "asc"}},
}

// TestCursor_RoundTrip: for every document of a sorted list, the cursor made
// from it decodes and admits exactly the documents after it.
func TestCursor_RoundTrip(t *testing.T) {
	for _, order := range cursorOrders {
		docs := cursorDocs(t)
		slices.SortFunc(docs, func(x, y *collections.Document) int { return collections.CompareDocs(order, x, y) })
		for i, d := range docs {
			s := collections.MakeCursor(order, d)
			c, err := collections.DecodeCursor(s, order)
			if err != nil {
				t.Fatalf("order %v: DecodeCursor(MakeCursor(%s)) err=%v", order, d.Path, err)
			}
			if c.Path != d.Path {
				t.Errorf("cursor path=%q, want %q", c.Path, d.Path)
			}
			for j, e := range docs {
				if got, want := c.After(order, e), j > i; got != want {
					t.Errorf("order %v: cursor of %s: After(%s)=%v, want %v", order, d.Path, e.Path, got, want)
				}
			}
		}
	}
}

func TestMakeCursor_EmptyDirection(t *testing.T) {
	d := testDoc(t, "r/a", `{"a":1}`)
	s := collections.MakeCursor([]collections.Order{{Field: "a"}}, d)
	if _, err := collections.DecodeCursor(s, []collections.Order{{Field: "a", Direction: "asc"}}); err != nil {
		t.Errorf("cursor made with an empty direction does not decode for asc: %v", err)
	}
}

func TestDecodeCursor_WrongOrder(t *testing.T) {
	d := testDoc(t, "r/a", `{"a":1,"b":2}`)
	order := []collections.Order{{Field: "a", Direction: "asc"}, {Field: "b", Direction: "desc"}}
	s := collections.MakeCursor(order, d)
	for _, other := range [][]collections.Order{
		nil,
		{{Field: "a", Direction: "asc"}},
		{{Field: "a", Direction: "asc"}, {Field: "b", Direction: "asc"}},
		{{Field: "b", Direction: "desc"}, {Field: "a", Direction: "asc"}},
		{{Field: "a", Direction: "asc"}, {Field: "c", Direction: "desc"}},
		{{Field: "a", Direction: "asc"}, {Field: "b", Direction: "desc"}, {Field: "c", Direction: "asc"}},
	} {
		if _, err := collections.DecodeCursor(s, other); !errors.Is(err, collections.ErrInvalidQuery) {
			t.Errorf("DecodeCursor for %v (made for %v) err=%v, want ErrInvalidQuery", other, order, err)
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// garbageCursors also seed FuzzCursor.
var garbageCursors = []string{
	"",
	"!!!",
	"garbage",
	b64(`{}`),
	b64(`null`),
	b64(`[]`),
	b64(`"x"`),
	b64(`{"f":[],"v":[],"p":""}`),
	b64(`{"f":[],"v":[],"p":"r"}`),
	b64(`{"f":[],"v":[],"p":"r/../x"}`),
	b64(`{"f":["a asc"],"v":[],"p":"r/x"}`),
	b64(`{"f":["a asc"],"v":[{}, {}],"p":"r/x"}`),
	b64(`{"f":"a asc","v":[{}],"p":"r/x"}`),
	b64(`{"f":[1],"v":[{}],"p":"r/x"}`),
	b64(`{"f":[],"v":[],"p":1}`),
	b64(`{"f":[],"v":[],"p":"r/x"`),
	base64.URLEncoding.EncodeToString([]byte(`{"f":[],"v":[],"p":"r/x"}`)) + "==",
	base64.StdEncoding.EncodeToString([]byte(`{"f":["a asc"],"v":[{"x":"?>?"}],"p":"r/x"}`)),
}

func TestDecodeCursor_Garbage(t *testing.T) {
	for _, s := range garbageCursors {
		if _, err := collections.DecodeCursor(s, nil); !errors.Is(err, collections.ErrInvalidQuery) {
			t.Errorf("DecodeCursor(%q, nil) err=%v, want ErrInvalidQuery", s, err)
		}
	}
	// A well-formed cursor for the empty orderBy is accepted.
	if _, err := collections.DecodeCursor(b64(`{"f":[],"v":[],"p":"r/x"}`), nil); err != nil {
		t.Errorf("DecodeCursor(minimal cursor) err=%v, want nil", err)
	}
}

// FuzzCursor: DecodeCursor never panics, fails only with ErrInvalidQuery,
// and a decoded cursor can be applied to documents.
func FuzzCursor(f *testing.F) {
	for _, s := range garbageCursors {
		f.Add(s, "a", false)
	}
	for _, d := range cursorDocs(f) {
		for _, order := range cursorOrders {
			if len(order) == 1 {
				f.Add(collections.MakeCursor(order, d), order[0].Field, order[0].Desc())
			}
		}
	}
	docs := cursorDocs(f)
	f.Fuzz(func(t *testing.T, s, field string, desc bool) {
		dir := "asc"
		if desc {
			dir = "desc"
		}
		for _, order := range [][]collections.Order{nil, {{Field: field, Direction: dir}}} {
			c, err := collections.DecodeCursor(s, order)
			if err != nil {
				if !errors.Is(err, collections.ErrInvalidQuery) {
					t.Fatalf("err=%v, want ErrInvalidQuery", err)
				}
				continue
			}
			if err := collections.ValidateDocPath(c.Path); err != nil {
				t.Fatalf("accepted cursor with path %q: %v", c.Path, err)
			}
			for _, d := range docs {
				c.After(order, d)
			}
		}
	})
}
