package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// TestMultiStore: two Stores on one database behave as two Loom nodes.
func TestMultiStore(t *testing.T) {
	cfg := testConfig(t)
	a, b := mustOpen(t, cfg), mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(path string) collections.Write {
		return collections.Write{Type: collections.WriteCreate, Path: path, Data: map[string]any{}}
	}

	t.Run("SeqOrderAcrossStores", func(t *testing.T) {
		const per = 40
		var mu sync.Mutex
		seqs := map[int64]string{}
		var wg sync.WaitGroup
		for n, s := range []*Store{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					path := fmt.Sprintf("m/n%d-%d", n, i)
					res, err := s.Commit(ctx, "db", []collections.Write{create(path)}, collections.CommitOptions{})
					if err != nil {
						t.Errorf("Commit %s: %v", path, err)
						return
					}
					mu.Lock()
					if prev, dup := seqs[res[0].Doc.Seq]; dup {
						t.Errorf("seq %d given to %s and %s", res[0].Doc.Seq, prev, path)
					}
					seqs[res[0].Doc.Seq] = path
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, s := range []*Store{a, b} {
			head, err := s.Head(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := s.ReadChanges(ctx, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(cs)) != head || len(cs) != len(seqs) {
				t.Fatalf("ReadChanges=%d changes, Head=%d, commits=%d: want all equal", len(cs), head, len(seqs))
			}
			for i, c := range cs {
				if c.Seq != int64(i+1) || seqs[c.Seq] != c.Path {
					t.Fatalf("change %d: seq %d path %s, want seq %d path %s (gap-free, in commit order)", i, c.Seq, c.Path, i+1, seqs[c.Seq])
				}
			}
		}
	})

	t.Run("NotifyWakesTheOther", func(t *testing.T) {
		ch := b.Notify()
		if _, err := a.Commit(ctx, "db", []collections.Write{create("m/wake")}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a commit on one store did not wake Notify on the other within 10s")
		}
	})

	t.Run("CursorCAS", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Commit(ctx, "db", []collections.Write{create(fmt.Sprintf("_outbox/o%d", i))},
					collections.CommitOptions{Cursor: &collections.CursorAdvance{Name: "trig", From: 0, To: 1}})
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, collections.ErrCursorConflict):
				t.Errorf("losing advance err=%v, want ErrCursorConflict", err)
			}
		}
		if won != 1 {
			t.Errorf("%d advances from 0 succeeded, want exactly 1 (errors %v)", won, errs)
		}
	})

	t.Run("ClaimTakeover", func(t *testing.T) {
		if _, err := a.Commit(ctx, "db", []collections.Write{create("m/job")}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		lease := time.Minute
		if _, err := collections.Claim(ctx, a, "db", "m/job", "A", lease, now); err != nil {
			t.Fatalf("Claim by A: %v", err)
		}
		if _, err := collections.Claim(ctx, b, "db", "m/job", "B", lease, now); !errors.Is(err, collections.ErrPreconditionFailed) {
			t.Fatalf("Claim by B while A holds the lease err=%v, want ErrPreconditionFailed", err)
		}
		d, err := collections.Claim(ctx, b, "db", "m/job", "B", lease, now.Add(2*lease))
		if err != nil {
			t.Fatalf("Claim by B after the lease expired: %v", err)
		}
		if owner, _ := collections.Lookup(d, collections.FieldLeaseOwner); owner != "B" {
			t.Errorf("leaseOwner=%v after the takeover, want B", owner)
		}
		got, err := a.Get(ctx, "db", "m/job")
		if err != nil {
			t.Fatal(err)
		}
		if owner, _ := collections.Lookup(got, collections.FieldLeaseOwner); owner != "B" {
			t.Errorf("the other store reads leaseOwner=%v, want B", owner)
		}
	})
}

// TestQuery_GoFallback: a document whose order keys would be too large is
// stored without them, and queries over its collection run in Go with the
// same results.
func TestQuery_GoFallback(t *testing.T) {
	s := mustOpen(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", maxKeyBytes+1) // a system document may be this large
	writes := []collections.Write{
		{Type: collections.WriteCreate, Path: "_big/a", Data: map[string]any{"s": big, "n": json.Number("2")}},
		{Type: collections.WriteCreate, Path: "_big/b", Data: map[string]any{"s": "small", "n": json.Number("1")}},
		{Type: collections.WriteCreate, Path: "_big/c", Data: map[string]any{"n": json.Number("3")}},
	}
	if _, err := s.Commit(ctx, "db", writes, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	q := collections.Query{Collection: "_big", Filters: []collections.Filter{{Field: "n", Op: collections.OpGe, Value: json.Number("2")}},
		OrderBy: []collections.Order{{Field: "s", Direction: "desc"}}, Limit: 1}
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		res, err := s.Query(ctx, "db", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.Docs {
			got = append(got, d.Path)
		}
		if res.NextCursor == "" {
			break
		}
		q.StartAfter = res.NextCursor
	}
	// s desc: the string first, then the document without s.
	if strings.Join(got, " ") != "_big/a _big/c" {
		t.Errorf("pages=%v, want [_big/a _big/c]", got)
	}
}
