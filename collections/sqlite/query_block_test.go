package sqlite

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestQueryPageDocumentsAreTheirOwn: a page's documents are allocated
// together and a row the filter rejects in Go gives its slot to the next
// row. Paging through a collection where every other row is rejected
// (rows of other shapes and sizes in between), with Query and QueryRaw,
// with and without an order, in pages that end on rejected and accepted
// rows alike, every document returned is exactly the one Get returns:
// nothing of a rejected row, or of the row before in its slot, stays in
// it; and changing one returned document changes no other.
func TestQueryPageDocumentsAreTheirOwn(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	var writes []collections.Write
	for i := range 300 {
		data := map[string]any{"k": "in", "n": i, "s": strings.Repeat("a", i%7)}
		if i%2 == 1 || i%11 == 0 {
			// Rejected by the "in" filter, which SQL leaves to Go.
			data = map[string]any{"k": "out", "big": strings.Repeat("z", 100+i), "nested": map[string]any{"x": i}, "only": true}
		}
		writes = append(writes, create(fmt.Sprintf("blk/d%03d", i), data))
	}
	commitAll(t, s, writes)

	in := []collections.Filter{{Field: "k", Op: collections.OpIn, Value: []any{"in"}}}
	for _, raw := range []bool{false, true} {
		for _, order := range [][]collections.Order{nil, {{Field: "n", Direction: "desc"}}} {
			for _, limit := range []int{1, 3, 64, 65, 200} {
				label := fmt.Sprintf("raw %v order %v limit %d", raw, order, limit)
				q := collections.Query{Collection: "blk", Filters: in, OrderBy: order, Limit: limit}
				var all []*collections.Document
				for page := 0; ; page++ {
					var res collections.QueryResult
					var err error
					if raw {
						res, err = s.QueryRaw(ctx, testDB, q)
					} else {
						res, err = s.Query(ctx, testDB, q)
					}
					if err != nil {
						t.Fatalf("%s: page %d: %v", label, page, err)
					}
					all = append(all, res.Docs...)
					if res.NextCursor == "" {
						break
					}
					q.StartAfter = res.NextCursor
				}
				if len(all) != 136 {
					t.Fatalf("%s: %d documents, want 136", label, len(all))
				}
				for _, d := range all {
					want, err := s.Get(ctx, testDB, d.Path)
					if err != nil {
						t.Fatal(err)
					}
					if d.Raw != nil {
						m, err := collections.DecodeObject(d.Raw)
						if err != nil || !reflect.DeepEqual(m, want.Data) {
							t.Fatalf("%s: %s: raw %s, want %v", label, d.Path, d.Raw, want.Data)
						}
					}
					if err := d.DecodeRaw(); err != nil {
						t.Fatal(err)
					}
					if d.Collection != want.Collection || d.ID != want.ID || d.Version != want.Version || d.Seq != want.Seq ||
						d.CreatedAt != want.CreatedAt || d.Deleted || !reflect.DeepEqual(d.Data, want.Data) {
						t.Fatalf("%s: %+v, want %+v", label, d, want)
					}
				}
				// One document changed by its consumer leaves the others.
				all[0].Data["k"], all[0].Path = "changed", "elsewhere"
				for _, d := range all[1:] {
					if d.Data["k"] != "in" || d.Path == "elsewhere" {
						t.Fatalf("%s: %s changed with another document: %v", label, d.Path, d.Data)
					}
				}
			}
		}
	}
}
