// Package storetest is the conformance suite every collections.Store engine
// passes. An engine's test calls Run with a Factory that opens a fresh store;
// the suite then checks CRUD, compare-and-set, batch atomicity, queries
// against the reference evaluator, the change log, retention, crash recovery
// and context handling.
//
// After every subtest that writes, a t.Cleanup checks the store's invariants:
// the change log is contiguous and every document's version and seq are
// those of its last change (like bbolt's MustCheck).
//
// The randomised query test prints its seed; set LOOM_STORETEST_SEED to
// replay one. Under -short the concurrency and model tests do less work.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// Options configure one store opened by a Factory.
type Options struct {
	Retention time.Duration // 0 = engine default
	Indexes   []collections.Index
}

// Factory opens stores for the suite.
type Factory struct {
	// New returns a fresh, empty store, closed by the factory's own
	// t.Cleanup.
	New func(t *testing.T, opts Options) collections.Store
	// Crash abandons s abruptly (as kill -9 would) and reopens the same
	// data; the returned store is closed by the factory's own t.Cleanup.
	// nil skips the crash tests.
	Crash func(t *testing.T, s collections.Store) collections.Store
}

// Run runs the whole conformance suite against stores made by f.
func Run(t *testing.T, f Factory) {
	for _, st := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"CRUD", testCRUD},
		{"Preconditions", testPreconditions},
		{"CASRace", testCASRace},
		{"ClaimRace", testClaimRace},
		{"Batch", testBatch},
		{"Query", testQuery},
		{"QueryModel", testQueryModel},
		{"WildcardSystem", testWildcardSystem},
		{"Catalog", testCatalog},
		{"ChangedSince", testChangedSince},
		{"ChangeLog", testChangeLog},
		{"ConcurrentTail", testConcurrentTail},
		{"Retention", testRetention},
		{"Crash", testCrash},
		{"Context", testContext},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.fn(t, f)
		})
	}
}

// opTimeout bounds every single store call made by the suite, so that a hung
// engine fails the test instead of stalling it.
const opTimeout = 30 * time.Second

// clockSkew is how far an envelope timestamp may lie outside the wall-clock
// window around the write (ms).
const clockSkew = 1000

// harness is one store under test plus helpers that fail the test on error.
type harness struct {
	t *testing.T
	s collections.Store
	// checked is cleared when the store is abandoned by a crash, so the
	// invariant check registered for it does not run on a dead store.
	checked *bool
	// raw makes every Get and Query also check the engine's RawReader
	// form against it (raw.go); set by tests that do not write while
	// they read.
	raw bool
}

// open makes a fresh store and registers the invariant check for it.
func open(t *testing.T, f Factory, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, s: f.New(t, opts)}
	h.watch()
	return h
}

// watch registers the invariant check for the current store. It is
// registered after the factory's cleanup, so it runs before the store is
// closed.
func (h *harness) watch() {
	on := true
	h.checked = &on
	s := h.s
	h.t.Cleanup(func() {
		if on {
			checkInvariants(h.t, s)
		}
	})
}

// crash abandons the store through the factory and continues on the
// reopened one.
func (h *harness) crash(f Factory) {
	h.t.Helper()
	*h.checked = false
	h.s = f.Crash(h.t, h.s)
	if h.s == nil {
		h.t.Fatalf("Factory.Crash returned a nil store")
	}
	h.watch()
}

func ctxT() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func (h *harness) commitOpts(db string, opts collections.CommitOptions, writes ...collections.Write) ([]collections.WriteResult, error) {
	ctx, cancel := ctxT()
	defer cancel()
	res, err := h.s.Commit(ctx, db, writes, opts)
	if err == nil && len(res) != len(writes) {
		h.t.Fatalf("Commit of %d writes returned %d results", len(writes), len(res))
	}
	if err == nil {
		for i, r := range res {
			if r.Doc == nil {
				h.t.Fatalf("Commit result %d (%s) has a nil Doc", i, writes[i].Path)
			}
		}
	}
	return res, err
}

func (h *harness) commit(db string, writes ...collections.Write) ([]collections.WriteResult, error) {
	return h.commitOpts(db, collections.CommitOptions{}, writes...)
}

