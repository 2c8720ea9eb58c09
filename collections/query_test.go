package collections_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// queryCases also seed FuzzParseQuery. wantErr is nil for a valid query.
var queryCases = []struct {
	name    string
	body    string
	wantErr error
}{
	{"Minimal", `{"collection":"rooms"}`, nil},
	{"Group", `{"collection":"users/*/orch-chats/*/tasks"}`, nil},
	{"Eq", `{"collection":"r","filters":[{"field":"a","op":"==","value":1}]}`, nil},
	{"Ne", `{"collection":"r","filters":[{"field":"a","op":"!=","value":null}]}`, nil},
	{"Lt", `{"collection":"r","filters":[{"field":"a","op":"<","value":1.5}]}`, nil},
	{"Le", `{"collection":"r","filters":[{"field":"a","op":"<=","value":"m"}]}`, nil},
	{"Gt", `{"collection":"r","filters":[{"field":"a","op":">","value":true}]}`, nil},
	{"Ge", `{"collection":"r","filters":[{"field":"a","op":">=","value":-3}]}`, nil},
	{"In", `{"collection":"r","filters":[{"field":"a","op":"in","value":[1,"1",null]}]}`, nil},
	{"NotIn", `{"collection":"r","filters":[{"field":"a","op":"not-in","value":[]}]}`, nil},
	{"ArrayContains", `{"collection":"r","filters":[{"field":"tags","op":"array-contains","value":{"k":1}}]}`, nil},
	{"ContainsAlias", `{"collection":"r","filters":[{"field":"tags","op":"contains","value":"x"}]}`, nil},
	{"ArrayContainsAny", `{"collection":"r","filters":[{"field":"tags","op":"array-contains-any","value":["x","y"]}]}`, nil},
	{"Prefix", `{"collection":"r","filters":[{"field":"name","op":"prefix","value":"al"}]}`, nil},
	{"EqMissingValueIsNull", `{"collection":"r","filters":[{"field":"a","op":"=="}]}`, nil},
	{"DottedField", `{"collection":"r","filters":[{"field":"a.b.c","op":"==","value":1}]}`, nil},
	{"EnvelopeField", `{"collection":"r","filters":[{"field":"version","op":">","value":1}],"orderBy":[{"field":"createdAt","direction":"desc"}]}`, nil},
	{"AllKeys", `{"collection":"r","filters":[],"orderBy":[{"field":"a"},{"field":"b","direction":"desc"}],"limit":5,"showDeleted":true}`, nil},
	{"DirectionUpper", `{"collection":"r","orderBy":[{"field":"a","direction":"ASC"},{"field":"b","direction":"DESC"}]}`, nil},
	{"LimitMax", `{"collection":"r","limit":1000}`, nil},
	{"LimitCapped", `{"collection":"r","limit":5000}`, nil},
	{"LimitZero", `{"collection":"r","limit":0}`, nil},
	{"HundredValues", `{"collection":"r","filters":[{"field":"a","op":"in","value":[` + numberList(100) + `]}]}`, nil},
	{"TrailingSpace", `{"collection":"r"}  ` + "\n", nil},

	{"UnknownOp", `{"collection":"r","filters":[{"field":"a","op":"=~","value":1}]}`, collections.ErrInvalidQuery},
	{"EmptyOp", `{"collection":"r","filters":[{"field":"a","op":"","value":1}]}`, collections.ErrInvalidQuery},
	{"MissingOp", `{"collection":"r","filters":[{"field":"a","value":1}]}`, collections.ErrInvalidQuery},
	{"LikeOp", `{"collection":"r","filters":[{"field":"a","op":"LIKE","value":"x"}]}`, collections.ErrInvalidQuery},
	{"UpperCaseOp", `{"collection":"r","filters":[{"field":"a","op":"IN","value":[1]}]}`, collections.ErrInvalidQuery},
	{"OpNotString", `{"collection":"r","filters":[{"field":"a","op":1,"value":1}]}`, collections.ErrInvalidQuery},
	{"LtArray", `{"collection":"r","filters":[{"field":"a","op":"<","value":[1]}]}`, collections.ErrInvalidQuery},
	{"LtNull", `{"collection":"r","filters":[{"field":"a","op":"<","value":null}]}`, collections.ErrInvalidQuery},
	{"GeObject", `{"collection":"r","filters":[{"field":"a","op":">=","value":{"a":1}}]}`, collections.ErrInvalidQuery},
	{"InScalar", `{"collection":"r","filters":[{"field":"a","op":"in","value":1}]}`, collections.ErrInvalidQuery},
	{"InNull", `{"collection":"r","filters":[{"field":"a","op":"in","value":null}]}`, collections.ErrInvalidQuery},
	{"NotInString", `{"collection":"r","filters":[{"field":"a","op":"not-in","value":"x"}]}`, collections.ErrInvalidQuery},
	{"ContainsAnyString", `{"collection":"r","filters":[{"field":"a","op":"array-contains-any","value":"x"}]}`, collections.ErrInvalidQuery},
	{"PrefixNumber", `{"collection":"r","filters":[{"field":"a","op":"prefix","value":1}]}`, collections.ErrInvalidQuery},
	{"TooManyValues", `{"collection":"r","filters":[{"field":"a","op":"in","value":[` + numberList(101) + `]}]}`, collections.ErrInvalidQuery},
	{"TooManyFilters", `{"collection":"r","filters":[` + strings.Repeat(`{"field":"a","op":"==","value":1},`, 32) + `{"field":"a","op":"==","value":1}]}`, collections.ErrInvalidQuery},
	{"ValueTooDeep", `{"collection":"r","filters":[{"field":"a","op":"==","value":` + nested(collections.MaxDepth+1) + `}]}`, collections.ErrInvalidQuery},
	{"EmptyField", `{"collection":"r","filters":[{"field":"","op":"==","value":1}]}`, collections.ErrInvalidQuery},
	{"EmptyFieldSegment", `{"collection":"r","filters":[{"field":"a..b","op":"==","value":1}]}`, collections.ErrInvalidQuery},
	{"LeadingDotField", `{"collection":"r","orderBy":[{"field":".a"}]}`, collections.ErrInvalidQuery},
	{"BadDirection", `{"collection":"r","orderBy":[{"field":"a","direction":"up"}]}`, collections.ErrInvalidQuery},
	{"LimitNegative", `{"collection":"r","limit":-1}`, collections.ErrInvalidQuery},
	{"LimitFloat", `{"collection":"r","limit":1.5}`, collections.ErrInvalidQuery},
	{"LimitString", `{"collection":"r","limit":"10"}`, collections.ErrInvalidQuery},
	{"UnknownKey", `{"collection":"r","filter":[]}`, collections.ErrInvalidQuery},
	{"UnknownFilterKey", `{"collection":"r","filters":[{"field":"a","op":"==","value":1,"x":1}]}`, collections.ErrInvalidQuery},
	{"UnknownOrderKey", `{"collection":"r","orderBy":[{"field":"a","dir":"desc"}]}`, collections.ErrInvalidQuery},
	{"TrailingGarbage", `{"collection":"r"} x`, collections.ErrInvalidQuery},
	{"TrailingBrace", `{"collection":"r"}}`, collections.ErrInvalidQuery},
	{"TrailingBracket", `{"collection":"r"}]`, collections.ErrInvalidQuery},
	{"TwoObjects", `{"collection":"r"}{"collection":"s"}`, collections.ErrInvalidQuery},
	{"NotObject", `[]`, collections.ErrInvalidQuery},
	{"Truncated", `{"collection":"r"`, collections.ErrInvalidQuery},
	{"Empty", ``, collections.ErrInvalidQuery},
	{"BadCursor", `{"collection":"r","startAfter":"garbage!"}`, collections.ErrInvalidQuery},
	{"NoCollection", `{}`, collections.ErrInvalidPath},
	{"Null", `null`, collections.ErrInvalidPath},
	{"DocPathAsCollection", `{"collection":"rooms/r1"}`, collections.ErrInvalidPath},
	{"BadCollection", `{"collection":"rooms/../x"}`, collections.ErrInvalidPath},
}

