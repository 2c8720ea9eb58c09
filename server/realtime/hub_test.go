package realtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/server/realtime"
)

// hangGuard bounds every wait; it is never an expectation.
const hangGuard = 20 * time.Second

func mustOpen(t testing.TB, cfg sqlite.Config) collections.Store {
	t.Helper()
	cfg.Path = filepath.Join(t.TempDir(), "loom.db")
	st, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func mustHub(t testing.TB, st collections.Store, cfg realtime.Config) *realtime.Hub {
	t.Helper()
	h := realtime.New(st, cfg)
	t.Cleanup(h.Close)
	return h
}

func put(t testing.TB, st collections.Store, path string, data map[string]any) int64 {
	t.Helper()
	return commit(t, st, collections.Write{Type: collections.WriteReplace, Path: path, Data: data})
}

func commit(t testing.TB, st collections.Store, ws ...collections.Write) int64 {
	t.Helper()
	res, err := st.Commit(context.Background(), "default", ws, collections.CommitOptions{})
	if err != nil {
		t.Errorf("commit: %v", err)
		return 0
	}
	return res[len(res)-1].Doc.Seq
}

func del(t testing.TB, st collections.Store, path string) int64 {
	t.Helper()
	return commit(t, st, collections.Write{Type: collections.WriteDelete, Path: path})
}

func num(n int) json.Number { return json.Number(fmt.Sprint(n)) }

func mustSub(t testing.TB, h *realtime.Hub, req realtime.Request) *realtime.Subscription {
	t.Helper()
	if req.DB == "" {
		req.DB = "default"
	}
	if err := req.Query.Normalize(); err != nil {
		t.Fatalf("query: %v", err)
	}
	s, err := h.Subscribe(context.Background(), req)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func next(t testing.TB, s *realtime.Subscription) realtime.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

type got struct {
	typ, op, path string
	seq           int64
}

func (g got) String() string { return fmt.Sprintf("%s/%s %s @%d", g.typ, g.op, g.path, g.seq) }

func nextChange(t testing.TB, s *realtime.Subscription) got {
	t.Helper()
	ev := next(t, s)
	if ev.IsSnapshot() {
		t.Fatalf("got a snapshot page, want a change")
	}
	return got{string(ev.Type), string(ev.Change.Op), ev.Change.Path, ev.Seq}
}

func TestHub_LiveDeltasAndFilters(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{})
	all := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "rooms"}})
	hot := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "rooms", Filters: []collections.Filter{{Field: "n", Op: ">", Value: num(5)}}}})
	group := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "rooms/*/msgs"}})
	other := mustSub(t, h, realtime.Request{DB: "other", Query: collections.Query{Collection: "rooms"}})

	s1 := put(t, st, "rooms/a", map[string]any{"n": num(1)})
	s2 := put(t, st, "rooms/a", map[string]any{"n": num(9)}) // enters hot
	s3 := put(t, st, "rooms/a", map[string]any{"n": num(7)}) // changes in hot
	s4 := put(t, st, "rooms/a", map[string]any{"n": num(2)}) // leaves hot
	s5 := put(t, st, "rooms/x/msgs/m1", map[string]any{"t": "hi"})
	s6 := del(t, st, "rooms/a")
	put(t, st, "elsewhere/z", map[string]any{})

	for i, want := range []got{
		{"create", "create", "rooms/a", s1}, {"update", "update", "rooms/a", s2}, {"update", "update", "rooms/a", s3},
		{"update", "update", "rooms/a", s4}, {"delete", "delete", "rooms/a", s6},
	} {
		if g := nextChange(t, all); g != want {
			t.Fatalf("all[%d]=%v, want %v", i, g, want)
		}
	}
	for i, want := range []got{
		{"create", "update", "rooms/a", s2}, {"update", "update", "rooms/a", s3}, {"delete", "update", "rooms/a", s4},
	} {
		if g := nextChange(t, hot); g != want {
			t.Fatalf("hot[%d]=%v, want %v", i, g, want)
		}
	}
	if g, want := nextChange(t, group), (got{"create", "create", "rooms/x/msgs/m1", s5}); g != want {
		t.Fatalf("group=%v, want %v", g, want)
	}
	// Nothing else is queued for the other database.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ev, err := other.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("other db: Next=%v,%v, want no event", ev, err)
	}
}