func (h *harness) mustCommit(db string, writes ...collections.Write) []collections.WriteResult {
	h.t.Helper()
	res, err := h.commit(db, writes...)
	if err != nil {
		h.t.Fatalf("Commit(%s): %v", describeWrites(writes), err)
	}
	return res
}

// mustCommitOne commits one write and returns its document.
func (h *harness) mustCommitOne(db string, w collections.Write) *collections.Document {
	h.t.Helper()
	return h.mustCommit(db, w)[0].Doc
}

func (h *harness) get(db, path string) (*collections.Document, error) {
	ctx, cancel := ctxT()
	defer cancel()
	d, err := h.s.Get(ctx, db, path)
	h.checkGetRaw(db, path, d, err)
	return d, err
}

func (h *harness) mustGet(db, path string) *collections.Document {
	h.t.Helper()
	d, err := h.get(db, path)
	if err != nil {
		h.t.Fatalf("Get(%s, %s): %v", db, path, err)
	}
	return d
}

// mustNotFound checks that path has no live document.
func (h *harness) mustNotFound(db, path string) {
	h.t.Helper()
	d, err := h.get(db, path)
	if !errors.Is(err, collections.ErrNotFound) {
		h.t.Fatalf("Get(%s, %s)=%v, %v, want ErrNotFound", db, path, docString(d), err)
	}
}

func (h *harness) mustHead() int64 {
	h.t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	head, err := h.s.Head(ctx)
	if err != nil {
		h.t.Fatalf("Head: %v", err)
	}
	return head
}

func (h *harness) readChanges(after int64, limit int) ([]collections.Change, error) {
	ctx, cancel := ctxT()
	defer cancel()
	return h.s.ReadChanges(ctx, after, limit)
}

func (h *harness) mustReadChanges(after int64, limit int) []collections.Change {
	h.t.Helper()
	cs, err := h.readChanges(after, limit)
	if err != nil {
		h.t.Fatalf("ReadChanges(%d, %d): %v", after, limit, err)
	}
	return cs
}

// mustChangesSince reads every change after `after`, checking that the log
// is contiguous from after+1.
func (h *harness) mustChangesSince(after int64) []collections.Change {
	h.t.Helper()
	cs, err := readAll(h.s, after)
	if err != nil {
		h.t.Fatalf("reading the change log after %d: %v", after, err)
	}
	return cs
}

// readAll pages through the change log after `after` and checks contiguity.
func readAll(s collections.Store, after int64) ([]collections.Change, error) {
	var all []collections.Change
	for {
		ctx, cancel := ctxT()
		cs, err := s.ReadChanges(ctx, after, 500)
		cancel()
		if err != nil {
			return all, err
		}
		if len(cs) == 0 {
			return all, nil
		}
		for _, c := range cs {
			if c.Seq != after+1 {
				return all, fmt.Errorf("change seq=%d after %d, want %d (log not contiguous)", c.Seq, after, after+1)
			}
			after = c.Seq
		}
		all = append(all, cs...)
	}
}

func (h *harness) query(db string, q collections.Query) (collections.QueryResult, error) {
	h.t.Helper()
	if err := q.Normalize(); err != nil {
		h.t.Fatalf("Normalize(%s): %v", queryString(q), err)
	}
	ctx, cancel := ctxT()
	defer cancel()
	res, err := h.s.Query(ctx, db, q)
	h.checkQueryRaw(db, q, res, err)
	return res, err
}

func (h *harness) mustQuery(db string, q collections.Query) collections.QueryResult {
	h.t.Helper()
	res, err := h.query(db, q)
	if err != nil {
		h.t.Fatalf("Query(%s): %v", queryString(q), err)
	}
	return res
}

// mustQueryAll follows NextCursor until the last page and returns every
// document. It fails on a page that is longer than the limit or a cursor
// that does not decode.
func (h *harness) mustQueryAll(db string, q collections.Query) []*collections.Document {
	h.t.Helper()
	var all []*collections.Document
	for page := 0; ; page++ {
		res := h.mustQuery(db, q)
		if q.Limit > 0 && len(res.Docs) > q.Limit {
			h.t.Fatalf("Query(%s) page %d has %d docs, limit %d", queryString(q), page, len(res.Docs), q.Limit)
		}
		all = append(all, res.Docs...)
		if res.NextCursor == "" {
			return all
		}
		if len(res.Docs) == 0 {
			h.t.Fatalf("Query(%s) page %d is empty but has a NextCursor", queryString(q), page)
		}
		if page > 10000 {
			h.t.Fatalf("Query(%s) did not end after %d pages", queryString(q), page)
		}
		q.StartAfter = res.NextCursor
	}
}

