package mongo

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/loomdb/loom/collections"
)

// topK keeps exactly the first k documents of the CompareDocs order, as
// sorting everything and cutting would.
func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	order := []collections.Order{{Field: "n", Direction: "desc"}}
	for round := 0; round < 200; round++ {
		n, k := r.IntN(60), r.IntN(12)
		var all []*collections.Document
		for i := 0; i < n; i++ {
			data := map[string]any{}
			if r.IntN(4) > 0 {
				data["n"] = int64(r.IntN(10))
			}
			all = append(all, &collections.Document{Path: "c/" + strconv.Itoa(i), Collection: "c", ID: strconv.Itoa(i), Data: data})
		}
		top := newTopK(order, k)
		for _, d := range all {
			top.add(d)
		}
		got := top.sorted()
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b *collections.Document) int { return collections.CompareDocs(order, a, b) })
		want = want[:min(k, len(want))]
		if len(got) != len(want) {
			t.Fatalf("round %d: kept %d, want %d", round, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("round %d: at %d got %s, want %s", round, i, got[i].Path, want[i].Path)
			}
		}
	}
}