func TestHub_ResumeExactlyOnce(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{ReadBatch: 7})
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}})
	put(t, st, "c/first", nil)
	last := nextChange(t, s)
	s.Close()

	var want []int64
	for i := range 50 {
		want = append(want, put(t, st, fmt.Sprintf("c/d%d", i), map[string]any{"i": num(i)}))
		put(t, st, "skip/x", nil)
	}
	r := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: last.seq})
	if r.Start() != last.seq {
		t.Fatalf("Start=%d, want %d", r.Start(), last.seq)
	}
	// Live writes during the catch-up continue the same stream.
	go func() {
		for i := 50; i < 80; i++ {
			put(t, st, fmt.Sprintf("c/d%d", i), nil)
		}
	}()
	for i := range 80 {
		g := nextChange(t, r)
		if want := fmt.Sprintf("c/d%d", i); g.path != want || g.typ != "create" {
			t.Fatalf("event %d=%v, want create %s", i, g, want)
		}
		if i < len(want) && g.seq != want[i] {
			t.Fatalf("event %d seq=%d, want %d", i, g.seq, want[i])
		}
	}
	if _, err := h.Subscribe(context.Background(), realtime.Request{DB: "default", Query: collections.Query{Collection: "c"}, Resume: true, After: 1 << 40}); !errors.Is(err, realtime.ErrTokenAhead) {
		t.Fatalf("token ahead: err=%v, want ErrTokenAhead", err)
	}
}

func TestHub_ResumeExpired(t *testing.T) {
	st := mustOpen(t, sqlite.Config{Retention: time.Millisecond})
	h := mustHub(t, st, realtime.Config{})
	first := put(t, st, "c/a", nil)
	put(t, st, "c/b", nil)
	// Age the changes past the 1 ms retention, then purge.
	time.Sleep(5 * time.Millisecond)
	if err := st.Purge(context.Background()); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	put(t, st, "c/c", nil)
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: first - 1})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if ev, err := s.Next(ctx); !errors.Is(err, realtime.ErrReset) || !errors.Is(err, collections.ErrPositionExpired) {
		t.Fatalf("Next=%+v,%v, want ErrReset", ev, err)
	}
}

func TestHub_SlowConsumerResumesWithoutLoss(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{QueueSize: 4})
	const batches, per = 20, 10
	writerDone := make(chan struct{})
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}})
	// One event first: the subscription is then live (not catching up, when
	// an overflow only re-arms), so the first 10-write commit overflows it.
	put(t, st, "warmup/x", nil)
	put(t, st, "c/d000", nil)
	if g := nextChange(t, s); g.path != "c/d000" {
		t.Fatalf("warm-up event %v", g)
	}
	var seen []string
	var lastSeq int64 = g0(t, st)
	go func() {
		defer close(writerDone)
		for b := range batches {
			ws := make([]collections.Write, per)
			for i := range ws {
				ws[i] = collections.Write{Type: collections.WriteReplace, Path: fmt.Sprintf("c/d%03d", b*per+i+1), Data: map[string]any{}}
			}
			commit(t, st, ws...)
		}
	}()
	seen = append(seen, "c/d000")
	slow := 0
	for len(seen) < batches*per+1 {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		ev, err := s.Next(ctx)
		cancel()
		var se *realtime.SlowConsumerError
		switch {
		case errors.As(err, &se):
			slow++
			if se.Token != lastSeq && !(lastSeq == 0 && se.Token == s.Start()) {
				t.Fatalf("slow token=%d, want last given %d", se.Token, lastSeq)
			}
			s = mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: se.Token})
			continue
		case err != nil:
			t.Fatalf("Next: %v", err)
		}
		if ev.Seq <= lastSeq {
			t.Fatalf("seq %d after %d", ev.Seq, lastSeq)
		}
		lastSeq = ev.Seq
		seen = append(seen, ev.Change.Path)
	}
	<-writerDone
	if slow == 0 {
		t.Fatalf("never a slow consumer with a 4-slot queue and 10-write commits")
	}
	for i, p := range seen {
		if want := fmt.Sprintf("c/d%03d", i); p != want {
			t.Fatalf("event %d=%s, want %s", i, p, want)
		}
	}
}