func (h *harness) mustCursor(name string) int64 {
	h.t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	pos, err := h.s.Cursor(ctx, name)
	if err != nil {
		h.t.Fatalf("Cursor(%s): %v", name, err)
	}
	return pos
}

func (h *harness) mustSetCursor(name string, seq int64) {
	h.t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	if err := h.s.SetCursor(ctx, name, seq); err != nil {
		h.t.Fatalf("SetCursor(%s, %d): %v", name, seq, err)
	}
}

func (h *harness) mustPurge() {
	h.t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	if err := h.s.Purge(ctx); err != nil {
		h.t.Fatalf("Purge: %v", err)
	}
}

// waitNotify waits for ch to be closed, failing after a deadline.
func (h *harness) waitNotify(ch <-chan struct{}, what string) {
	h.t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("Notify channel not closed within 10s after %s", what)
	}
}

// Write builders. Data is decoded from JSON the way the API decodes it
// (numbers as json.Number).

func obj(t testing.TB, s string) map[string]any {
	t.Helper()
	if s == "" {
		return nil
	}
	m, err := collections.DecodeObject([]byte(s))
	if err != nil {
		t.Fatalf("bad test data %s: %v", s, err)
	}
	return m
}

func (h *harness) create(path, data string) collections.Write {
	return collections.Write{Type: collections.WriteCreate, Path: path, Data: obj(h.t, data)}
}

func (h *harness) replace(path, data string, ifMatch ...collections.Filter) collections.Write {
	return collections.Write{Type: collections.WriteReplace, Path: path, Data: obj(h.t, data), IfMatch: ifMatch}
}

func (h *harness) update(path, data string, ifMatch ...collections.Filter) collections.Write {
	return collections.Write{Type: collections.WriteUpdate, Path: path, Data: obj(h.t, data), IfMatch: ifMatch}
}

func del(path string, ifMatch ...collections.Filter) collections.Write {
	return collections.Write{Type: collections.WriteDelete, Path: path, IfMatch: ifMatch}
}

func filter(field string, op collections.Op, value any) collections.Filter {
	return collections.Filter{Field: field, Op: op, Value: value}
}

func num(i int64) json.Number { return json.Number(strconv.FormatInt(i, 10)) }

func nowMs() int64 { return time.Now().UnixMilli() }

// clockPast waits until the wall clock is past ms, so that a following
// write gets a later timestamp than ms (a condition, not an expectation).
func clockPast(ms int64) {
	for nowMs() <= ms {
		time.Sleep(time.Millisecond)
	}
}

// Descriptions for failure messages.

func docString(d *collections.Document) string {
	if d == nil {
		return "<nil>"
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Sprintf("<%s: %v>", d.Path, err)
	}
	return fmt.Sprintf("%s seq=%d %s", d.Path, d.Seq, b)
}

func dataString(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	return string(b)
}

func queryString(q collections.Query) string {
	b, err := json.Marshal(q)
	if err != nil {
		return fmt.Sprintf("%+v", q)
	}
	return string(b)
}

func describeWrites(ws []collections.Write) string {
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s", w.Type, w.Path)
	}
	return "[" + s + "]"
}

func paths(ds []*collections.Document) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Path
	}
	return out
}

// seed returns the seed of a randomised test: LOOM_STORETEST_SEED when set,
// else the clock. It is logged so a failure can be replayed.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("LOOM_STORETEST_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LOOM_STORETEST_SEED=%q: %v", v, err)
		}
		s = n
	}
	t.Logf("seed %d (replay with LOOM_STORETEST_SEED=%d)", s, s)
	return s
}

// scale returns n, or small under -short.
func scale(n, small int) int {
	if testing.Short() {
		return small
	}
	return n
}

// MustOpen returns the store open makes, failing the test on its error, and
// closes it when the test ends (a store already closed, as by a crash, is
// no error). Engines' tests open their stores through it.
func MustOpen[S collections.Store](t testing.TB, open func() (S, error)) S {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, collections.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}
