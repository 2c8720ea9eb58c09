package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/loomdb/loom/collections"
)

// itemsIndex is the declared index of the neighbour and in-list benchmarks.
var itemsIndex = collections.Index{Collection: "users/*/items", Fields: []string{"group"}}

// seedItems writes n documents into coll, spread over groups g0..g4.
func seedItems(b *testing.B, s *Store, coll string, n int) {
	b.Helper()
	ws := make([]collections.Write, 0, n)
	for i := range n {
		ws = append(ws, create(fmt.Sprintf("%s/i%06d", coll, i), map[string]any{"group": fmt.Sprintf("g%d", i%5), "n": i, "title": "some item"}))
	}
	commitAll(b, s, ws)
}

func benchQuery(b *testing.B, s *Store, q collections.Query, want int) {
	b.Helper()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Query(ctx, testDB, q)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Docs) != want {
			b.Fatalf("%d docs, want %d", len(res.Docs), want)
		}
	}
}

// BenchmarkQueryBesideNeighbour: an equality on a declared index of a
// nested shape, queried on one user's small collection (50 documents)
// while another user's collection of the same shape holds neighbour
// documents with the same values. The cost must not grow with the
// neighbour.
func BenchmarkQueryBesideNeighbour(b *testing.B) {
	for _, neighbour := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("neighbour=%d", neighbour), func(b *testing.B) {
			s := benchStore(b, Config{Indexes: []collections.Index{itemsIndex}})
			seedItems(b, s, "users/big/items", neighbour)
			seedItems(b, s, "users/small/items", 50)
			eq := []collections.Filter{{Field: "group", Op: collections.OpEq, Value: "g4"}}
			b.Run("collection", func(b *testing.B) {
				benchQuery(b, s, collections.Query{Collection: "users/small/items", Filters: eq, Limit: 20}, 10)
			})
			b.Run("group", func(b *testing.B) {
				benchQuery(b, s, collections.Query{Collection: "users/*/items", Filters: eq, Limit: 20}, 20)
			})
		})
	}
}

// BenchmarkQueryIn: "group in [...]" on a declared index, a collection of
// 20k documents, the first page of 20; "miss" lists values no document has.
func BenchmarkQueryIn(b *testing.B) {
	s := benchStore(b, Config{Indexes: []collections.Index{itemsIndex}})
	seedItems(b, s, "users/u/items", 20000)
	b.Run("hit", func(b *testing.B) {
		benchQuery(b, s, collections.Query{Collection: "users/u/items", Limit: 20,
			Filters: []collections.Filter{{Field: "group", Op: collections.OpIn, Value: []any{"g1", "g3", "zz"}}}}, 20)
	})
	b.Run("miss", func(b *testing.B) {
		benchQuery(b, s, collections.Query{Collection: "users/u/items", Limit: 20,
			Filters: []collections.Filter{{Field: "group", Op: collections.OpIn, Value: []any{"x1", "x2", "x3"}}}}, 0)
	})
}