// g0 is the store's head.
func g0(t testing.TB, st collections.Store) int64 {
	t.Helper()
	h, err := st.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHub_SnapshotThenChangesUnderConcurrentWriters(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{QueueSize: 64})
	const docs = 300
	for i := 0; i < docs; i += 50 {
		ws := make([]collections.Write, 50)
		for j := range ws {
			ws[j] = collections.Write{Type: collections.WriteReplace, Path: fmt.Sprintf("c/d%03d", i+j), Data: map[string]any{"v": num(0)}}
		}
		commit(t, st, ws...)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("c/d%03d", (n*7+w*101)%docs)
				if n%11 == 0 {
					commit(t, st, collections.Write{Type: collections.WriteDelete, Path: p})
					continue
				}
				put(t, st, p, map[string]any{"v": num(n)})
			}
		}()
	}
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Snapshot: true})
	state := map[string]int64{} // path → version the client holds
	for {
		ev := next(t, s)
		if !ev.IsSnapshot() {
			t.Fatalf("change before the snapshot ended")
		}
		for _, d := range ev.Snapshot {
			state[d.Path] = d.Version
		}
		if !ev.More {
			break
		}
	}
	apply := func(ev realtime.Event) {
		c := ev.Change
		have, ok := state[c.Path]
		switch ev.Type {
		case collections.OpCreate:
			if ok {
				t.Fatalf("create of %s already held at v%d (seq %d)", c.Path, have, ev.Seq)
			}
			state[c.Path] = c.After.Version
		case collections.OpUpdate:
			if !ok || c.Before.Version != have {
				t.Fatalf("update of %s from v%d, client holds v%d (held=%v) seq %d", c.Path, c.Before.Version, have, ok, ev.Seq)
			}
			state[c.Path] = c.After.Version
		case collections.OpDelete:
			if ok && c.Before.Version != have {
				t.Fatalf("delete of %s from v%d, client holds v%d", c.Path, c.Before.Version, have)
			}
			delete(state, c.Path)
		}
	}
	// Let the writers run on against the live stream for a while.
	var last int64
	for range 200 {
		ev := next(t, s)
		if ev.Seq <= last {
			t.Fatalf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		apply(ev)
	}
	close(stop)
	wg.Wait()
	head, _ := st.Head(context.Background())
	for last < head {
		ev := next(t, s)
		last = ev.Seq
		apply(ev)
	}
	// The client's copy equals the store.
	res, err := st.Query(context.Background(), "default", collections.Query{Collection: "c", Limit: collections.MaxLimit})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if len(res.Docs) != len(state) {
		t.Fatalf("client holds %d docs, store has %d", len(state), len(res.Docs))
	}
	for _, d := range res.Docs {
		if state[d.Path] != d.Version {
			t.Fatalf("%s: client v%d, store v%d", d.Path, state[d.Path], d.Version)
		}
	}
}

func TestHub_CheckFiltersEvents(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{})
	mine := func(_ context.Context, d *collections.Document) (bool, error) { return d.Data["owner"] == "me", nil }
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Check: mine})
	put(t, st, "c/theirs", map[string]any{"owner": "them"})
	want := put(t, st, "c/mine", map[string]any{"owner": "me"})
	if g := nextChange(t, s); g.path != "c/mine" || g.seq != want {
		t.Fatalf("got %v, want c/mine @%d", g, want)
	}
	h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := s.Next(ctx); !errors.Is(err, realtime.ErrClosed) {
		t.Fatalf("after hub Close: err=%v, want ErrClosed", err)
	}
}

