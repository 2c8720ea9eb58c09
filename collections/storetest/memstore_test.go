package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// TestRun_Memory runs the suite against memStore, a deliberately naive
// in-memory engine built from the reference evaluator. It is not a product
// engine: it exists so that the suite itself is tested (a failure here is a
// suite bug), and so the suite can run before any real engine compiles.
func TestRun_Memory(t *testing.T) {
	Run(t, Factory{
		New: func(t *testing.T, opts Options) collections.Store {
			s := newMemStore(opts.Retention)
			t.Cleanup(func() { s.Close() })
			return s
		},
		Crash: func(t *testing.T, s collections.Store) collections.Store {
			old := s.(*memStore)
			old.mu.Lock()
			state := old.state // "on disk": everything committed
			old.closed = true
			old.mu.Unlock()
			n := newMemStore(old.retention)
			n.state = state
			t.Cleanup(func() { n.Close() })
			return n
		},
	})
}

type memState struct {
	docs    map[string]*collections.Document // db + "\x00" + path
	log     []collections.Change
	seq     int64 // last assigned seq, never reused
	purged  int64 // every change <= purged is gone
	cursors map[string]int64
}

type memStore struct {
	mu        sync.Mutex
	state     *memState
	retention time.Duration
	notify    chan struct{}
	closed    bool
}

var _ collections.Store = (*memStore)(nil)

func newMemStore(retention time.Duration) *memStore {
	if retention == 0 {
		retention = 168 * time.Hour
	}
	return &memStore{
		state:     &memState{docs: map[string]*collections.Document{}, cursors: map[string]int64{}},
		retention: retention,
		notify:    make(chan struct{}),
	}
}

func key(db, path string) string { return db + "\x00" + path }

func (s *memStore) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return collections.ErrClosed
	}
	return nil
}

func (s *memStore) Get(ctx context.Context, db, path string) (*collections.Document, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	d := s.state.docs[key(db, path)]
	if d == nil || d.Deleted {
		return nil, collections.ErrNotFound
	}
	return d.Clone(), nil
}

func (s *memStore) Commit(ctx context.Context, db string, writes []collections.Write, opts collections.CommitOptions) ([]collections.WriteResult, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	st := s.state
	if c := opts.Cursor; c != nil && st.cursors[c.Name] != c.From {
		return nil, collections.ErrCursorConflict
	}
	now := time.Now().UnixMilli()
	pending := map[string]*collections.Document{}
	lookup := func(p string) *collections.Document {
		if d, ok := pending[p]; ok {
			return d
		}
		return st.docs[key(db, p)]
	}
	seq := st.seq
	var changes []collections.Change
	results := make([]collections.WriteResult, len(writes))
	for i, w := range writes {
		cur := lookup(w.Path)
		live := cur != nil && !cur.Deleted
		fail := func(err error) ([]collections.WriteResult, error) {
			return nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
		if len(w.IfMatch) > 0 && (!live || !collections.MatchFilters(cur, w.IfMatch)) {
			var c *collections.Document
			if live {
				c = cur.Clone()
			}
			return fail(&collections.PreconditionError{Path: w.Path, Current: c})
		}
		coll, id := collections.SplitDocPath(w.Path)
		next := &collections.Document{Path: w.Path, Collection: coll, ID: id, Version: 1, CreatedAt: now, UpdatedAt: now}
		if cur != nil {
			next.Version = cur.Version + 1
		}
		if live {
			next.CreatedAt = cur.CreatedAt
		}
		op := collections.OpUpdate
		switch w.Type {
		case collections.WriteCreate:
			if live {
				return fail(collections.ErrAlreadyExists)
			}
			next.Data, op = clean(w.Data), collections.OpCreate
		case collections.WriteReplace:
			next.Data = clean(w.Data)
			if !live {
				op = collections.OpCreate
			}
		case collections.WriteUpdate:
			if !live {
				return fail(collections.ErrNotFound)
			}
			data, err := collections.ApplyPatch(collections.CloneValue(cur.Data).(map[string]any), w.Data)
			if err != nil {
				return fail(err)
			}
			next.Data = data
		case collections.WriteDelete:
			if !live {
				return fail(collections.ErrNotFound)
			}
			next.Data, next.Deleted, op = cur.Data, true, collections.OpDelete
		default:
			return fail(fmt.Errorf("unknown write type %q", w.Type))
		}
		if collections.IsLogged(w.Path) {
			seq++
			next.Seq = seq
			var before *collections.Document
			if op != collections.OpCreate || cur != nil {
				before = cur.Clone()
			}
			changes = append(changes, collections.Change{Seq: seq, DB: db, Op: op, Path: w.Path, Before: before, After: next.Clone(), Time: now})
		}
		pending[w.Path] = next
		results[i] = collections.WriteResult{Doc: next.Clone(), Created: !live && w.Type != collections.WriteDelete}
	}
	for p, d := range pending {
		st.docs[key(db, p)] = d
	}
	st.seq = seq
	st.log = append(st.log, changes...)
	if c := opts.Cursor; c != nil {
		st.cursors[c.Name] = c.To
	}
	if len(changes) > 0 {
		close(s.notify)
		s.notify = make(chan struct{})
	}
	return results, nil
}

func clean(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return collections.CloneValue(m).(map[string]any)
}

func (s *memStore) all(db string) []*collections.Document {
	var out []*collections.Document
	prefix := db + "\x00"
	for k, d := range s.state.docs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, d)
		}
	}
	return out
}

