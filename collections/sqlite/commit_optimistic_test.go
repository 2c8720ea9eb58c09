package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// batchCommitter runs exact batches through a committer of s on the test
// goroutine, so which requests share a transaction, and in what order, is
// chosen by the test rather than by timing. The store's own committer is
// idle meanwhile (nothing is submitted to it) and is stale afterwards:
// tests only read from s, then close and reopen it.
func batchCommitter(t *testing.T, s *Store) *committer {
	t.Helper()
	c, err := newCommitter(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

func commitReq(ctx context.Context, opts collections.CommitOptions, writes ...collections.Write) *request {
	r := &request{ctx: ctx, kind: kindCommit, db: testDB, writes: writes, opts: opts}
	r.Done = make(chan struct{}) // commit closes it, as Submit's caller expects
	return r
}

// TestOptimisticBatchFailingRequest: a batch of several requests runs
// without savepoints first; when request k fails, for each way a request
// can fail, the attempt is abandoned and the batch runs again with a
// savepoint per request. Exactly request k fails with its own error, its
// writes (also a first write that succeeded before its second failed) are
// absent, every other request commits with seqs consecutive in batch
// order, the change log holds only the committed writes, and a reopened
// store shows the same.
func TestOptimisticBatchFailingRequest(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1, MaxDocumentBytes: 1024})
	mustCommit(t, s, create("f/exists", map[string]any{"v": 1}))
	if err := s.SetCursor(ctx, "cur", 0); err != nil {
		t.Fatal(err)
	}
	c := batchCommitter(t, s)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	failures := []struct {
		name string
		req  func(own string) *request
		want func(error) bool
	}{
		{"exists", func(own string) *request {
			return commitReq(ctx, collections.CommitOptions{}, create("f/exists", nil))
		}, func(err error) bool { return errors.Is(err, collections.ErrAlreadyExists) }},
		{"precondition", func(own string) *request {
			return commitReq(ctx, collections.CommitOptions{}, collections.Write{Type: collections.WriteUpdate, Path: "f/exists",
				Data:    map[string]any{"v": 2},
				IfMatch: []collections.Filter{{Field: "version", Op: "==", Value: json.Number("99")}}})
		}, func(err error) bool {
			var pe *collections.PreconditionError
			return errors.As(err, &pe)
		}},
		{"too-large", func(own string) *request {
			return commitReq(ctx, collections.CommitOptions{}, create(own, map[string]any{"s": strings.Repeat("x", 2000)}))
		}, func(err error) bool { return errors.Is(err, collections.ErrTooLarge) }},
		{"second-write", func(own string) *request {
			return commitReq(ctx, collections.CommitOptions{}, create(own, nil), create("f/exists", nil))
		}, func(err error) bool {
			var we *collections.WriteError
			return errors.As(err, &we) && we.Index == 1 && errors.Is(err, collections.ErrAlreadyExists)
		}},
		{"cursor", func(own string) *request {
			return commitReq(ctx, collections.CommitOptions{Cursor: &collections.CursorAdvance{Name: "cur", From: 7, To: 8}}, create(own, nil))
		}, func(err error) bool { return errors.Is(err, collections.ErrCursorConflict) }},
		{"canceled", func(own string) *request {
			return commitReq(canceled, collections.CommitOptions{}, create(own, nil))
		}, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}

	const n = 6
	for _, f := range failures {
		for _, k := range []int{0, 2, n - 1} {
			label := fmt.Sprintf("%s@%d", f.name, k)
			c.guarded = 0 // every case starts optimistic
			head := c.seq
			batch := make([]*request, n)
			for i := range batch {
				own := fmt.Sprintf("b/%s-%d-%d", f.name, k, i)
				if i == k {
					batch[i] = f.req(own)
					continue
				}
				batch[i] = commitReq(ctx, collections.CommitOptions{}, create(own+"a", map[string]any{"i": i}), create(own+"b", nil))
			}
			c.commit(batch)

			var want []string // committed paths in seq order
			for i, r := range batch {
				own := fmt.Sprintf("b/%s-%d-%d", f.name, k, i)
				if i == k {
					if !f.want(r.Err) || r.results != nil {
						t.Errorf("%s: failing request: err %v, results %v", label, r.Err, r.results)
					}
					if _, err := s.Get(ctx, testDB, own); !errors.Is(err, collections.ErrNotFound) {
						t.Errorf("%s: %s: %v, want absent", label, own, err)
					}
					continue
				}
				if r.Err != nil || len(r.results) != 2 {
					t.Errorf("%s: request %d: err %v, %d results", label, i, r.Err, len(r.results))
					continue
				}
				for j, res := range r.results {
					p := own + string(rune('a'+j))
					want = append(want, p)
					if res.Doc.Path != p || res.Doc.Seq != head+int64(len(want)) || !res.Created {
						t.Errorf("%s: result %s seq %d created %v, want %s seq %d", label, res.Doc.Path, res.Doc.Seq, res.Created, p, head+int64(len(want)))
					}
				}
			}
			if f.name != "canceled" && c.guarded != guardedBatches {
				t.Errorf("%s: guarded %d: the optimistic attempt was not abandoned", label, c.guarded)
			}
			if got := mustHead(t, s); got != head+int64(len(want)) {
				t.Errorf("%s: head %d, want %d", label, got, head+int64(len(want)))
			}
			changes, err := s.ReadChanges(ctx, head, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, ch := range changes {
				if ch.Seq != head+int64(i+1) {
					t.Errorf("%s: change %d has seq %d, want %d", label, i, ch.Seq, head+int64(i+1))
				}
				got = append(got, ch.Path)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: change log %v, want %v", label, got, want)
			}
		}
	}

	// An optimistic batch without a failure commits as one.
	c.guarded = 0
	head := c.seq
	batch := []*request{
		commitReq(ctx, collections.CommitOptions{}, create("ok/1", nil)),
		commitReq(ctx, collections.CommitOptions{Cursor: &collections.CursorAdvance{Name: "cur", From: 0, To: 5}}, create("ok/2", nil)),
		commitReq(ctx, collections.CommitOptions{}, collections.Write{Type: collections.WriteUpdate, Path: "f/exists", Data: map[string]any{"v": 3}}),
	}
	c.commit(batch)
	for i, r := range batch {
		if r.Err != nil || r.results[0].Doc.Seq != head+int64(i+1) {
			t.Errorf("clean batch: request %d: err %v results %v", i, r.Err, r.results)
		}
	}
	if c.guarded != 0 {
		t.Errorf("clean batch: guarded %d, want 0", c.guarded)
	}

	before := allDocs(t, s, testDB)
	beforeLog, err := s.ReadChanges(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	c.close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path, PurgeInterval: -1, MaxDocumentBytes: 1024})
	if got := mustHead(t, s); got != c.seq {
		t.Errorf("reopened: head %d, want %d", got, c.seq)
	}
	if after := allDocs(t, s, testDB); !reflect.DeepEqual(paths(after), paths(before)) {
		t.Errorf("reopened: documents %v, want %v", paths(after), paths(before))
	}
	afterLog, err := s.ReadChanges(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(afterLog) != len(beforeLog) {
		t.Errorf("reopened: %d changes, want %d", len(afterLog), len(beforeLog))
	}
	// The store's own committer now takes over from the persisted meta.
	if res := mustCommit(t, s, create("ok/after", nil)); res[0].Doc.Seq != c.seq+1 {
		t.Errorf("after reopen: seq %d, want %d", res[0].Doc.Seq, c.seq+1)
	}
}

// TestGuardedBatchesAfterFailure: after an optimistic attempt failed, the
// next guardedBatches batches of several requests run with savepoints
// from the start (no second attempt), then optimism resumes; lone
// requests do not use up the count.
func TestGuardedBatchesAfterFailure(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	mustCommit(t, s, create("f/exists", nil))
	c := batchCommitter(t, s)
	i := 0
	next := func() *request {
		i++
		return commitReq(ctx, collections.CommitOptions{}, create(fmt.Sprintf("g/%03d", i), nil))
	}
	c.commit([]*request{next(), commitReq(ctx, collections.CommitOptions{}, create("f/exists", nil))})
	if c.guarded != guardedBatches {
		t.Fatalf("guarded %d after a failed attempt, want %d", c.guarded, guardedBatches)
	}
	c.commit([]*request{next()})
	if c.guarded != guardedBatches {
		t.Fatalf("a lone request used up the count: %d", c.guarded)
	}
	for range guardedBatches {
		c.commit([]*request{next(), next()})
	}
	if c.guarded != 0 {
		t.Fatalf("guarded %d after %d batches, want 0", c.guarded, guardedBatches)
	}
	if got, want := mustHead(t, s), int64(2+1+2*guardedBatches); got != want {
		t.Errorf("head %d, want %d", got, want)
	}
}

// TestLastSystemChange: the engine's claim that no system change lies in
// (last, head] holds after commits of ordinary documents, of a trigger
// state, and of a trigger state rolled back with its failing request.
func TestLastSystemChange(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1})
	check := func(label string, wantLast int64) {
		t.Helper()
		last, head := s.LastSystemChange()
		if head != mustHead(t, s) || last > head {
			t.Fatalf("%s: last %d head %d (store head %d)", label, last, head, mustHead(t, s))
		}
		if last < wantLast {
			t.Fatalf("%s: last %d, want at least %d: a system change is hidden", label, last, wantLast)
		}
		if last != wantLast {
			t.Errorf("%s: last %d, want %d", label, last, wantLast)
		}
	}
	check("empty", 0)
	mustCommit(t, s, create("notes/a", nil))
	check("ordinary", 0)
	res := mustCommit(t, s, create("_triggers/t1", nil), create("_outbox/o1", nil))
	check("trigger state", res[0].Doc.Seq)
	mustCommit(t, s, create("notes/b", nil), create("notes/c", nil))
	check("ordinary after", res[0].Doc.Seq)

	// A batch where the request that writes a trigger state fails: the
	// claim may err high, never low.
	c := batchCommitter(t, s)
	batch := []*request{
		commitReq(ctx, collections.CommitOptions{}, create("notes/d", nil)),
		commitReq(ctx, collections.CommitOptions{}, create("_triggers/t2", nil), create("notes/a", nil)),
		commitReq(ctx, collections.CommitOptions{}, create("notes/e", nil)),
	}
	c.commit(batch)
	if batch[1].Err == nil || batch[0].Err != nil || batch[2].Err != nil {
		t.Fatalf("errors %v %v %v", batch[0].Err, batch[1].Err, batch[2].Err)
	}
	if last, _ := s.LastSystemChange(); last < res[0].Doc.Seq {
		t.Fatalf("last %d after a failed state write, want at least %d", last, res[0].Doc.Seq)
	}
	batch = []*request{
		commitReq(ctx, collections.CommitOptions{}, create("notes/f", nil)),
		commitReq(ctx, collections.CommitOptions{}, create("_triggers/t3", nil)),
	}
	c.commit(batch)
	if last, head := s.LastSystemChange(); last != batch[1].results[0].Doc.Seq || head != batch[1].results[0].Doc.Seq {
		t.Fatalf("last %d head %d, want both %d", last, head, batch[1].results[0].Doc.Seq)
	}

	// Reopened, the changes before the open are unknown: last is the head.
	c.close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path, PurgeInterval: -1})
	check("reopened", mustHead(t, s))
}

