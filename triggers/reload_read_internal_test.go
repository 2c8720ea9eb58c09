package triggers

import (
	"context"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// hookLog runs before (once) when a filtered read of the log starts: what
// happens between the evaluator's look at its triggers and its read.
type hookLog struct {
	collections.Store
	before func()
}

func (h *hookLog) ReadChangesFiltered(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	if f := h.before; f != nil {
		h.before = nil
		f()
	}
	return h.Store.(collections.FilteredChangeReader).ReadChangesFiltered(ctx, after, limit, want)
}

// A file reload that moves a trigger to another collection writes no
// trigger state (the stored state is kept), so the log has no state change
// to cut the batch at. A write committed after the reload returned is
// evaluated with the new definition, with its document, even when the
// reload lands between the evaluator's look at its triggers and its read.
func TestEvaluatorSeesAReloadBeforeItsRead(t *testing.T) {
	ctx := context.Background()
	base := openFollowStore(t, sqlite.Config{})
	st := &hookLog{Store: base}
	cfg := &Config{Store: st}
	cfg.setDefaults()
	compile := func(coll string) []*Compiled {
		c, err := cfg.compile(Trigger{ID: "f", Collection: coll, Events: []string{"create"}, URL: "https://example.com/f"})
		if err != nil {
			t.Fatal(err)
		}
		return []*Compiled{c}
	}
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(cfg, st, cfg.Logger)
	if err := r.load(ctx, compile("notes"), head); err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(cfg.Registerer, st, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	in := &keepIntake{}
	v := &evaluator{cfg: cfg, store: st, reg: r, intake: in, log: r.log, m: m, epoch: "e"}
	ev := &evalState{}
	evaluateToHead(t, v, ev)

	write := func(path string) {
		t.Helper()
		if _, err := base.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: path, Data: map[string]any{"title": path}}}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	write("notes/n0")
	st.before = func() {
		head, err := base.Head(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if err := r.setFileTriggers(ctx, compile("posts"), nil, head, false); err != nil {
			t.Error(err)
			return
		}
		write("posts/p1") // after the reload returned
	}
	evaluateToHead(t, v, ev)

	got := map[string]any{}
	in.mu.Lock()
	for _, d := range in.rows {
		doc, _ := d.event["document"].(map[string]any)
		data, _ := doc["data"].(map[string]any)
		got[d.TriggerID+" "+d.event["path"].(string)] = data["title"]
	}
	in.mu.Unlock()
	if got["f posts/p1"] != "posts/p1" {
		t.Errorf("deliveries %v: want f posts/p1 with its document (written after the reload to posts)", got)
	}
}