func numberList(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return strings.Join(s, ",")
}

func TestParseQuery(t *testing.T) {
	for _, tc := range queryCases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := collections.ParseQuery([]byte(tc.body))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err=%v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
			if q.Limit < 1 || q.Limit > collections.MaxLimit {
				t.Errorf("limit=%d, want within [1, %d]", q.Limit, collections.MaxLimit)
			}
		})
	}
}

func TestParseQuery_Normalized(t *testing.T) {
	for _, tc := range []struct {
		body string
		want collections.Query
	}{
		{`{"collection":"r"}`, collections.Query{Collection: "r", Limit: 100}},
		{`{"collection":"r","limit":0}`, collections.Query{Collection: "r", Limit: 100}},
		{`{"collection":"r","limit":7}`, collections.Query{Collection: "r", Limit: 7}},
		{`{"collection":"r","limit":1001}`, collections.Query{Collection: "r", Limit: 1000}},
		{`{"collection":"r","showDeleted":true}`, collections.Query{Collection: "r", Limit: 100, ShowDeleted: true}},
		{
			`{"collection":"r","filters":[{"field":"t","op":"contains","value":"x"}]}`,
			collections.Query{Collection: "r", Limit: 100, Filters: []collections.Filter{{Field: "t", Op: collections.OpArrayContains, Value: "x"}}},
		},
		{
			`{"collection":"r","filters":[{"field":"n","op":">","value":9007199254740993}]}`,
			collections.Query{Collection: "r", Limit: 100, Filters: []collections.Filter{{Field: "n", Op: collections.OpGt, Value: json.Number("9007199254740993")}}},
		},
		{
			`{"collection":"r","orderBy":[{"field":"a"},{"field":"b","direction":"DESC"},{"field":"c","direction":"ASC"}]}`,
			collections.Query{Collection: "r", Limit: 100, OrderBy: []collections.Order{{"a", "asc"}, {"b", "desc"}, {"c", "asc"}}},
		},
	} {
		q, err := collections.ParseQuery([]byte(tc.body))
		if err != nil {
			t.Errorf("ParseQuery(%s) err=%v", tc.body, err)
			continue
		}
		if got, want := mustJSON(t, q), mustJSON(t, tc.want); got != want {
			t.Errorf("ParseQuery(%s)=%s, want %s", tc.body, got, want)
		}
	}
}

