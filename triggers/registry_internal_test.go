package triggers

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/collections/sqlite"
)

// A delivery that succeeds resets the dead streak even when the streak
// began while its request was out (the entry the attempt started with
// still shows no streak): otherwise dead deliveries with successes between
// them would count as "in a row" and disable a working trigger.
func TestDeliveredOKResetsAStreakNewerThanTheAttempt(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db"), Indexes: Indexes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := &Config{Store: st}
	cfg.setDefaults()
	c, err := Compile(Trigger{ID: "t", Collection: "notes", Events: []string{"create"}, URL: "https://example.com/hook"}, cfg.Expand)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(cfg, st, cfg.Logger)
	if err := r.load(ctx, []*Compiled{c}, 0); err != nil {
		t.Fatal(err)
	}
	started := r.entry("t") // the attempt's snapshot: no streak yet
	d := &Delivery{TriggerID: "t", event: map[string]any{"database": "default", "path": "notes/n1"}}
	r.wentDead(ctx, r.entry("t"), d, "HTTP 500") // another delivery went dead meanwhile
	if got := r.entry("t").st.ConsecutiveDead; got != 1 {
		t.Fatalf("streak after a dead delivery = %d, want 1", got)
	}
	r.deliveredOK(ctx, started)
	if got := r.entry("t"); got.st.ConsecutiveDead != 0 || len(got.st.DeadOrigins) != 0 {
		t.Fatalf("streak after a delivered one = %d (%d origins), want 0", got.st.ConsecutiveDead, len(got.st.DeadOrigins))
	}
}
