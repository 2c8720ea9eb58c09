package sqlite

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestNestedRangeAndInListsPageLikeBruteForce: a query on one collection
// of a nested shape (the path range) and "in" lists (merge arms, one IN
// seek) page through exactly the brute-force matches, with ids that sort
// below '0' or are multibyte, documents of the collection's own
// subcollections and of sibling collections whose names extend its own,
// repeated and numerically equal values, every type class, and lists of
// 0, 1, 10 and 11 values, ordered by another field, with deleted
// documents shown or not, on the collection and its group.
func TestNestedRangeAndInListsPageLikeBruteForce(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, Indexes: []collections.Index{tasksIndex}})
	ids := []string{"-a", ".b", "-", "0d", "A", "z", "_u", "a.-", "9"} // ids are [A-Za-z0-9_.-]: only - and . sort below 0
	vals := []string{`"c1"`, `"c2"`, `"c10"`, `1`, `1.0`, `2`, `true`, `false`, `null`, `"1"`, `""`}
	var writes []collections.Write
	for _, coll := range []string{"users/u1/orch-chats/c1/tasks", "users/u1/orch-chats/c1/tasks2", "users/u1/orch-chats/c10/tasks", "users/u2/orch-chats/c1/tasks"} {
		for i, id := range ids {
			for j := range 3 {
				v := vals[(i+j+len(coll))%len(vals)]
				p := fmt.Sprintf("%s/%s%d", coll, id, j)
				writes = append(writes, create(p, obj(t, fmt.Sprintf(`{"chatId":%s,"n":%d}`, v, (i*7+j*3)%5))))
				if j == 1 {
					// A subcollection document under it, same fields.
					writes = append(writes, create(p+"/sub/x", obj(t, fmt.Sprintf(`{"chatId":%s,"n":1}`, v))))
				}
			}
		}
	}
	commitAll(t, s, writes)
	var dels []collections.Write
	for i, w := range writes {
		if i%5 == 2 {
			dels = append(dels, collections.Write{Type: collections.WriteDelete, Path: w.Path})
		}
	}
	commitAll(t, s, dels)

	num := func(s string) any { return json.Number(s) }
	lists := map[string][]any{
		"empty":      {},
		"one":        {"c1"},
		"dup":        {"c1", "c1", "c2"},
		"numbers":    {num("1"), num("1.0"), num("2")},
		"bools":      {true, false, true},
		"null":       {nil},
		"nulls":      {nil, nil},
		"mixed":      {"1", num("1"), true, nil},
		"strings10":  {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"},
		"strings11":  {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", ""},
		"emptyFirst": {"", "c10"},
	}
	for _, coll := range []string{"users/u1/orch-chats/c1/tasks", "users/*/orch-chats/*/tasks", "users/u1/orch-chats/c1/tasks/-a1/sub"} {
		for name, list := range lists {
			for _, order := range [][]collections.Order{nil, {{Field: "n"}}, {{Field: "n", Direction: "desc"}}, {{Field: "chatId", Direction: "desc"}}} {
				for _, deleted := range []bool{false, true} {
					for _, limit := range []int{1, 2, 5} {
						q := collections.Query{Collection: coll, OrderBy: order, ShowDeleted: deleted, Limit: limit,
							Filters: []collections.Filter{{Field: "chatId", Op: collections.OpIn, Value: list}}}
						checkQuery(t, s, fmt.Sprintf("%s in %s order %v deleted %v limit %d", coll, name, order, deleted, limit), q)
					}
				}
			}
		}
		// The collection alone, no filter: the range holds exactly its documents.
		checkQuery(t, s, coll+" all", collections.Query{Collection: coll, Limit: 3})
	}
}
