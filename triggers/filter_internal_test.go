package triggers

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// keepIntake holds every row it is offered and keeps it.
type keepIntake struct {
	mu   sync.Mutex
	rows []*Delivery
}

func (k *keepIntake) reserve(*Delivery, bool) bool { return true }
func (k *keepIntake) submit(j *job) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rows = append(k.rows, j.d)
}

// wantLog is a store whose filtered reads record what want accepted.
type wantLog struct {
	collections.Store
	mu       sync.Mutex
	accepted map[string]bool // path → the last answer of want
}

func (w *wantLog) ReadChangesFiltered(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	return w.Store.(collections.FilteredChangeReader).ReadChangesFiltered(ctx, after, limit, func(db string, op collections.ChangeOp, path string) bool {
		ok := want(db, op, path)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.accepted[path] = ok
		return ok
	})
}

// evaluateToHead runs v's batches until ev reaches the store's head.
func evaluateToHead(t *testing.T, v *evaluator, ev *evalState) {
	t.Helper()
	ctx := context.Background()
	head, err := v.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ev.pos < head; i++ {
		if i == 10 {
			t.Fatalf("the evaluator is at %d after 10 batches, want the head %d", ev.pos, head)
		}
		if err := v.evaluateBatch(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// The evaluator reads the documents only of the changes an enabled
// trigger can match. A trigger registered (by another node) in the same
// read batch as a write it matches still gets the written document: the
// changes after its registration were read for the triggers before it,
// without the documents they could not match, and are read again.
func TestEvaluatorReadsOnlyWhatCanMatch(t *testing.T) {
	ctx := context.Background()
	base := openFollowStore(t, sqlite.Config{})
	st := &wantLog{Store: base, accepted: map[string]bool{}}
	b := loadedRegistry(t, st) // evaluates; follow does not run
	a := loadedRegistry(t, base)
	mustRegister(t, a, "x") // notes: the evaluator is not idle
	m, err := newMetrics(b.cfg.Registerer, st, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	in := &keepIntake{}
	v := &evaluator{cfg: b.cfg, store: st, reg: b, intake: in, log: b.log, m: m, epoch: "e"}
	ev := &evalState{}
	evaluateToHead(t, v, ev)
	if !slices.ContainsFunc(b.activeTriggers(), func(t activeTrigger) bool { return t.c.Def.ID == "x" }) {
		t.Fatal("the evaluator's registry does not have x: this test checks nothing")
	}

	write := func(path, title string) {
		t.Helper()
		if _, err := base.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: path, Data: map[string]any{"title": title}}}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One batch: a post no trigger names, a note, then p registered for
	// posts and a post it matches.
	write("posts/before", "unseen")
	write("notes/n1", "note")
	if _, _, err := a.register(ctx, Trigger{ID: "p", Collection: "posts", Events: []string{"create"}, URL: "https://example.com/p"}); err != nil {
		t.Fatal(err)
	}
	write("posts/after", "hello")
	evaluateToHead(t, v, ev)

	st.mu.Lock()
	for path, want := range map[string]bool{"posts/before": false, "notes/n1": true, "_triggers/p": false, "posts/after": true} {
		if got, ok := st.accepted[path]; !ok || got != want {
			t.Errorf("want(%s) = %v (asked: %v), want %v", path, got, ok, want)
		}
	}
	st.mu.Unlock()

	docs := map[string]any{}
	in.mu.Lock()
	for _, d := range in.rows {
		doc, _ := d.event["document"].(map[string]any)
		data, _ := doc["data"].(map[string]any)
		docs[d.TriggerID+" "+d.event["path"].(string)] = data["title"]
	}
	in.mu.Unlock()
	wantDocs := map[string]any{"x notes/n1": "note", "p posts/after": "hello"}
	for k, title := range wantDocs {
		if docs[k] != title {
			t.Errorf("delivery %s carries title %v, want %q (all: %v)", k, docs[k], title, docs)
		}
	}
	if len(docs) != len(wantDocs) {
		t.Errorf("deliveries %v, want %v", docs, wantDocs)
	}
}