func TestParseQuery_Cursor(t *testing.T) {
	order := []collections.Order{{Field: "a", Direction: "desc"}}
	d := &collections.Document{Path: "r/x", Collection: "r", ID: "x", Data: map[string]any{"a": json.Number("1")}}
	cur := collections.MakeCursor(order, d)
	body := fmt.Sprintf(`{"collection":"r","orderBy":[{"field":"a","direction":"desc"}],"startAfter":%q}`, cur)
	if _, err := collections.ParseQuery([]byte(body)); err != nil {
		t.Errorf("ParseQuery with its own cursor err=%v, want nil", err)
	}
	for _, other := range []string{
		`"orderBy":[{"field":"a"}]`,
		`"orderBy":[{"field":"b","direction":"desc"}]`,
		`"orderBy":[{"field":"a","direction":"desc"},{"field":"b"}]`,
		`"orderBy":[]`,
	} {
		body := fmt.Sprintf(`{"collection":"r",%s,"startAfter":%q}`, other, cur)
		if _, err := collections.ParseQuery([]byte(body)); !errors.Is(err, collections.ErrInvalidQuery) {
			t.Errorf("ParseQuery with a cursor for another orderBy (%s) err=%v, want ErrInvalidQuery", other, err)
		}
	}
}

func TestNormalizeFilters(t *testing.T) {
	fs := []collections.Filter{{Field: "version", Op: "==", Value: json.Number("3")}, {Field: "tags", Op: "contains", Value: "x"}}
	if err := collections.NormalizeFilters(fs); err != nil {
		t.Fatal(err)
	}
	if fs[1].Op != collections.OpArrayContains {
		t.Errorf("op=%q, want %q", fs[1].Op, collections.OpArrayContains)
	}
	if err := collections.NormalizeFilters([]collections.Filter{{Field: "a", Op: "~", Value: 1}}); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("err=%v, want ErrInvalidQuery", err)
	}
}