func (s *memStore) Query(ctx context.Context, db string, q collections.Query) (collections.QueryResult, error) {
	if err := s.begin(ctx); err != nil {
		return collections.QueryResult{}, err
	}
	defer s.mu.Unlock()
	docs := reference(s.all(db), q)
	var res collections.QueryResult
	if len(docs) > q.Limit {
		docs = docs[:q.Limit]
		res.NextCursor = collections.MakeCursor(q.OrderBy, docs[len(docs)-1])
	}
	for _, d := range docs {
		res.Docs = append(res.Docs, d.Clone())
	}
	return res, nil
}

func (s *memStore) ChangedSince(ctx context.Context, db, collection string, cp collections.Checkpoint, limit int) ([]*collections.Document, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []*collections.Document
	for _, d := range s.all(db) {
		if d.Collection == collection && (d.Seq > cp.Seq || d.Seq == cp.Seq && d.ID > cp.ID) {
			out = append(out, d.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *collections.Document) int {
		if a.Seq != b.Seq {
			return int(a.Seq - b.Seq)
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out[:min(limit, len(out))], nil
}

func (s *memStore) ReadChanges(ctx context.Context, after int64, limit int) ([]collections.Change, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if after < s.state.purged {
		return nil, &collections.PositionExpiredError{After: after, Oldest: s.state.purged}
	}
	var out []collections.Change
	for _, c := range s.state.log {
		if c.Seq > after && len(out) < limit {
			c.Before, c.After = c.Before.Clone(), c.After.Clone()
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *memStore) Head(ctx context.Context) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.state.seq, nil
}

func (s *memStore) Notify() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

func (s *memStore) Cursor(ctx context.Context, name string) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.state.cursors[name], nil
}

func (s *memStore) SetCursor(ctx context.Context, name string, seq int64) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.state.cursors[name] = seq
	return nil
}

func (s *memStore) DeleteCursor(ctx context.Context, name string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.state.cursors, name)
	return nil
}

func (s *memStore) Purge(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	st := s.state
	cutoff := time.Now().Add(-s.retention).UnixMilli()
	keep := int64(-1) // changes after the smallest cursor stay
	for _, pos := range st.cursors {
		if keep < 0 || pos < keep {
			keep = pos
		}
	}
	i := 0
	for i < len(st.log) && st.log[i].Time < cutoff && (keep < 0 || st.log[i].Seq <= keep) {
		st.purged = st.log[i].Seq
		i++
	}
	st.log = st.log[i:]
	for k, d := range st.docs {
		if d.Deleted && d.UpdatedAt < cutoff {
			delete(st.docs, k)
		}
	}
	return nil
}

func (s *memStore) Ready(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return collections.ErrClosed
	}
	s.closed = true
	return nil
}
