package triggers

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// readCount counts the filtered reads of the log.
type readCount struct {
	collections.Store
	n atomic.Int32
}

func (r *readCount) ReadChangesFiltered(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	r.n.Add(1)
	return r.Store.(collections.FilteredChangeReader).ReadChangesFiltered(ctx, after, limit, want)
}

// A trigger state change the registry applied before the read (this
// node's own registration) leaves the triggers the batch was read for:
// the batch is not cut there and read again.
func TestEvaluatorKeepsBatchAtAppliedStateChange(t *testing.T) {
	ctx := context.Background()
	base := openFollowStore(t, sqlite.Config{})
	st := &readCount{Store: base}
	b := loadedRegistry(t, st)
	mustRegister(t, b, "x")
	m, err := newMetrics(b.cfg.Registerer, st, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	v := &evaluator{cfg: b.cfg, store: st, reg: b, intake: &keepIntake{}, log: b.log, m: m, epoch: "e"}
	ev := &evalState{}
	evaluateToHead(t, v, ev)
	write := func(path string) {
		t.Helper()
		if _, err := base.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: path, Data: map[string]any{"t": 1}}}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	write("other/o1")
	mustRegister(t, b, "y") // applied by b before the evaluator reads
	write("other/o2")       // read without its documents
	st.n.Store(0)
	evaluateToHead(t, v, ev)
	if n := st.n.Load(); n != 1 {
		t.Errorf("%d reads of the log for one batch, want 1", n)
	}
}