func testDoc(t testing.TB, path, data string) *collections.Document {
	t.Helper()
	coll, id := collections.SplitDocPath(path)
	return &collections.Document{
		Path: path, Collection: coll, ID: id,
		Version: 2, CreatedAt: 1000, UpdatedAt: 2000,
		Data: mustObject(t, data),
	}
}

func TestLookup(t *testing.T) {
	d := testDoc(t, "rooms/r1/messages/m1", `{"a":{"b":{"c":1}},"n":null,"arr":[{"x":1}],"dotted.key":1}`)
	for _, tc := range []struct {
		field   string
		want    string // JSON of the value
		present bool
	}{
		{"id", `"m1"`, true},
		{"collection", `"rooms/r1/messages"`, true},
		{"version", `2`, true},
		{"createdAt", `1000`, true},
		{"updatedAt", `2000`, true},
		{"deleted", `null`, false},
		{"a", `{"b":{"c":1}}`, true},
		{"a.b.c", `1`, true},
		{"a.b.c.d", `null`, false},
		{"a.x", `null`, false},
		{"n", `null`, true},
		{"n.x", `null`, false},
		{"arr.0", `null`, false},
		{"arr.x", `null`, false},
		{"missing", `null`, false},
		{"dotted.key", `null`, false},
	} {
		v, ok := collections.Lookup(d, tc.field)
		if ok != tc.present || mustJSON(t, v) != tc.want {
			t.Errorf("Lookup(%q)=%s,%v, want %s,%v", tc.field, mustJSON(t, v), ok, tc.want, tc.present)
		}
	}
	d.Deleted = true
	if v, ok := collections.Lookup(d, "deleted"); v != true || !ok {
		t.Errorf("Lookup(deleted) on a tombstone=%v,%v, want true,true", v, ok)
	}
}