// heldReads is a real store whose Query — the hub reads snapshot pages
// with it and with nothing else — counts the reads in flight, remembers the
// most at once, and holds every read until release is closed, so that the
// reads the hub lets through at once all overlap.
type heldReads struct {
	collections.Store
	release chan struct{}

	mu       sync.Mutex
	inFlight int
	most     int
}

func (s *heldReads) Query(ctx context.Context, db string, q collections.Query) (collections.QueryResult, error) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.release:
	case <-ctx.Done():
		return collections.QueryResult{}, ctx.Err()
	}
	return s.Store.Query(ctx, db, q)
}

func (s *heldReads) counts() (inFlight, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.most
}

// waitingForSnapshotSlot counts the goroutines parked in
// Subscription.nextSnapshot itself: its only blocking point is the wait for
// a snapshot-read slot (a goroutine inside the store's Query has Query on
// top of its stack instead).
func waitingForSnapshotSlot() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	waiting := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, rest, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[select") && strings.HasPrefix(rest, "github.com/loomdb/loom/server/realtime.(*Subscription).nextSnapshot(") {
			waiting++
		}
	}
	return waiting
}

// At most SnapshotReads snapshot pages are read at once across all
// subscriptions (8 by default, the README's promise): with every read held
// in the store until all the subscribers are either reading or waiting for
// a slot, exactly the bound are reading — never more, and not fewer (a
// bound that only ever let one read through would not be the promise
// either). Then every snapshot completes, each whole.
func TestHub_SnapshotReadsAreBounded(t *testing.T) {
	if realtime.DefaultSnapshotReads != 8 {
		t.Fatalf("DefaultSnapshotReads=%d, the README promises 8", realtime.DefaultSnapshotReads)
	}
	for _, c := range []struct {
		name  string
		cfg   realtime.Config
		bound int
	}{
		{"default", realtime.Config{}, 8},
		{"configured", realtime.Config{SnapshotReads: 1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := mustOpen(t, sqlite.Config{})
			for i := 0; i < 30; i++ {
				put(t, st, fmt.Sprintf("snap/d%02d", i), map[string]any{"n": num(i)})
			}
			held := &heldReads{Store: st, release: make(chan struct{})}
			h := mustHub(t, held, c.cfg)
			released := false
			defer func() {
				if !released {
					close(held.release)
				}
			}()
			subscribers := max(2*c.bound, 8)
			type result struct {
				ev  realtime.Event
				err error
			}
			results := make(chan result, subscribers)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			for range subscribers {
				s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "snap"}, Snapshot: true})
				go func() {
					ev, err := s.Next(ctx)
					results <- result{ev, err}
				}()
			}
			// Wait until every subscriber is either reading (held in the
			// store) or waiting for a slot: from then on nothing moves
			// until the reads are released.
			for {
				inFlight, most := held.counts()
				if most > c.bound {
					t.Fatalf("%d snapshot pages read at once, want at most %d", most, c.bound)
				}
				waiting := waitingForSnapshotSlot()
				if inFlight+waiting == subscribers {
					if inFlight != c.bound {
						t.Fatalf("%d snapshot pages read at once while %d subscribers wait for a slot, want %d", inFlight, waiting, c.bound)
					}
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%d subscribers: %d reading, %d waiting for a slot; the rest never got there", subscribers, inFlight, waiting)
				}
				time.Sleep(time.Millisecond)
			}
			close(held.release)
			released = true
			for range subscribers {
				r := <-results
				if r.err != nil {
					t.Fatalf("Next: %v", r.err)
				}
				if !r.ev.IsSnapshot() || len(r.ev.Snapshot) != 30 || r.ev.More {
					t.Errorf("snapshot of %d documents (more %v), want 30", len(r.ev.Snapshot), r.ev.More)
				}
			}
			if _, most := held.counts(); most != c.bound {
				t.Fatalf("at most %d snapshot pages read at once, want %d", most, c.bound)
			}
		})
	}
}

