package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestPlanCacheConcurrentPages: queries of one shape with different values
// and cursors, run at once, share one cached plan; each pages through
// exactly its own matches (under -race: nothing of the shared plan is
// written by a query using it).
func TestPlanCacheConcurrentPages(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	var writes []collections.Write
	for i := range 200 {
		writes = append(writes, create(fmt.Sprintf("pc/d%03d", i), map[string]any{"g": fmt.Sprint(i % 5), "n": i, "odd": i%2 == 1}))
	}
	commitAll(t, s, writes)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 10 {
				g := fmt.Sprint((w + round) % 5)
				q := collections.Query{Collection: "pc", Limit: 3 + w%3,
					Filters: []collections.Filter{{Field: "g", Op: "==", Value: g}, {Field: "n", Op: ">=", Value: w}},
					OrderBy: []collections.Order{{Field: "n", Direction: map[bool]string{true: "desc", false: "asc"}[w%2 == 0]}}}
				var got []int
				for {
					res, err := s.QueryRaw(ctx, testDB, q)
					if err != nil {
						t.Error(err)
						return
					}
					for _, d := range res.Docs {
						if err := d.DecodeRaw(); err != nil {
							t.Error(err)
							return
						}
						n, _, _, _ := collections.NumberValue(d.Data["n"])
						if d.Data["g"] != g || n < int64(w) {
							t.Errorf("worker %d: %s does not match g=%s n>=%d: %v", w, d.Path, g, w, d.Data)
						}
						got = append(got, int(n))
					}
					if res.NextCursor == "" {
						break
					}
					q.StartAfter = res.NextCursor
				}
				want := 0
				for i := range 200 {
					if fmt.Sprint(i%5) == g && i >= w {
						want++
					}
				}
				if len(got) != want {
					t.Errorf("worker %d round %d: %d documents, want %d", w, round, len(got), want)
				}
				for i := 1; i < len(got); i++ {
					if (w%2 == 0) != (got[i] < got[i-1]) {
						t.Errorf("worker %d round %d: out of order: %v", w, round, got)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
}
