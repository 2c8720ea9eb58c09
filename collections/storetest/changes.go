package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

func (h *harness) changedSince(dbName, coll string, cp collections.Checkpoint, limit int) []*collections.Document {
	h.t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	docs, err := h.s.ChangedSince(ctx, dbName, coll, cp, limit)
	if err != nil {
		h.t.Fatalf("ChangedSince(%s, %s, %+v, %d): %v", dbName, coll, cp, limit, err)
	}
	return docs
}

// testChangedSince: the RxDB pull order is (Seq of the last change, ID),
// tombstones included, strictly after the checkpoint.
func testChangedSince(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	const coll = "cs/a/items"
	seqOf := map[string]int64{}
	write := func(ws ...collections.Write) {
		for i, r := range h.mustCommit(db, ws...) {
			seqOf[ws[i].Path] = r.Doc.Seq
		}
	}
	for _, id := range []string{"i1", "i2", "i3", "i4", "i5"} {
		write(h.create(coll+"/"+id, `{"id0":"`+id+`"}`))
	}
	// Neighbours: same shape, subcollection, parent, other database.
	write(h.create("cs/b/items/i1", `{}`), h.create(coll+"/i1/sub/y", `{}`), h.create("cs/a", `{}`))
	h.mustCommit("other", h.create(coll+"/i9", `{}`))
	write(h.update(coll+"/i2", `{"v":2}`))
	write(del(coll + "/i3"))
	write(h.create(coll+"/i6", `{}`), h.create(coll+"/i7", `{}`))

	order := []string{"i1", "i4", "i5", "i2", "i3", "i6", "i7"}
	all := h.changedSince(db, coll, collections.Checkpoint{}, 100)
	if got := idsOf(all); !slices.Equal(got, order) {
		t.Fatalf("ChangedSince from the start=%v, want %v", got, order)
	}
	for _, d := range all {
		if want := seqOf[d.Path]; d.Seq != want {
			t.Errorf("%s seq=%d, want %d (its last change)", d.Path, d.Seq, want)
		}
		if d.Deleted != (d.ID == "i3") {
			t.Errorf("%s deleted=%v", d.Path, d.Deleted)
		}
	}
	if all[3].Version != 2 || all[4].Version != 2 {
		t.Errorf("versions of i2, i3=%d, %d, want 2, 2", all[3].Version, all[4].Version)
	}

	s4 := seqOf[coll+"/i4"]
	s7 := seqOf[coll+"/i7"]
	for _, tc := range []struct {
		cp    collections.Checkpoint
		limit int
		want  []string
	}{
		{collections.Checkpoint{Seq: s4, ID: "i4"}, 100, order[2:]},
		{collections.Checkpoint{Seq: s4, ID: ""}, 100, order[1:]},
		{collections.Checkpoint{Seq: s4, ID: "i3"}, 100, order[1:]},
		{collections.Checkpoint{Seq: s4, ID: "zzz"}, 100, order[2:]},
		{collections.Checkpoint{Seq: s7, ID: "i7"}, 100, nil},
		{collections.Checkpoint{Seq: s7, ID: ""}, 100, []string{"i7"}},
		{collections.Checkpoint{Seq: s7 + 100}, 100, nil},
		{collections.Checkpoint{}, 2, order[:2]},
		{collections.Checkpoint{Seq: s4, ID: "i4"}, 3, order[2:5]},
	} {
		if got := idsOf(h.changedSince(db, coll, tc.cp, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("ChangedSince(%+v, %d)=%v, want %v", tc.cp, tc.limit, got, tc.want)
		}
	}

	// Paging by the last document's (Seq, ID) visits everything once.
	var paged []string
	cp := collections.Checkpoint{}
	for i := 0; i < 20; i++ {
		docs := h.changedSince(db, coll, cp, 2)
		if len(docs) == 0 {
			break
		}
		paged = append(paged, idsOf(docs)...)
		last := docs[len(docs)-1]
		cp = collections.Checkpoint{Seq: last.Seq, ID: last.ID}
	}
	if !slices.Equal(paged, order) {
		t.Errorf("paging by checkpoint=%v, want %v", paged, order)
	}

	if got := idsOf(h.changedSince("other", coll, collections.Checkpoint{}, 100)); !slices.Equal(got, []string{"i9"}) {
		t.Errorf("ChangedSince in db other=%v, want [i9]", got)
	}
	if got := h.changedSince(db, "cs/c/items", collections.Checkpoint{}, 100); len(got) != 0 {
		t.Errorf("ChangedSince of an empty collection=%v, want none", paths(got))
	}
	// A write moves the document to the end.
	write(h.update(coll+"/i1", `{"v":3}`))
	if got := idsOf(h.changedSince(db, coll, collections.Checkpoint{Seq: s7, ID: "i7"}, 100)); !slices.Equal(got, []string{"i1"}) {
		t.Errorf("ChangedSince after updating i1=%v, want [i1]", got)
	}
}

// wantChange describes one expected change-log entry.
type wantChange struct {
	db     string
	op     collections.ChangeOp
	path   string
	before int64 // Before.Version; 0 = Before must be nil (-1: nil or a tombstone)
	after  int64
}

// testChangeLog runs a script of writes and checks the exact change log.
func testChangeLog(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	if got := h.mustHead(); got != 0 {
		t.Errorf("Head of a fresh store=%d, want 0", got)
	}
	if cs := h.mustReadChanges(0, 10); len(cs) != 0 {
		t.Errorf("ReadChanges on a fresh store=%v, want none", changePaths(cs))
	}
	start := nowMs()
	ch := h.s.Notify()
	var results []collections.WriteResult
	commit := func(dbName string, ws ...collections.Write) {
		results = append(results, h.mustCommit(dbName, ws...)...)
	}
	commit(db, h.create("log/a", `{"x":1}`))
	h.waitNotify(ch, "the first commit")
	commit(db, h.update("log/a", `{"y":2}`))
	commit(db, h.replace("log/a", `{"z":3}`))
	commit(db, del("log/a"))
	commit(db, h.create("log/a", `{"w":4}`))
	commit("other", h.create("log/b", `{}`))
	commit(db, h.create("log/c", `{"n":1}`), h.update("log/c", `{"n":2}`))
	commit(db, h.replace("log/d", `{}`))
	end := nowMs()

	want := []wantChange{
		{db, collections.OpCreate, "log/a", 0, 1},
		{db, collections.OpUpdate, "log/a", 1, 2},
		{db, collections.OpUpdate, "log/a", 2, 3},
		{db, collections.OpDelete, "log/a", 3, 4},
		{db, collections.OpCreate, "log/a", -1, 5},
		{"other", collections.OpCreate, "log/b", 0, 1},
		{db, collections.OpCreate, "log/c", 0, 1},
		{db, collections.OpUpdate, "log/c", 1, 2},
		{db, collections.OpCreate, "log/d", 0, 1},
	}
	cs := h.mustChangesSince(0)
	if len(cs) != len(want) {
		t.Fatalf("change log=%v, want %d changes", changePaths(cs), len(want))
	}
	first := cs[0].Seq
	for i, w := range want {
		c := cs[i]
		if c.Seq != first+int64(i) || c.DB != w.db || c.Op != w.op || c.Path != w.path {
			t.Errorf("change %d=%d %s %s %s, want %d %s %s %s", i, c.Seq, c.DB, c.Op, c.Path, first+int64(i), w.db, w.op, w.path)
			continue
		}
		if c.Seq != results[i].Doc.Seq {
			t.Errorf("change %d seq=%d, want the commit result's %d", i, c.Seq, results[i].Doc.Seq)
		}
		switch {
		case w.before == 0 && c.Before != nil:
			t.Errorf("change %d (%s %s) Before=%s, want nil", i, c.Op, c.Path, docString(c.Before))
		case w.before == -1 && c.Before != nil && !c.Before.Deleted:
			t.Errorf("change %d (%s %s) Before=%s, want nil or the tombstone", i, c.Op, c.Path, docString(c.Before))
		case w.before > 0 && (c.Before == nil || c.Before.Version != w.before):
			t.Errorf("change %d (%s %s) Before=%s, want version %d", i, c.Op, c.Path, docString(c.Before), w.before)
		}
		if c.After == nil || c.After.Version != w.after || !collections.Equal(c.After.Data, results[i].Doc.Data) {
			t.Errorf("change %d (%s %s) After=%s, want version %d as the commit returned %s", i, c.Op, c.Path, docString(c.After), w.after, docString(results[i].Doc))
		}
		wantTime(t, fmt.Sprintf("change %d time", i), c.Time, start, end)
	}
	if cs[1].Before != nil && !collections.Equal(cs[1].Before.Data, obj(t, `{"x":1}`)) {
		t.Errorf("update Before data=%s, want {\"x\":1}", dataString(cs[1].Before.Data))
	}
	if cs[1].After != nil && !collections.Equal(cs[1].After.Data, obj(t, `{"x":1,"y":2}`)) {
		t.Errorf("update After data=%s, want {\"x\":1,\"y\":2}", dataString(cs[1].After.Data))
	}
	head := h.mustHead()
	if last := cs[len(cs)-1].Seq; head != last {
		t.Errorf("Head=%d, want the last seq %d", head, last)
	}

	// Paging with any limit reads exactly the same log.
	for _, limit := range []int{1, 2, 3, 4, 100} {
		var got []collections.Change
		after := first - 1
		for i := 0; i < 100; i++ {
			page := h.mustReadChanges(after, limit)
			if len(page) > limit {
				t.Errorf("ReadChanges(%d, %d) returned %d changes", after, limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1].Seq
		}
		if len(got) != len(cs) {
			t.Errorf("paging with limit %d read %d changes, want %d", limit, len(got), len(cs))
			continue
		}
		for i := range got {
			if got[i].Seq != cs[i].Seq || got[i].Path != cs[i].Path {
				t.Errorf("paging with limit %d: change %d=%d %s, want %d %s", limit, i, got[i].Seq, got[i].Path, cs[i].Seq, cs[i].Path)
				break
			}
		}
	}
	h.checkFiltered(cs, first)
	if page := h.mustReadChanges(first+2, 2); len(page) != 2 || page[0].Seq != first+3 || page[1].Seq != first+4 {
		t.Errorf("ReadChanges(%d, 2)=%v, want seqs %d and %d", first+2, changePaths(page), first+3, first+4)
	}
	if page := h.mustReadChanges(head, 10); len(page) != 0 {
		t.Errorf("ReadChanges(head, 10)=%v, want none", changePaths(page))
	}
	if page := h.mustReadChanges(first, 0); len(page) != 0 {
		t.Errorf("ReadChanges(%d, 0)=%v, want none (limit 0 only checks the position)", first, changePaths(page))
	}

	// Notify wakes a waiter after a later commit.
	ch = h.s.Notify()
	h.mustCommit(db, h.update("log/d", `{"n":1}`))
	h.waitNotify(ch, "a commit")
}

// testConcurrentTail: 16 goroutines commit while a tailer follows Notify and
// ReadChanges. The tailer must see every committed change exactly once, in
// seq order without gaps, and every commit result's seq must be among them.
func testConcurrentTail(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	writers := 16
	commits := scale(15, 6)
	head0 := h.mustHead()

	type ack struct {
		path    string
		seq     int64
		version int64
	}
	var (
		mu     sync.Mutex
		acks   [][]ack // per commit, its logged writes in order
		errs   []error
		wg     sync.WaitGroup
		target = make(chan int64, 1)
	)

	// The tailer.
	type seen struct {
		seqs    []int64
		changes map[int64]collections.Change
		err     error
	}
	tailDone := make(chan seen, 1)
	go func() {
		out := seen{changes: map[int64]collections.Change{}}
		pos := head0
		stop := int64(-1)
		deadline := time.After(60 * time.Second)
		for {
			ch := h.s.Notify() // before reading, so no commit slips between
			for {
				cs, err := h.readChanges(pos, 64)
				if err != nil {
					out.err = fmt.Errorf("ReadChanges(%d): %w", pos, err)
					tailDone <- out
					return
				}
				if len(cs) == 0 {
					break
				}
				for _, c := range cs {
					if c.Seq != pos+1 {
						out.err = fmt.Errorf("tailer read seq %d after %d (gap or reorder)", c.Seq, pos)
						tailDone <- out
						return
					}
					pos = c.Seq
					out.seqs = append(out.seqs, c.Seq)
					out.changes[c.Seq] = c
				}
			}
			if stop >= 0 && pos >= stop {
				tailDone <- out
				return
			}
			select {
			case <-ch:
			case s := <-target:
				stop = s
			case <-deadline:
				out.err = fmt.Errorf("tailer stuck at %d (stop %d) after 60s", pos, stop)
				tailDone <- out
				return
			}
		}
	}()

	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			live := map[string]bool{}
			for i := 0; i < commits; i++ {
				var ws []collections.Write
				n := 1 + r.IntN(3)
				used := map[string]bool{}
				for j := 0; j < n; j++ {
					p := fmt.Sprintf("tail/w%02d-%d", w, r.IntN(5))
					if used[p] {
						continue
					}
					used[p] = true
					switch {
					case !live[p]:
						ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: p, Data: map[string]any{"i": num(int64(i))}})
					case r.IntN(4) == 0:
						ws = append(ws, del(p))
					default:
						ws = append(ws, collections.Write{Type: collections.WriteUpdate, Path: p, Data: map[string]any{"i": num(int64(i))}})
					}
				}
				if r.IntN(4) == 0 {
					ws = append(ws, collections.Write{Type: collections.WriteReplace, Path: fmt.Sprintf("_tail/w%02d", w), Data: map[string]any{"i": num(int64(i))}})
				}
				res, err := h.commit(db, ws...)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("writer %d commit %d %s: %w", w, i, describeWrites(ws), err))
					mu.Unlock()
					return
				}
				var a []ack
				for k, wr := range ws {
					live[wr.Path] = wr.Type != collections.WriteDelete
					if collections.IsLogged(wr.Path) {
						a = append(a, ack{wr.Path, res[k].Doc.Seq, res[k].Doc.Version})
					}
				}
				mu.Lock()
				acks = append(acks, a)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	head := h.mustHead()
	target <- head
	out := <-tailDone
	if out.err != nil {
		t.Fatalf("tailer: %v", out.err)
	}

	total := 0
	for _, a := range acks {
		total += len(a)
		for k, x := range a {
			c, ok := out.changes[x.seq]
			switch {
			case !ok:
				t.Errorf("commit result seq %d (%s) never reached the tailer", x.seq, x.path)
			case c.Path != x.path || c.After == nil || c.After.Version != x.version:
				t.Errorf("change %d=%s %s, want %s at version %d", x.seq, c.Op, c.Path, x.path, x.version)
			}
			if k > 0 && x.seq != a[k-1].seq+1 {
				t.Errorf("writes of one commit got seqs %d and %d, want consecutive", a[k-1].seq, x.seq)
			}
		}
	}
	if len(out.seqs) != total {
		t.Errorf("tailer saw %d changes, want %d (one per acknowledged write)", len(out.seqs), total)
	}
	if len(out.seqs) > 0 && out.seqs[len(out.seqs)-1] != head {
		t.Errorf("tailer ended at %d, want Head %d", out.seqs[len(out.seqs)-1], head)
	}
	if head != head0+int64(total) {
		t.Errorf("Head=%d, want %d + %d writes", head, head0, total)
	}
	if t.Failed() {
		var hist []string
		for _, a := range acks {
			hist = append(hist, fmt.Sprint(a))
		}
		t.Logf("acknowledged commits: %v", hist)
	}
}
