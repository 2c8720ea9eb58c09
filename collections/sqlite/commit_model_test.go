package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/loomdb/loom/collections"
)

// modelDoc is what the batch model knows of a path.
type modelDoc struct {
	version   int64
	deleted   bool
	v         string // data field "v"
	seq       int64
	createdAt int64 // as the engine answered it (times are the engine's)
}

// modelChange is one change the model expects in the log.
type modelChange struct {
	seq           int64
	path          string
	op            collections.ChangeOp
	beforeVersion int64 // 0: no before
	version       int64
}

// TestBatchMatchesModel: random batches of requests that collide on a few
// paths (two creates of one id, a create and a delete of one path, an
// update or a precondition on a document created earlier in the batch or
// the same request, recreates over tombstones, trigger states, canceled
// callers), run optimistically or with savepoints from the start, give
// exactly what applying the requests one by one, each all or nothing,
// gives: each request's error or results (version, seq, created, the
// createdAt a recreate starts anew and an update keeps), the stored
// documents, the change log, and a LastSystemChange that hides no trigger
// state.
func TestBatchMatchesModel(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	c := batchCommitter(t, s)
	rng := rand.New(rand.NewPCG(18, 2))
	paths := []string{"m/a", "m/b", "m/c", "_triggers/t"}

	model := map[string]*modelDoc{}
	var log []modelChange
	var lastSystem int64
	seq := c.seq
	n := 0

	randWrite := func() collections.Write {
		n++
		w := collections.Write{Path: paths[rng.IntN(len(paths))]}
		switch rng.IntN(5) {
		case 0, 1:
			w.Type = collections.WriteCreate
		case 2:
			w.Type = collections.WriteReplace
		case 3:
			w.Type = collections.WriteUpdate
		default:
			w.Type = collections.WriteDelete
		}
		if w.Type != collections.WriteDelete {
			w.Data = map[string]any{"v": json.Number(fmt.Sprint(n))}
		}
		if rng.IntN(4) == 0 {
			// A precondition on the current value, or on a value
			// written moments ago (perhaps earlier in this batch).
			want := fmt.Sprint(max(1, n-rng.IntN(4)))
			if d := model[w.Path]; d != nil && rng.IntN(2) == 0 {
				want = d.v
			}
			w.IfMatch = []collections.Filter{{Field: "v", Op: "==", Value: json.Number(want)}}
		}
		return w
	}

	for round := range 400 {
		batch := make([]*request, 1+rng.IntN(6))
		for i := range batch {
			writes := make([]collections.Write, 1+rng.IntN(3))
			for j := range writes {
				writes[j] = randWrite()
			}
			rctx := ctx
			if rng.IntN(20) == 0 {
				rctx = canceled
			}
			batch[i] = commitReq(rctx, collections.CommitOptions{}, writes...)
		}
		c.guarded = 0
		if rng.IntN(3) == 0 {
			c.guarded = 1 // savepoints from the start
		}
		c.commit(batch)

		for i, r := range batch {
			label := fmt.Sprintf("round %d request %d", round, i)
			if r.ctx.Err() != nil {
				if !errors.Is(r.Err, context.Canceled) || r.results != nil {
					t.Fatalf("%s: canceled: err %v results %v", label, r.Err, r.results)
				}
				continue
			}
			// The model: the request's writes one by one on a copy,
			// kept only when all succeed.
			next := map[string]*modelDoc{}
			get := func(p string) *modelDoc {
				if d, ok := next[p]; ok {
					return d
				}
				return model[p]
			}
			var wantErr func(error) bool
			var changes []modelChange
			at := seq
			for j, w := range r.writes {
				cur := get(w.Path)
				live := cur != nil && !cur.deleted
				fail := func(is func(error) bool) {
					wantErr = func(err error) bool {
						var we *collections.WriteError
						return errors.As(err, &we) && we.Index == j && is(err)
					}
				}
				if len(w.IfMatch) > 0 && (!live || string(w.IfMatch[0].Value.(json.Number)) != cur.v) {
					fail(func(err error) bool {
						var pe *collections.PreconditionError
						return errors.As(err, &pe)
					})
					break
				}
				if w.Type == collections.WriteCreate && live {
					fail(func(err error) bool { return errors.Is(err, collections.ErrAlreadyExists) })
					break
				}
				if (w.Type == collections.WriteUpdate || w.Type == collections.WriteDelete) && !live {
					fail(func(err error) bool { return errors.Is(err, collections.ErrNotFound) })
					break
				}
				at++
				d := &modelDoc{version: 1, seq: at}
				ch := modelChange{seq: at, path: w.Path, version: 1}
				if cur != nil {
					d.version = cur.version + 1
					ch.version, ch.beforeVersion = d.version, cur.version
				}
				switch w.Type {
				case collections.WriteDelete:
					d.deleted, d.v, d.createdAt = true, cur.v, cur.createdAt
					ch.op = collections.OpDelete
				default:
					d.v = string(w.Data["v"].(json.Number))
					ch.op = collections.OpUpdate
					if !live {
						ch.op = collections.OpCreate
					} else {
						d.createdAt = cur.createdAt
					}
				}
				next[w.Path] = d
				changes = append(changes, ch)
			}
			if wantErr != nil {
				if !wantErr(r.Err) || r.results != nil {
					t.Fatalf("%s: writes %+v: err %v results %v, want the model's failure", label, r.writes, r.Err, r.results)
				}
				continue
			}
			if r.Err != nil || len(r.results) != len(r.writes) {
				t.Fatalf("%s: writes %+v: err %v, %d results, want success", label, r.writes, r.Err, len(r.results))
			}
			// createdAt: a create (or recreate) starts it at its own
			// time, an update and a delete keep the one before.
			createdAt := map[string]int64{}
			for j, res := range r.results {
				w, ch := r.writes[j], changes[j]
				d := res.Doc
				if d.Path != w.Path || d.Seq != ch.seq || d.Version != ch.version || res.Created != (ch.op == collections.OpCreate) ||
					d.Deleted != (ch.op == collections.OpDelete) {
					t.Fatalf("%s: write %d %+v: result %+v created %v, want change %+v", label, j, w, d, res.Created, ch)
				}
				before, ok := createdAt[w.Path]
				if !ok && model[w.Path] != nil {
					before = model[w.Path].createdAt
				}
				if ch.op == collections.OpCreate {
					if d.CreatedAt != d.UpdatedAt {
						t.Fatalf("%s: write %d: a create at %d, updated at %d", label, j, d.CreatedAt, d.UpdatedAt)
					}
				} else if d.CreatedAt != before {
					t.Fatalf("%s: write %d %s: createdAt %d, want %d", label, j, ch.op, d.CreatedAt, before)
				}
				createdAt[w.Path] = d.CreatedAt
			}
			for p, d := range next {
				d.createdAt = createdAt[p]
				model[p] = d
				if collections.IsSystemPath(p) {
					lastSystem = max(lastSystem, d.seq)
				}
			}
			log = append(log, changes...)
			seq = at
		}
		if got := mustHead(t, s); got != seq {
			t.Fatalf("round %d: head %d, want %d", round, got, seq)
		}
		if last, head := s.LastSystemChange(); head != seq || last < lastSystem || last > head {
			t.Fatalf("round %d: LastSystemChange %d, %d: want head %d and last in [%d, head]", round, last, head, seq, lastSystem)
		}
	}

	for p, md := range model {
		d, err := s.Get(ctx, testDB, p)
		if md.deleted {
			if !errors.Is(err, collections.ErrNotFound) {
				t.Errorf("%s: %v, %v; want deleted", p, d, err)
			}
			continue
		}
		if err != nil || d.Version != md.version || d.Seq != md.seq || d.CreatedAt != md.createdAt || fmt.Sprint(d.Data["v"]) != md.v {
			t.Errorf("%s: %+v, %v; want %+v", p, d, err, md)
		}
	}
	got, err := s.ReadChanges(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(log) {
		t.Fatalf("%d changes, want %d", len(got), len(log))
	}
	for i, ch := range got {
		want := log[i]
		bv := int64(0)
		if ch.Before != nil {
			bv = ch.Before.Version
		}
		if ch.Seq != want.seq || ch.Path != want.path || ch.Op != want.op || bv != want.beforeVersion || ch.After.Version != want.version {
			t.Fatalf("change %d: seq %d %s %s before %d after %d; want %+v", i, ch.Seq, ch.Op, ch.Path, bv, ch.After.Version, want)
		}
	}
	t.Logf("%d changes; %d documents", len(log), len(model))
}
