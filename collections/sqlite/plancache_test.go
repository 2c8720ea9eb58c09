package sqlite

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestPlanCache: a plan planFor takes from its cache for a query of a shape
// it planned before is the plan planQuery builds for that query: the same
// SQL text, first round and continuations alike, the same arguments and
// the same exactness, for every operator, value class, field kind,
// collection kind and order.
func TestPlanCache(t *testing.T) {
	// Pairs of values of one type class: the first plans the shape, the
	// second is answered from the cache.
	pairs := [][2]any{
		{"x", "y'z"}, {"", "\xe2\x80\xa8"},
		{json.Number("1"), json.Number("2.5")}, {json.Number("-3"), json.Number("9007199254740993")},
		{true, false}, {nil, nil},
		{[]any{"a", json.Number("1")}, []any{}}, {map[string]any{"k": "v"}, map[string]any{}},
		// Lists of one shape (length and classes), which "in" binds per value.
		{[]any{"a", "b'c"}, []any{"", "d"}}, {[]any{json.Number("1")}, []any{json.Number("2.5")}},
		{[]any{true, false, true}, []any{false, false, true}}, {[]any{nil, nil}, []any{nil, nil}},
		{[]any{json.Number("1"), "x"}, []any{json.Number("7"), "y"}},
	}
	fields := []string{"a", "a.b", "id", "collection", "version", "createdAt", "deleted", `q"uote`}
	ops := []collections.Op{"==", "!=", "<", "<=", ">", ">=", "in", "not-in", "array-contains", "array-contains-any", "prefix", "contains"}
	colls := []string{"items", "m/x/items", "m/xyz/items", "m/*/items", "*", "*/x/items", "m/x/other"}
	orders := [][]collections.Order{nil, {{Field: "a", Direction: "desc"}}, {{Field: "version"}, {Field: "a.b", Direction: "desc"}}, {{Field: `q"uote`}}}
	checked, cached := 0, 0
	for _, coll := range colls {
		for _, f := range fields {
			for _, op := range ops {
				for pi, pair := range pairs {
					for oi, order := range orders {
						for _, showDeleted := range []bool{false, true} {
							want := 1 + oi
							q := &collections.Query{Collection: coll, ShowDeleted: showDeleted, OrderBy: order,
								Filters: []collections.Filter{{Field: f, Op: op, Value: pair[1]}, {Field: "n", Op: "==", Value: pair[1]}}}
							// The cache is primed with a query of the same
							// shape and other values (q is answered from
							// the cache), or with one that differs in one
							// part of the shape (it must not be, unless
							// that part does not change the SQL).
							primer, primerWant := *q, want
							primer.Filters = []collections.Filter{{Field: f, Op: op, Value: pair[0]}, {Field: "n", Op: "==", Value: pair[0]}}
							variant := checked % 7
							switch variant {
							case 1:
								other := pairs[(pi+1)%len(pairs)][0]
								primer.Filters = []collections.Filter{{Field: f, Op: op, Value: other}, {Field: "n", Op: "==", Value: other}}
							case 2:
								primer.ShowDeleted = !showDeleted
							case 3:
								primer.Collection = colls[(slices.Index(colls, coll)+1)%len(colls)]
							case 4:
								primer.OrderBy = orders[(oi+1)%len(orders)]
							case 5:
								primerWant++
							case 6:
								if len(order) > 0 {
									primer.OrderBy = slices.Clone(order)
									primer.OrderBy[0].Direction = map[bool]string{true: "asc", false: "desc"}[order[0].Desc()]
								}
							}
							c := &stmtCache{}
							c.planFor("db1", &primer, primerWant)
							got, gotOK := c.planFor("db2", q, want)
							ref, refOK := planQuery("db2", q)
							checked++
							name := fmt.Sprintf("%s %s %s %v (variant %d) order %d deleted %v", coll, f, op, pair[1], variant, oi, showDeleted)
							if gotOK != refOK {
								t.Fatalf("%s: ordered %v, planQuery says %v", name, gotOK, refOK)
							}
							if !refOK {
								continue
							}
							if variant == 0 && len(c.plans) != 1 && (op != "in" || sameListShape(pair[0], pair[1])) {
								t.Fatalf("%s: %d plans cached for one shape", name, len(c.plans))
							}
							cached++
							if got.first != ref.sql("", want) || got.exact != ref.exact || !reflect.DeepEqual(got.args, ref.args) {
								t.Fatalf("%s:\ncached %s %v exact %v\nfresh  %s %v exact %v", name, got.first, got.args, got.exact, ref.sql("", want), ref.args, ref.exact)
							}
							// A continuation after a document of each kind.
							for _, d := range []*collections.Document{
								{Path: coll + "/d1", ID: "d1", Collection: coll, Version: 2, Data: map[string]any{"a": pair[1], `q"uote`: "s"}},
								{Path: coll + "/d2", ID: "d2", Collection: coll, Version: 3, Data: map[string]any{"a": map[string]any{"b": json.Number("4")}}},
							} {
								cur := cursorAt(q.OrderBy, d)
								a, b := *got, *ref
								a.args, b.args = append([]any(nil), got.args...), append([]any(nil), ref.args...)
								if ta, tb := a.sql(a.after(cur), 7), b.sql(b.after(cur), 7); ta != tb || !reflect.DeepEqual(a.args, b.args) {
									t.Fatalf("%s, after %s:\ncached %s %v\nfresh  %s %v", name, d.Path, ta, a.args, tb, b.args)
								}
							}
						}
					}
				}
			}
		}
	}
	// Collections of one shape share a plan.
	c := &stmtCache{}
	eq := []collections.Filter{{Field: "a", Op: "==", Value: "v"}}
	c.planFor("db", &collections.Query{Collection: "m/x/items", Filters: eq}, 3)
	q := &collections.Query{Collection: "m/other/items", Filters: eq}
	got, _ := c.planFor("db", q, 3)
	ref, _ := planQuery("db", q)
	if len(c.plans) != 1 || got.first != ref.sql("", 3) || !reflect.DeepEqual(got.args, ref.args) {
		t.Errorf("m/x/items and m/other/items: %d plans, %s %v, want %s %v", len(c.plans), got.first, got.args, ref.sql("", 3), ref.args)
	}
	if cached < checked/2 {
		t.Fatalf("only %d of %d shapes were ordered in SQL", cached, checked)
	}
	t.Logf("%d shapes, %d planned in SQL", checked, cached)
}

// sameListShape reports whether two filter values are lists of the same
// length and type classes: the "in" filters of one plan.
func sameListShape(a, b any) bool {
	la, _ := a.([]any)
	lb, _ := b.([]any)
	return slices.EqualFunc(la, lb, func(x, y any) bool { return collections.TypeClass(x, true) == collections.TypeClass(y, true) })
}

// A shape whose field names a request made long is planned per call, not
// kept: neither cache holds memory that grows with the request's size.
func TestPlanCacheSkipsLongShapes(t *testing.T) {
	c := &stmtCache{}
	long := strings.Repeat("f", 4*maxCachedPlanKey)
	q := &collections.Query{Collection: "items", Filters: []collections.Filter{{Field: long, Op: "==", Value: "v"}}}
	p, ok := c.planFor("db", q, 3)
	if !ok || p == nil {
		t.Fatal("long shape not planned")
	}
	if len(c.plans) != 0 {
		t.Fatalf("%d plans kept for a %d-byte field name", len(c.plans), len(long))
	}
}