// TestCreateMeetsRow: a create is first tried as the insert of a new row,
// without loading its path. When a row is there after all, the answer is
// the one the loaded row gives: over a live document ErrAlreadyExists
// (even when the new data is also too large), over a tombstone a create
// that continues its version with the tombstone as the change's before;
// no seq is lost to the refused insert, in a lone request or in a batch.
func TestCreateMeetsRow(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, MaxDocumentBytes: 1024})
	mustCommit(t, s, create("c/live", map[string]any{"v": 1}), create("c/gone", map[string]any{"v": 1}))
	mustCommit(t, s, collections.Write{Type: collections.WriteDelete, Path: "c/gone"})
	head := mustHead(t, s)

	_, err := s.Commit(ctx, testDB, []collections.Write{create("c/live", map[string]any{"s": strings.Repeat("x", 2000)})}, collections.CommitOptions{})
	if !errors.Is(err, collections.ErrAlreadyExists) {
		t.Fatalf("create of a live path with too large data: %v, want ErrAlreadyExists", err)
	}
	res := mustCommit(t, s, create("c/gone", map[string]any{"v": 2}), create("c/new", nil))
	if d := res[0].Doc; d.Version != 3 || d.Deleted || !res[0].Created || d.Seq != head+1 {
		t.Fatalf("create over a tombstone: %+v created %v, want version 3 seq %d", d, res[0].Created, head+1)
	}
	if d := res[1].Doc; d.Version != 1 || d.Seq != head+2 {
		t.Fatalf("create after it: version %d seq %d, want 1 and %d", d.Version, d.Seq, head+2)
	}
	changes, err := s.ReadChanges(ctx, head, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || changes[0].Op != collections.OpCreate || changes[0].Before == nil ||
		changes[0].Before.Version != 2 || !changes[0].Before.Deleted || changes[1].Before != nil {
		t.Fatalf("changes %+v: want the create over the tombstone with it as before, then a plain create", changes)
	}

	// In a batch: the second create of one path fails alone.
	c := batchCommitter(t, s)
	batch := []*request{
		commitReq(ctx, collections.CommitOptions{}, create("c/twice", nil)),
		commitReq(ctx, collections.CommitOptions{}, create("c/twice", nil)),
		commitReq(ctx, collections.CommitOptions{}, create("c/other", nil)),
	}
	c.commit(batch)
	if batch[0].Err != nil || !errors.Is(batch[1].Err, collections.ErrAlreadyExists) || batch[2].Err != nil {
		t.Fatalf("errors %v, %v, %v: want only the second create to fail", batch[0].Err, batch[1].Err, batch[2].Err)
	}
	if a, b := batch[0].results[0].Doc.Seq, batch[2].results[0].Doc.Seq; a != head+3 || b != head+4 {
		t.Fatalf("seqs %d, %d, want %d, %d", a, b, head+3, head+4)
	}
}
