package storetest

import (
	"slices"
	"testing"

	"github.com/loomdb/loom/collections"
)

// testWildcardSystem: a pattern whose first segment is "*" never selects a
// system collection ("_users", "_outbox", ...), whatever its shape, filters,
// order, page size or showDeleted; Loom reaches its own state only by naming
// the system collection. The engine must enforce this where it selects
// documents: the server's string checks see only "*".
func testWildcardSystem(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	h.mustCommit(db,
		h.create("_users/u1", `{"hash":"$2a$10$secret","n":1}`),
		h.create("_api_keys/k1", `{"hash":"x","n":2}`),
		h.create("_users/u1/sessions/s1", `{"n":3}`),
		h.create("_outbox/o1", `{"n":4}`),
		h.create("notes/n1", `{"n":5}`),
		h.create("users/u1/notes/n2", `{"n":6}`),
	)
	h.mustCommit(db, h.create("_outbox/o2", `{"n":7}`))
	h.mustCommit(db, del("_outbox/o2"))
	for _, tc := range []struct {
		q    collections.Query
		want []string
	}{
		{collections.Query{Collection: "*"}, []string{"notes/n1"}},
		{collections.Query{Collection: "*", ShowDeleted: true}, []string{"notes/n1"}},
		{collections.Query{Collection: "*", OrderBy: []collections.Order{{Field: "n", Direction: "desc"}}, Limit: 1}, []string{"notes/n1"}},
		{collections.Query{Collection: "*", Filters: []collections.Filter{filter("hash", collections.OpNe, "z")}}, []string{"notes/n1"}},
		{collections.Query{Collection: "*", OrderBy: []collections.Order{{Field: "n"}, {Field: "hash"}}}, []string{"notes/n1"}},
		{collections.Query{Collection: "*/*/sessions"}, nil},
		{collections.Query{Collection: "*/*/notes"}, []string{"users/u1/notes/n2"}},
		{collections.Query{Collection: "*/u1/sessions", ShowDeleted: true}, nil},
		// Naming a system collection (Loom's own callers do) selects it.
		{collections.Query{Collection: "_users"}, []string{"_users/u1"}},
		{collections.Query{Collection: "_users/*/sessions"}, []string{"_users/u1/sessions/s1"}},
		{collections.Query{Collection: "_outbox", ShowDeleted: true}, []string{"_outbox/o1", "_outbox/o2"}},
	} {
		for _, limit := range []int{1, 2, 100} {
			q := tc.q
			if q.Limit == 0 {
				q.Limit = limit
			}
			got := paths(h.mustQueryAll(db, q))
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("Query(%s) limit %d=%v, want %v", queryString(q), q.Limit, got, tc.want)
			}
		}
	}
	for _, pair := range [][2]string{{"*", "_users"}, {"*/*/sessions", "_users/u1/sessions"}, {"*/u1/sessions", "_users/u1/sessions"}} {
		if collections.MatchCollection(pair[0], pair[1]) {
			t.Errorf("MatchCollection(%q, %q)=true, want false", pair[0], pair[1])
		}
	}
}