// The change log carries _triggers (the trigger state every node follows,
// signing secrets included); no subscription sees it, live or caught up
// from the store: not a wildcard one, not even one naming the collection
// (an admin may name system collections).
func TestHub_NoSystemChanges(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{ReadBatch: 2})
	start := put(t, st, "rooms/first", nil)
	live := []*realtime.Subscription{
		mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "*"}}),
		mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "_triggers"}}),
		mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "_triggers", ShowDeleted: true}}),
	}
	secret := put(t, st, "_triggers/t1", map[string]any{"secret": "whsec_leak"})
	if secret == 0 {
		t.Fatal("the _triggers write was not logged: this test checks nothing")
	}
	put(t, st, "_triggers/t1", map[string]any{"secret": "whsec_leak2"})
	del(t, st, "_triggers/t1")
	end := put(t, st, "rooms/last", nil)
	caughtUp := []*realtime.Subscription{
		mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "*"}, Resume: true, After: start}),
		mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "_triggers", ShowDeleted: true}, Resume: true, After: start}),
	}
	for i, s := range []*realtime.Subscription{live[0], caughtUp[0]} {
		if g, want := nextChange(t, s), (got{"create", "create", "rooms/last", end}); g != want {
			t.Fatalf("wildcard subscription %d: first event %v, want %v", i, g, want)
		}
	}
	for i, s := range append(live[1:], caughtUp[1]) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		ev, err := s.Next(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("_triggers subscription %d: Next=%+v, %v, want no event", i, ev, err)
		}
	}
}

// laggingLog is a real store whose change log answers empty for its first
// reads, as a MongoDB replica does for a moment after a failover while it
// has not yet seen what the old primary reported.
type laggingLog struct {
	collections.Store
	mu    sync.Mutex
	empty int // reads still to answer empty
}

func (l *laggingLog) ReadChanges(ctx context.Context, after int64, limit int) ([]collections.Change, error) {
	l.mu.Lock()
	lag := l.empty > 0
	if lag {
		l.empty--
	}
	l.mu.Unlock()
	if lag {
		return nil, nil
	}
	return l.Store.ReadChanges(ctx, after, limit)
}

// A resume whose catch-up finds the log behind the head waits for it
// instead of skipping ahead: every change arrives, in order.
func TestHub_ResumeWaitsForALaggingLog(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	start := put(t, st, "c/first", nil)
	var want []int64
	for i := range 5 {
		want = append(want, put(t, st, fmt.Sprintf("c/d%d", i), nil))
	}
	lag := &laggingLog{Store: st}
	h := mustHub(t, lag, realtime.Config{})
	lag.mu.Lock()
	lag.empty = 3
	lag.mu.Unlock()
	r := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: start})
	for i, seq := range want {
		if g := nextChange(t, r); g.seq != seq || g.path != fmt.Sprintf("c/d%d", i) {
			t.Fatalf("event %d=%v, want c/d%d @%d", i, g, i, seq)
		}
	}
}

// Subscriptions (the loom_realtime_subscriptions gauge) counts the live
// subscriptions of every kind of index, and closing one twice counts once.
func TestHub_SubscriptionsCounted(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{})
	var subs []*realtime.Subscription
	for i, coll := range []string{"rooms", "rooms/*/msgs", "*", "users/*/*"} {
		subs = append(subs, mustSub(t, h, realtime.Request{Query: collections.Query{Collection: coll}}))
		if n := h.Subscriptions(); n != i+1 {
			t.Fatalf("after subscribing to %s: Subscriptions()=%d, want %d", coll, n, i+1)
		}
	}
	for i, s := range subs {
		s.Close()
		s.Close()
		if n, want := h.Subscriptions(), len(subs)-i-1; n != want {
			t.Fatalf("after closing subscription %d (twice): Subscriptions()=%d, want %d", i, n, want)
		}
	}
}