// matchCases: value (JSON, "" for a missing field), op, filter value (JSON).
var matchCases = []struct {
	value string
	op    collections.Op
	want  string
	match bool
}{
	// Type classes: 1 never equals "1" or true.
	{`1`, "==", `1`, true},
	{`1`, "==", `1.0`, true},
	{`1`, "==", `1e0`, true},
	{`1`, "==", `"1"`, false},
	{`1`, "==", `true`, false},
	{`"1"`, "==", `1`, false},
	{`true`, "==", `1`, false},
	{`0`, "==", `false`, false},
	{`""`, "==", `null`, false},
	{`9007199254740993`, "==", `9007199254740992`, false},
	{`9007199254740993`, "==", `9007199254740993`, true},
	{`-0`, "==", `0`, true},
	// null equals only null.
	{`null`, "==", `null`, true},
	{`null`, "==", `0`, false},
	{`null`, "==", `false`, false},
	{`null`, "==", `""`, false},
	{`0`, "==", `null`, false},
	{`null`, "!=", `null`, false},
	{`0`, "!=", `null`, true},
	// Missing matches only != and not-in.
	{``, "==", `null`, false},
	{``, "!=", `1`, true},
	{``, "!=", `null`, true},
	{``, "<", `1`, false},
	{``, ">=", `""`, false},
	{``, "in", `[null]`, false},
	{``, "not-in", `[null,1]`, true},
	{``, "array-contains", `null`, false},
	{``, "array-contains-any", `[null]`, false},
	{``, "prefix", `""`, false},
	// != and not-in across classes.
	{`1`, "!=", `"1"`, true},
	{`1`, "!=", `1.0`, false},
	{`1`, "not-in", `["1",true]`, true},
	{`1`, "not-in", `["1",1]`, false},
	{`1`, "not-in", `[]`, true},
	// Ranges compare within one class only.
	{`1`, "<", `2`, true},
	{`1`, "<", `"2"`, false},
	{`"1"`, "<", `2`, false},
	{`2.5`, ">", `2`, true},
	{`2`, ">=", `2.0`, true},
	{`2`, "<=", `1.999`, false},
	{`9007199254740993`, ">", `9007199254740992.0`, true},
	{`9007199254740992`, ">=", `9007199254740992.0`, true},
	{`9007199254740992`, ">", `9007199254740992.0`, false},
	{`-1e400`, "<", `-1e300`, true},
	{`"b"`, ">", `"a"`, true},
	{`"B"`, "<", `"a"`, true},
	{`"é"`, ">", `"z"`, true},
	{`""`, "<", `"a"`, true},
	{`false`, "<", `true`, true},
	{`true`, "<=", `true`, true},
	{`true`, ">", `1`, false},
	{`null`, "<", `1`, false},
	{`[1]`, "<", `2`, false},
	{`{"a":1}`, ">", `0`, false},
	// in.
	{`1`, "in", `[1,"1"]`, true},
	{`"1"`, "in", `[1,"1"]`, true},
	{`true`, "in", `[1,"1"]`, false},
	{`null`, "in", `[null]`, true},
	{`[1,2]`, "in", `[[1,2]]`, true},
	{`[1,2]`, "in", `[1,2]`, false},
	{`1`, "in", `[]`, false},
	// Arrays and objects compare structurally for equality.
	{`[1,2]`, "==", `[1,2]`, true},
	{`[1,2]`, "==", `[1.0,2.0]`, true},
	{`[1,2]`, "==", `[2,1]`, false},
	{`[1,2]`, "==", `1`, false},
	{`{"a":1,"b":[true]}`, "==", `{"b":[true],"a":1}`, true},
	{`{"a":1}`, "==", `{"a":1,"b":null}`, false},
	{`{}`, "==", `[]`, false},
	// array-contains: the field must be an array.
	{`["x","y"]`, "array-contains", `"x"`, true},
	{`["x","y"]`, "array-contains", `"z"`, false},
	{`[1,"1"]`, "array-contains", `true`, false},
	{`[[1],{"a":1}]`, "array-contains", `{"a":1}`, true},
	{`[[1],{"a":1}]`, "array-contains", `[1]`, true},
	{`[null]`, "array-contains", `null`, true},
	{`"x"`, "array-contains", `"x"`, false},
	{`{"x":1}`, "array-contains", `"x"`, false},
	{`[]`, "array-contains", `null`, false},
	{`["x","y"]`, "array-contains-any", `["z","y"]`, true},
	{`["x","y"]`, "array-contains-any", `["z"]`, false},
	{`["x","y"]`, "array-contains-any", `[]`, false},
	{`"x"`, "array-contains-any", `["x"]`, false},
	{`[1]`, "array-contains-any", `["1",1.0]`, true},
	// prefix: strings only.
	{`"alice"`, "prefix", `"al"`, true},
	{`"alice"`, "prefix", `""`, true},
	{`"alice"`, "prefix", `"alice"`, true},
	{`"alice"`, "prefix", `"alicex"`, false},
	{`"Alice"`, "prefix", `"al"`, false},
	{`123`, "prefix", `"1"`, false},
	{`["al"]`, "prefix", `"al"`, false},
}

func decodeValue(t testing.TB, s string) (any, bool) {
	t.Helper()
	if s == "" {
		return nil, false
	}
	v, err := collections.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("DecodeJSON(%s): %v", s, err)
	}
	return v, true
}

func TestMatchValue(t *testing.T) {
	for _, tc := range matchCases {
		v, present := decodeValue(t, tc.value)
		want, _ := decodeValue(t, tc.want)
		if got := collections.MatchValue(v, present, tc.op, want); got != tc.match {
			t.Errorf("MatchValue(%s, present=%v, %s, %s)=%v, want %v", tc.value, present, tc.op, tc.want, got, tc.match)
		}
	}
}

