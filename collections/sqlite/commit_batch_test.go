package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
)

// TestBatchFailingRequestAlone: requests batched into one transaction each
// run in their own savepoint. Half the writers send a commit whose second
// write fails (the path exists): its first write must be rolled back and its
// seq not used, while every other request in the same batch commits. The
// committer is held in BEGIN so the requests queue and share batches (as in
// TestGroupCommit); the histogram shows that at least one batch held more
// than one request.
func TestBatchFailingRequestAlone(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	reg := prometheus.NewRegistry()
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1, Registerer: reg})
	if _, err := s.Commit(ctx, testDB, []collections.Write{create("f/exists", nil)}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, path)

	const writers, each = 32, 10
	var wg sync.WaitGroup
	var started atomic.Int32
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if i == 0 {
					started.Add(1)
				}
				p := fmt.Sprintf("f/w%02d-%02d", w, i)
				if w%2 == 0 {
					if _, err := s.Commit(ctx, testDB, []collections.Write{create(p, nil)}, collections.CommitOptions{}); err != nil {
						errs <- fmt.Errorf("%s: %w", p, err)
					}
					continue
				}
				_, err := s.Commit(ctx, testDB, []collections.Write{create(p, nil), create("f/exists", nil)}, collections.CommitOptions{})
				var we *collections.WriteError
				if !errors.As(err, &we) || we.Index != 1 || !errors.Is(err, collections.ErrAlreadyExists) {
					errs <- fmt.Errorf("%s: err %v, want a WriteError at 1 with ErrAlreadyExists", p, err)
				}
			}
		})
	}
	waitFor(t, "every writer to start its first commit", func() bool { return started.Load() == writers })
	release()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitOrFail(t, done, "writers")
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	const ok = writers / 2 * each
	if h := mustHead(t, s); h != 1+ok {
		t.Errorf("head %d, want %d", h, 1+ok)
	}
	changes, err := s.ReadChanges(ctx, 0, 2*ok)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1+ok {
		t.Errorf("%d changes, want %d", len(changes), 1+ok)
	}
	for i, c := range changes {
		if c.Seq != int64(i+1) {
			t.Fatalf("change %d has seq %d: seqs must stay consecutive", i, c.Seq)
		}
	}
	for w := range writers {
		for i := range each {
			p := fmt.Sprintf("f/w%02d-%02d", w, i)
			_, err := s.Get(ctx, testDB, p)
			switch {
			case w%2 == 0 && err != nil:
				t.Errorf("%s: %v, want committed", p, err)
			case w%2 == 1 && !errors.Is(err, collections.ErrNotFound):
				t.Errorf("%s: %v, want absent (its request failed)", p, err)
			}
		}
	}
	count, sum := batchHistogram(t, reg)
	if count >= sum {
		t.Errorf("%d batches for %d requests: no request shared a batch", count, sum)
	}
	t.Logf("%d requests in %d batches (average %.1f)", sum, count, float64(sum)/float64(count))
}

// TestLoneFailingRequestRolledBack: a request alone in its batch runs
// without a savepoint; when its second write fails, its first write must
// still be rolled back, its seq not used, and the next commit must work.
func TestLoneFailingRequestRolledBack(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	if _, err := s.Commit(ctx, testDB, []collections.Write{create("f/exists", nil)}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p := fmt.Sprintf("f/lone%d", i)
		_, err := s.Commit(ctx, testDB, []collections.Write{create(p, nil), create("f/exists", nil)}, collections.CommitOptions{})
		var we *collections.WriteError
		if !errors.As(err, &we) || we.Index != 1 || !errors.Is(err, collections.ErrAlreadyExists) {
			t.Fatalf("%s: err %v, want a WriteError at 1 with ErrAlreadyExists", p, err)
		}
		if _, err := s.Get(ctx, testDB, p); !errors.Is(err, collections.ErrNotFound) {
			t.Fatalf("%s: Get err %v, want ErrNotFound (the first write must be rolled back)", p, err)
		}
		if h := mustHead(t, s); h != int64(1+i) {
			t.Fatalf("head %d, want %d", h, 1+i)
		}
		if _, err := s.Commit(ctx, testDB, []collections.Write{create(p+"-ok", nil)}, collections.CommitOptions{}); err != nil {
			t.Fatalf("commit after a failed one: %v", err)
		}
	}
}
