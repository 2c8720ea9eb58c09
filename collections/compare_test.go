package collections_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// orderedGroups lists values in ascending Compare order; values within one
// group compare equal. "" stands for a missing field.
var orderedGroups = [][]string{
	{``},
	{`null`},
	{`false`},
	{`true`},
	{`-1e400`},
	{`-9223372036854775808`},
	{`-1.5`},
	{`-1`, `-1.0`},
	{`0`, `-0`, `0.0`, `0e5`},
	{`0.1`},
	{`1`, `1.0`, `1e0`, `10e-1`},
	{`2`},
	{`9007199254740992`, `9007199254740992.0`},
	{`9007199254740993`},
	{`9007199254740994`, `9007199254740994.0`},
	{`9223372036854775807`},
	{`9223372036854775808`, `9.223372036854775808e18`},
	{`1e300`},
	{`1e400`, `2e400`},
	{`""`},
	{`"A"`},
	{`"Z"`},
	{`"a"`},
	{`"ab"`},
	{`"b"`},
	{`"é"`},
	{`[]`, `[1]`, `["z",{"a":1}]`},
	{`{}`, `{"a":1}`},
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

func TestCompare_TotalOrder(t *testing.T) {
	type entry struct {
		src     string
		group   int
		v       any
		present bool
	}
	var all []entry
	for g, vals := range orderedGroups {
		for _, s := range vals {
			v, ok := decodeValue(t, s)
			all = append(all, entry{s, g, v, ok})
		}
	}
	for _, a := range all {
		for _, b := range all {
			got := sign(collections.Compare(a.v, a.present, b.v, b.present))
			if want := sign(a.group - b.group); got != want {
				t.Errorf("Compare(%s, %s)=%d, want %d", a.src, b.src, got, want)
			}
		}
	}
}

func TestCompare_GoNumbers(t *testing.T) {
	// Engines may hand back Go numbers; they order with json.Number.
	vals := []any{int64(-3), int32(-2), float32(-1.5), int(0), uint32(1), json.Number("1.5"), uint64(2), float64(2.5), uint64(math.MaxUint64)}
	for i := range vals {
		for j := range vals {
			if got, want := sign(collections.Compare(vals[i], true, vals[j], true)), sign(i-j); got != want {
				t.Errorf("Compare(%T %v, %T %v)=%d, want %d", vals[i], vals[i], vals[j], vals[j], got, want)
			}
		}
	}
}

func TestTypeClass(t *testing.T) {
	for _, tc := range []struct {
		v       any
		present bool
		want    int
	}{
		{nil, false, 0},
		{nil, true, 1},
		{false, true, 2},
		{json.Number("1"), true, 3},
		{int64(1), true, 3},
		{"x", true, 4},
		{[]any{}, true, 5},
		{map[string]any{}, true, 6},
	} {
		if got := collections.TypeClass(tc.v, tc.present); got != tc.want {
			t.Errorf("TypeClass(%#v, %v)=%d, want %d", tc.v, tc.present, got, tc.want)
		}
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`1`, `1.0`, true},
		{`1`, `"1"`, false},
		{`null`, `null`, true},
		{`null`, `false`, false},
		{`[]`, `[]`, true},
		{`[]`, `{}`, false},
		{`[1,[2,{"a":null}]]`, `[1.0,[2,{"a":null}]]`, true},
		{`[1,[2,{"a":null}]]`, `[1,[2,{"a":false}]]`, false},
		{`{"a":1}`, `{"b":1}`, false},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{`"é"`, `"é"`, true},
		{`9007199254740993`, `9007199254740992`, false},
	} {
		a, _ := decodeValue(t, tc.a)
		b, _ := decodeValue(t, tc.b)
		if got := collections.Equal(a, b); got != tc.want {
			t.Errorf("Equal(%s, %s)=%v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := collections.Equal(b, a); got != tc.want {
			t.Errorf("Equal(%s, %s)=%v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestCompareDocs(t *testing.T) {
	docs := []*collections.Document{
		testDoc(t, "r/e", `{"a":2,"b":"x"}`),
		testDoc(t, "r/a", `{"a":1,"b":"y"}`),
		testDoc(t, "r/d", `{"b":"x"}`),
		testDoc(t, "r/c", `{"a":1,"b":"x"}`),
		testDoc(t, "r/b", `{"a":"1"}`),
		testDoc(t, "r/f", `{"a":null}`),
	}
	paths := func(ds []*collections.Document) string {
		s := make([]string, len(ds))
		for i, d := range ds {
			s[i] = d.ID
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		order []collections.Order
		want  string
	}{
		{nil, "a,b,c,d,e,f"},
		{[]collections.Order{{"a", "asc"}}, "d,f,a,c,e,b"},
		{[]collections.Order{{"a", "desc"}}, "b,e,a,c,f,d"},
		{[]collections.Order{{"a", "asc"}, {"b", "desc"}}, "d,f,a,c,e,b"},
		{[]collections.Order{{"b", "asc"}, {"a", "desc"}}, "b,f,e,c,d,a"},
		{[]collections.Order{{"id", "desc"}}, "f,e,d,c,b,a"},
	} {
		got := slices.Clone(docs)
		slices.SortFunc(got, func(x, y *collections.Document) int { return collections.CompareDocs(tc.order, x, y) })
		if s := paths(got); s != tc.want {
			t.Errorf("sorted by %v=%s, want %s", tc.order, s, tc.want)
		}
	}
}

func TestNumberValue(t *testing.T) {
	cases := []struct {
		v         any
		i         int64
		f         float64
		isInt, ok bool
	}{
		{json.Number("9007199254740993"), 9007199254740993, 9007199254740992, true, true},
		{json.Number("1.5"), 0, 1.5, false, true},
		{json.Number("-1e400"), 0, math.Inf(-1), false, true},
		{uint64(math.MaxUint64), 0, math.MaxUint64, false, true},
		{int32(-7), -7, -7, true, true},
		{"7", 0, 0, false, false},
		{nil, 0, 0, false, false},
	}
	for _, tc := range cases {
		i, f, isInt, ok := collections.NumberValue(tc.v)
		if i != tc.i || f != tc.f || isInt != tc.isInt || ok != tc.ok {
			t.Errorf("NumberValue(%#v) = %d, %v, %v, %v; want %d, %v, %v, %v",
				tc.v, i, f, isInt, ok, tc.i, tc.f, tc.isInt, tc.ok)
		}
	}
}