// Closing a subscription leaves the others on the same collection, shape
// or wildcard receiving their changes; and a wildcard in a collection-name
// position past the first ("users/*/*") matches.
func TestHub_ClosingOneSubscriptionKeepsItsNeighbours(t *testing.T) {
	for _, tt := range []struct{ coll, path string }{
		{"rooms", "rooms/a"},
		{"rooms/*/msgs", "rooms/x/msgs/m"},
		{"*", "rooms/b"},
		{"users/*/*", "users/u/notes/n"},
	} {
		t.Run(tt.coll, func(t *testing.T) {
			st := mustOpen(t, sqlite.Config{})
			h := mustHub(t, st, realtime.Config{})
			gone := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: tt.coll}})
			stays := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: tt.coll}})
			gone.Close()
			seq := put(t, st, tt.path, map[string]any{"n": num(1)})
			if g, want := nextChange(t, stays), (got{"create", "create", tt.path, seq}); g != want {
				t.Fatalf("after its neighbour closed: %v, want %v", g, want)
			}
		})
	}
}

// A resume token is accepted from 0 up to the newest change, the token a
// caught-up client holds; one past it, or a negative one, is ErrTokenAhead.
func TestHub_ResumeTokenBounds(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{})
	first := put(t, st, "c/a", nil)
	head := put(t, st, "c/b", nil)
	for _, after := range []int64{head + 1, -1} {
		_, err := h.Subscribe(context.Background(), realtime.Request{DB: "default", Query: collections.Query{Collection: "c"}, Resume: true, After: after})
		if !errors.Is(err, realtime.ErrTokenAhead) {
			t.Fatalf("resume after %d (head %d): err=%v, want ErrTokenAhead", after, head, err)
		}
	}
	atHead := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: head})
	fromZero := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Resume: true, After: 0})
	next := put(t, st, "c/c", nil)
	if g, want := nextChange(t, atHead), (got{"create", "create", "c/c", next}); g != want {
		t.Fatalf("resumed at head: %v, want %v", g, want)
	}
	if g, want := nextChange(t, fromZero), (got{"create", "create", "c/a", first}); g != want {
		t.Fatalf("resumed from 0: %v, want %v", g, want)
	}
}

// A write after the snapshot's head that the snapshot page already shows
// is not delivered again as a change; the next write is.
func TestHub_SnapshotShowsLaterWriteOnce(t *testing.T) {
	st := mustOpen(t, sqlite.Config{})
	h := mustHub(t, st, realtime.Config{})
	put(t, st, "c/a", nil)
	s := mustSub(t, h, realtime.Request{Query: collections.Query{Collection: "c"}, Snapshot: true})
	// Written after Subscribe fixed the snapshot head, before the page is
	// read: the page shows it.
	later := put(t, st, "c/b", map[string]any{"v": num(1)})
	ev := next(t, s)
	if !ev.IsSnapshot() || ev.More {
		t.Fatalf("first event: snapshot=%v more=%v, want one snapshot page", ev.IsSnapshot(), ev.More)
	}
	var paths []string
	for _, d := range ev.Snapshot {
		paths = append(paths, d.Path)
		if d.Path == "c/b" && d.Seq != later {
			t.Fatalf("snapshot shows c/b at seq %d, want %d", d.Seq, later)
		}
	}
	if fmt.Sprint(paths) != "[c/a c/b]" {
		t.Fatalf("snapshot shows %v, want [c/a c/b]", paths)
	}
	marker := put(t, st, "c/c", nil)
	if g, want := nextChange(t, s), (got{"create", "create", "c/c", marker}); g != want {
		t.Fatalf("first change after the snapshot: %v, want %v (c/b, already shown, must not come again)", g, want)
	}
}
