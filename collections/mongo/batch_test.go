package mongo

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/groupcommit"
)

// The committer takes at most MaxBatch requests and, beyond the first,
// about maxBatchBytes of data into one transaction; a request that does not
// fit opens the next batch. Close still commits everything queued.
func TestCommitLoop_BatchBounds(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		testBatchBounds(t, closeFirst)
	}
}

func testBatchBounds(t *testing.T, closeFirst bool) {
	const maxBatch = 4
	s := &Store{cfg: Config{MaxBatch: maxBatch}}
	s.q = groupcommit.New[*request](maxBatch, maxBatchBytes, &s.closed, &s.abandon)
	s.q.C = make(chan *request, 64)
	big := strings.Repeat("x", maxBatchBytes/3)
	var sizes []int
	for i := 0; i < 10; i++ {
		data := map[string]any{"n": "small"}
		if i >= 2 && i < 7 {
			data = map[string]any{"s": big}
		}
		r := &request{ctx: context.Background(), kind: kindCommit, db: "db", writes: []collections.Write{{Type: collections.WriteCreate, Path: "c/x", Data: data}}}
		for _, w := range r.writes {
			r.Size += len(w.Path) + dataBytes(w.Data)
		}
		r.Done = make(chan struct{})
		sizes = append(sizes, r.Size)
		s.q.C <- r
	}
	if closeFirst {
		close(s.q.Stop) // the Close path drains the queue
	}
	var batches [][]int
	committed := 0
	s.q.Run(func(b []*request) {
		var got []int
		size := 0
		for _, r := range b {
			got = append(got, r.Size)
			size += r.Size
			close(r.Done)
		}
		if len(b) > maxBatch || len(b) > 1 && size >= maxBatchBytes {
			t.Errorf("batch of %d requests and %d bytes", len(b), size)
		}
		batches = append(batches, got)
		if committed += len(b); committed == len(sizes) && !closeFirst {
			close(s.q.Stop)
		}
	}, nil)
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	if n != len(sizes) {
		t.Errorf("committed %d requests, want %d (batches %v)", n, len(sizes), batches)
	}
	if len(batches) < 3 {
		t.Errorf("batches %v, want the large requests split", batches)
	}
}

func TestDataBytes(t *testing.T) {
	m, err := collections.DecodeObject([]byte(`{"a":"xyz","b":[1,2.5,true,null],"c":{"d":"e"}}`))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := collections.EncodeData(m, 0)
	if got := dataBytes(m); got < len(enc) || got > 2*len(enc) {
		t.Errorf("dataBytes=%d for %d encoded bytes", got, len(enc))
	}
}

// A batch aborted before its commit by a non-transient error is run again
// request by request, so a poison request fails alone; a failure of the
// commit itself (outcome maybe unknown) is not re-run.
func TestRunBatch_SplitsPoison(t *testing.T) {
	s := &Store{cfg: Config{MaxDocumentBytes: 1 << 20}, log: slog.New(slog.DiscardHandler)}
	good1 := commitReq(w(collections.WriteCreate, "a/1", `{}`))
	poison := commitReq(w(collections.WriteCreate, "a/poison", `{}`))
	good2 := commitReq(w(collections.WriteCreate, "a/2", `{}`))
	refused := errors.New("BSONObjectTooLarge")
	var runs [][]string
	run := func(ctx context.Context, tx *txn) error {
		var paths []string
		for _, r := range tx.batch {
			paths = append(paths, r.writes[0].Path)
		}
		runs = append(runs, paths)
		tx.reset()
		for _, r := range tx.batch {
			if r.writes[0].Path == "a/poison" {
				return &callbackError{refused}
			}
		}
		for _, r := range tx.batch {
			r.results = []collections.WriteResult{{Created: true}}
		}
		return nil
	}
	s.runBatch([]*request{good1, poison, good2}, run, true)
	if len(runs) != 4 {
		t.Errorf("runs %v, want the batch then each request alone", runs)
	}
	if good1.Err != nil || good2.Err != nil || len(good1.results) != 1 || len(good2.results) != 1 {
		t.Errorf("good requests: %v %v, want committed", good1.Err, good2.Err)
	}
	if !errors.Is(poison.Err, refused) || poison.results != nil {
		t.Errorf("poison err=%v results=%v, want its own error", poison.Err, poison.results)
	}

	// A commit error (not a callback error) is everyone's.
	runs = nil
	a, b := commitReq(w(collections.WriteCreate, "a/3", `{}`)), commitReq(w(collections.WriteCreate, "a/4", `{}`))
	unknown := errors.New("commit outcome unknown")
	s.runBatch([]*request{a, b}, func(context.Context, *txn) error { runs = append(runs, nil); return unknown }, true)
	if len(runs) != 1 || !errors.Is(a.Err, unknown) || !errors.Is(b.Err, unknown) {
		t.Errorf("runs=%d a=%v b=%v, want one run and the error for both", len(runs), a.Err, b.Err)
	}
}