// TestMatchValue_Unnormalized: filters that skipped NormalizeFilters must not
// panic the evaluator.
func TestMatchValue_Unnormalized(t *testing.T) {
	for _, op := range []collections.Op{"in", "not-in", "array-contains-any", "prefix", "<", "bogus"} {
		for _, want := range []any{nil, "x", json.Number("1"), map[string]any{}} {
			collections.MatchValue([]any{"x"}, true, op, want)
			collections.MatchValue("x", true, op, want)
			collections.MatchValue(nil, false, op, want)
		}
	}
}

func TestQuery_Matches(t *testing.T) {
	live := testDoc(t, "users/u1/orch-chats/c1/tasks/t1", `{"status":"open","n":3,"meta":{"prio":1}}`)
	dead := testDoc(t, "users/u1/orch-chats/c1/tasks/t2", `{"status":"open"}`)
	dead.Deleted = true
	for _, tc := range []struct {
		q    collections.Query
		d    *collections.Document
		want bool
	}{
		{collections.Query{Collection: "users/*/orch-chats/*/tasks"}, live, true},
		{collections.Query{Collection: "users/u1/orch-chats/c1/tasks"}, live, true},
		{collections.Query{Collection: "users/u2/orch-chats/*/tasks"}, live, false},
		{collections.Query{Collection: "users/*/orch-chats"}, live, false},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks"}, dead, false},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", ShowDeleted: true}, dead, true},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: []collections.Filter{
			{Field: "status", Op: "==", Value: "open"},
			{Field: "meta.prio", Op: "<", Value: json.Number("2")},
			{Field: "version", Op: "==", Value: json.Number("2")},
		}}, live, true},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: []collections.Filter{
			{Field: "status", Op: "==", Value: "open"},
			{Field: "n", Op: ">", Value: json.Number("3")},
		}}, live, false},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: []collections.Filter{
			{Field: "id", Op: "in", Value: []any{"t1", "t9"}},
		}}, live, true},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: []collections.Filter{
			{Field: "createdAt", Op: ">=", Value: json.Number("1000")},
			{Field: "updatedAt", Op: "<", Value: json.Number("2000")},
		}}, live, false},
	} {
		if got := tc.q.Matches(tc.d); got != tc.want {
			t.Errorf("%+v Matches(%s)=%v, want %v", tc.q, tc.d.Path, got, tc.want)
		}
	}
}

// FuzzParseQuery: any body either parses or fails with ErrInvalidQuery /
// ErrInvalidPath; a parsed query marshals and re-parses to the same query,
// and evaluating it against a document never panics.
func FuzzParseQuery(f *testing.F) {
	for _, tc := range queryCases {
		f.Add([]byte(tc.body))
	}
	d := testDoc(f, "r/x", `{"a":1,"tags":["x",1],"name":"alice","n":null,"o":{"b":[true]}}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		q, err := collections.ParseQuery(body)
		if err != nil {
			if !errors.Is(err, collections.ErrInvalidQuery) && !errors.Is(err, collections.ErrInvalidPath) {
				t.Fatalf("err=%v, want ErrInvalidQuery or ErrInvalidPath", err)
			}
			return
		}
		if q.Limit < 1 || q.Limit > collections.MaxLimit {
			t.Fatalf("limit=%d, want within [1, %d]", q.Limit, collections.MaxLimit)
		}
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatalf("marshal parsed query: %v", err)
		}
		q2, err := collections.ParseQuery(b)
		if err != nil {
			t.Fatalf("re-parse %s: %v", b, err)
		}
		if b2 := mustJSON(t, q2); b2 != string(b) {
			t.Fatalf("round trip changed the query: %s, want %s", b2, b)
		}
		q.Matches(d)
		cur := collections.MakeCursor(q.OrderBy, d)
		c, err := collections.DecodeCursor(cur, q.OrderBy)
		if err != nil {
			t.Fatalf("DecodeCursor(MakeCursor) for %s: %v", b, err)
		}
		if c.After(q.OrderBy, d) {
			t.Fatalf("document sorts after its own cursor for %s", b)
		}
	})
}
