package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/collections"
)

// Benchmarks of the engine on a real file in b.TempDir(). Every commit is
// fsynced (synchronous=FULL), so commit numbers depend on the disk.

func benchStore(b *testing.B, cfg Config) *Store {
	b.Helper()
	cfg.Path = tempPath(b)
	cfg.PurgeInterval = -1
	return mustOpen(b, cfg)
}

// BenchmarkCommitParallel: concurrent single-document creates, batched by
// the group committer. pN runs N goroutines per GOMAXPROCS.
func BenchmarkCommitParallel(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("p%d", par), func(b *testing.B) {
			s := benchStore(b, Config{})
			ctx := context.Background()
			var n atomic.Int64
			b.SetParallelism(par)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					w := create(fmt.Sprintf("bench/d%09d", i), map[string]any{"n": i, "s": "hello world"})
					if _, err := s.Commit(ctx, testDB, []collections.Write{w}, collections.CommitOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

// BenchmarkGetParallel: concurrent point reads of 1000 documents.
func BenchmarkGetParallel(b *testing.B) {
	const docs = 1000
	s := benchStore(b, Config{})
	ctx := context.Background()
	var ws []collections.Write
	for i := range docs {
		ws = append(ws, create(fmt.Sprintf("bench/d%04d", i), map[string]any{"n": i, "s": "hello world", "tags": []any{"a", "b"}}))
	}
	commitAll(b, s, ws)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1) % docs
			if _, err := s.Get(ctx, testDB, fmt.Sprintf("bench/d%04d", i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
}

// BenchmarkQueryIndexed: equality on a declared index over a collection
// group of 10k documents (100 per value), first page of 20.
func BenchmarkQueryIndexed(b *testing.B) {
	const docs, values = 10000, 100
	s := benchStore(b, Config{Indexes: []collections.Index{tasksIndex}})
	ctx := context.Background()
	var ws []collections.Write
	for i := range docs {
		ws = append(ws, create(fmt.Sprintf("users/u%d/orch-chats/c%d/tasks/t%05d", i%10, i%values, i),
			map[string]any{"chatId": fmt.Sprintf("c%d", i%values), "n": i, "title": "some task"}))
	}
	commitAll(b, s, ws)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q := collections.Query{Collection: tasksIndex.Collection, Limit: 20,
			Filters: []collections.Filter{{Field: "chatId", Op: collections.OpEq, Value: fmt.Sprintf("c%d", i%values)}}}
		i++
		res, err := s.Query(ctx, testDB, q)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Docs) != 20 || res.NextCursor == "" {
			b.Fatalf("%d docs, cursor %q", len(res.Docs), res.NextCursor)
		}
	}
}

// BenchmarkChangedSince: RxDB pulls of 100 documents from checkpoints
// spread over a collection of 10k documents.
func BenchmarkChangedSince(b *testing.B) {
	const docs, limit = 10000, 100
	s := benchStore(b, Config{})
	ctx := context.Background()
	var ws []collections.Write
	for i := range docs {
		ws = append(ws, create(fmt.Sprintf("feed/d%05d", i), map[string]any{"n": i, "s": "hello world"}))
	}
	commitAll(b, s, ws)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		cp := collections.Checkpoint{Seq: int64((i * 997) % (docs - limit))}
		i++
		got, err := s.ChangedSince(ctx, testDB, "feed", cp, limit)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != limit {
			b.Fatalf("%d docs", len(got))
		}
	}
}

// BenchmarkCommitParallelFailing: as BenchmarkCommitParallel/p16, but one
// commit in failEvery creates a document that exists, so most batches hold
// a failing request: the cost of batches that cannot run optimistically.
func BenchmarkCommitParallelFailing(b *testing.B) {
	const failEvery = 16
	s := benchStore(b, Config{})
	ctx := context.Background()
	mustCommit(b, s, create("bench/exists", nil))
	var n, failed atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			p := fmt.Sprintf("bench/d%09d", i)
			if i%failEvery == 0 {
				p = "bench/exists"
			}
			_, err := s.Commit(ctx, testDB, []collections.Write{create(p, map[string]any{"n": i, "s": "hello world"})}, collections.CommitOptions{})
			switch {
			case i%failEvery == 0 && errors.Is(err, collections.ErrAlreadyExists):
				failed.Add(1)
			case err != nil:
				b.Error(err)
				return
			}
		}
	})
	if want := int64(b.N) / failEvery; failed.Load() != want {
		b.Errorf("%d commits failed, want %d", failed.Load(), want)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkReadChanges: the trigger evaluator's read, batches of n changes
// (256, the evaluator's limit, and 20, about one group commit of the create
// benchmark, what it reads after each) of documents shaped like the create
// benchmark's, all decoded (ReadChanges) or none wanted
// (ReadChangesFiltered: the changes of a collection no trigger names). An
// op is one batch; ns/change is per change.
func BenchmarkReadChanges(b *testing.B) {
	const docs = 4096
	s := benchStore(b, Config{})
	ctx := context.Background()
	var ws []collections.Write
	for i := range docs {
		ws = append(ws, create(fmt.Sprintf("bench/r1/items/d%05d", i), map[string]any{
			"title": fmt.Sprintf("item %d", i), "n": i, "done": i%2 == 0, "tags": []any{"a", "b"}, "body": "some text of a usual length for a record"}))
	}
	commitAll(b, s, ws)
	none := func(string, collections.ChangeOp, string) bool { return false }
	for _, batch := range []int{256, 20} {
		for _, tc := range []struct {
			name string
			read func(after int64) ([]collections.Change, error)
		}{
			{"all", func(after int64) ([]collections.Change, error) { return s.ReadChanges(ctx, after, batch) }},
			{"none-wanted", func(after int64) ([]collections.Change, error) {
				return s.ReadChangesFiltered(ctx, after, batch, none)
			}},
		} {
			b.Run(fmt.Sprintf("n%d/%s", batch, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					after := int64((i * batch) % (docs - batch))
					i++
					cs, err := tc.read(after)
					if err != nil {
						b.Fatal(err)
					}
					if len(cs) != batch {
						b.Fatalf("%d changes", len(cs))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/change")
			})
		}
	}
}
