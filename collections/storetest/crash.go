package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/loomdb/loom/collections"
)

// testCrash: concurrent writers commit, the store is abandoned as by kill -9
// and reopened; every acknowledged write must be there, the change log must
// be contiguous, and new writes must continue after the old seqs.
//
// The writers have stopped when Crash is called, so "acknowledged" is
// exact; an engine that acknowledges before its commit is durable loses
// those writes here.
func testCrash(t *testing.T, f Factory) {
	if f.Crash == nil {
		t.Skip("Factory.Crash is nil: the engine has no crash hook")
	}
	h := open(t, f, Options{})
	writers := 8
	commits := scale(12, 5)

	type ack struct {
		path    string
		seq     int64
		version int64
		deleted bool
		data    map[string]any
	}
	var (
		mu   sync.Mutex
		acks []ack
		errs []error
		wg   sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			live := map[string]bool{}
			for i := 0; i < commits; i++ {
				own := fmt.Sprintf("crash/w%d-%d", w, r.IntN(3))
				shared := fmt.Sprintf("crash/shared-%d", r.IntN(3))
				data := map[string]any{"w": num(int64(w)), "i": num(int64(i))}
				var ws []collections.Write
				switch {
				case !live[own]:
					ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: own, Data: data})
				case r.IntN(4) == 0:
					ws = append(ws, del(own))
				default:
					ws = append(ws, collections.Write{Type: collections.WriteUpdate, Path: own, Data: data})
				}
				ws = append(ws, collections.Write{Type: collections.WriteReplace, Path: shared, Data: data})
				if r.IntN(3) == 0 {
					ws = append(ws, collections.Write{Type: collections.WriteReplace, Path: fmt.Sprintf("_crash/w%d", w), Data: data})
				}
				res, err := h.commit(db, ws...)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("writer %d commit %d: %w", w, i, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				for k, wr := range ws {
					live[wr.Path] = wr.Type != collections.WriteDelete
					d := res[k].Doc
					acks = append(acks, ack{wr.Path, d.Seq, d.Version, d.Deleted, collections.CloneValue(d.Data).(map[string]any)})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	h.mustSetCursor("crash-cursor", 3)
	headBefore := h.mustHead()

	h.crash(f)

	// The last acknowledged state per path: the highest seq for logged
	// paths, the highest version for system ones (not logged, seq 0).
	final := map[string]ack{}
	var maxSeq int64
	for _, a := range acks {
		cur, ok := final[a.path]
		if !ok || a.seq > cur.seq || (a.seq == 0 && a.version > cur.version) {
			final[a.path] = a
		}
		maxSeq = max(maxSeq, a.seq)
	}
	for p, a := range final {
		d, err := h.get(db, p)
		switch {
		case a.deleted:
			if !errors.Is(err, collections.ErrNotFound) {
				t.Errorf("after crash: Get(%s)=%s, %v, want ErrNotFound (deleted at version %d)", p, docString(d), err, a.version)
			}
		case err != nil:
			t.Errorf("after crash: Get(%s): %v, want version %d", p, err, a.version)
		case d.Version != a.version || d.Seq != a.seq || !collections.Equal(d.Data, a.data):
			t.Errorf("after crash: %s, want version %d seq %d %s", docString(d), a.version, a.seq, dataString(a.data))
		}
	}

	cs := h.mustChangesSince(0) // contiguous, or it fails
	bySeq := map[int64]collections.Change{}
	for _, c := range cs {
		bySeq[c.Seq] = c
	}
	for _, a := range acks {
		if a.seq == 0 {
			continue
		}
		if c, ok := bySeq[a.seq]; !ok || c.Path != a.path || c.After == nil || c.After.Version != a.version {
			t.Errorf("after crash: acknowledged change %d (%s v%d) missing from the log", a.seq, a.path, a.version)
		}
	}
	head := h.mustHead()
	if head < maxSeq || head < headBefore {
		t.Errorf("after crash: Head=%d, want >= %d (last acknowledged) and >= %d (before the crash)", head, maxSeq, headBefore)
	}
	if got := h.mustCursor("crash-cursor"); got != 3 {
		t.Errorf("after crash: Cursor=%d, want 3", got)
	}

	ch := h.s.Notify()
	d := h.mustCommitOne(db, h.create("crash/after", `{}`))
	if d.Seq <= head {
		t.Errorf("after crash: new write seq=%d, want > %d", d.Seq, head)
	}
	h.waitNotify(ch, "a commit on the reopened store")
}
