package sqlite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// cachedPlanOf explains the first round the engine runs for q, planned as
// Query plans it (planFor: with the store's declared indexes).
func cachedPlanOf(t testing.TB, s *Store, q collections.Query) (string, string) {
	t.Helper()
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	p, ok := s.queries.planFor(testDB, &q, q.Limit+1)
	if !ok {
		t.Fatalf("query %+v has no SQL plan", q)
	}
	text := p.sql("", q.Limit+1)
	return text, explain(t, s, text, p.args)
}

// TestNestedCollectionAndInPlans: a query on one collection of a nested
// shape seeks its own documents in the shape's declared index (a range on
// the index's path column after the field values), not every collection's
// entries for the value; "in" on a field that leads a declared index reads
// each value's rows in order from the index and merges them, with no sort
// of all matches and no scan. Results match brute force, repeated and
// numerically equal values included.
func TestNestedCollectionAndInPlans(t *testing.T) {
	tasksByN := collections.Index{Collection: tasksIndex.Collection, Fields: []string{"chatId", "n"}}
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, Indexes: []collections.Index{tasksIndex, tasksByN, peopleIndex}})
	seedChats(t, s, 300)
	var people []collections.Write
	for i := range 200 {
		age := fmt.Sprint(i % 40)
		if i%3 == 0 {
			age += ".0" // the same number written as a float
		}
		people = append(people, create(fmt.Sprintf("people/p%03d", (i*7)%200), obj(t, `{"age":`+age+`}`)))
	}
	commitAll(t, s, people)
	tasksIx, tasksByNIx, peopleIx := indexName(t, tasksIndex), indexName(t, tasksByN), indexName(t, peopleIndex)

	in := func(field string, vs ...any) []collections.Filter {
		return []collections.Filter{{Field: field, Op: collections.OpIn, Value: vs}}
	}
	eqC1 := []collections.Filter{{Field: "chatId", Op: collections.OpEq, Value: "c1"}}
	num := func(s string) any { return json.Number(s) }
	for _, tc := range []struct {
		name   string
		q      collections.Query
		index  string
		arms   int  // SEARCH lines of a merge, 0 for a single SELECT
		range_ bool // the index is searched with the collection's path range
		// each arm sorts its value's matches: the index does not hold the
		// order (as for "==")
		armsSort bool
		ordered  bool // the index yields the ORDER BY: no sort
	}{
		{name: "CollectionEquality", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Filters: eqC1}, index: tasksIx, range_: true},
		{name: "CollectionEqualityOrderedByOther", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Filters: eqC1, OrderBy: []collections.Order{{Field: collections.FieldUpdatedAt, Direction: "desc"}}},
			index: tasksIx, range_: true},
		// An index that yields the order still wins over the path range
		// with a sort of every match of the collection.
		{name: "CollectionEqualityOrderedByIndex", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Filters: eqC1, OrderBy: []collections.Order{{Field: "n"}}},
			index: tasksByNIx, ordered: true},
		{name: "CollectionIn", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Filters: in("chatId", "c1", "c3", "c1", "zz")}, index: tasksIx, arms: 4, range_: true},
		{name: "GroupIn", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: in("chatId", "c6", "c2")}, index: tasksIx, arms: 2},
		{name: "TopLevelInNumbers", q: collections.Query{Collection: "people", Filters: in("age", num("3"), num("3.0"), num("17"))}, index: peopleIx, arms: 3},
		{name: "TopLevelInOrdered", q: collections.Query{Collection: "people", Filters: in("age", num("30"), num("4"), num("9")),
			OrderBy: []collections.Order{{Field: "age", Direction: "desc"}}}, index: peopleIx, arms: 3},
		{name: "TopLevelInOrderedByOther", q: collections.Query{Collection: "people", Filters: in("age", num("30"), num("4")),
			OrderBy: []collections.Order{{Field: collections.FieldCreatedAt, Direction: "desc"}}}, index: peopleIx, arms: 2, armsSort: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, plan := cachedPlanOf(t, s, tc.q)
			if strings.Contains(plan, "SCAN docs") {
				t.Errorf("plan scans:\n%s", plan)
			}
			searches := strings.Count(plan, "SEARCH docs USING INDEX "+tc.index+" ")
			if want := max(tc.arms, 1); searches != want || strings.Count(plan, "SEARCH docs") != want {
				t.Errorf("plan searches %s %d times, want %d:\n%s", tc.index, searches, want, plan)
			}
			if got := strings.Count(text, " UNION ALL ") + 1; tc.arms > 0 && got != tc.arms {
				t.Errorf("%d merge arms, want %d: %s", got, tc.arms, text)
			}
			if tc.range_ != strings.Contains(plan, "path>? AND path<?)") {
				t.Errorf("path range used %v, want %v:\n%s", !tc.range_, tc.range_, plan)
			}
			if tc.ordered && strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("plan sorts although %s yields the order:\n%s", tc.index, plan)
			}
			if tc.arms > 0 && !strings.Contains(plan, "MERGE (UNION ALL)") {
				t.Errorf("the arms are not merged:\n%s", plan)
			}
			// A sort right after a search sorts every match of a value; a
			// sort of a limited subquery (ordered by the "in" field) is
			// bounded.
			lines := strings.Split(plan, "\n")
			for i := 1; tc.arms > 0 && !tc.armsSort && i < len(lines); i++ {
				if strings.HasPrefix(lines[i-1], "SEARCH docs") && strings.Contains(lines[i], "TEMP B-TREE") {
					t.Errorf("a merge arm sorts instead of reading the index in order:\n%s", plan)
				}
			}
			for _, limit := range []int{1, 3, 7} {
				q := tc.q
				q.Limit = limit
				checkQuery(t, s, fmt.Sprintf("results, limit %d", limit), q)
			}
		})
	}

	// Without a declared index leading with the field, "in" is one
	// condition: a merge would scan once per value.
	text, _ := cachedPlanOf(t, s, collections.Query{Collection: "people", Filters: in("other", "a", "b"), Limit: 5})
	if strings.Contains(text, "UNION") {
		t.Errorf("in on an unindexed field merges: %s", text)
	}
}
