package triggers

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// TestFollowSeesDirectStateWrites: the engine's word that no trigger state
// changed lets a registry skip ordinary commits; a state written as a
// document (an admin's write to _triggers, not through a registry), one
// written in the same commit as ordinary documents, and one written after
// a restart are all followed, also when ordinary commits come after them.
func TestFollowSeesDirectStateWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "loom.db")
	open := func() collections.Store {
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path, Indexes: Indexes})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	commit := func(st collections.Store, writes ...collections.Write) {
		t.Helper()
		if _, err := st.Commit(ctx, SystemDB, writes, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	note := func(id string) collections.Write {
		return collections.Write{Type: collections.WriteReplace, Path: "notes/" + id, Data: map[string]any{}}
	}
	disable := func(st collections.Store, id string) collections.Write {
		d, err := st.Get(ctx, SystemDB, triggerColl+"/"+id)
		if err != nil {
			t.Fatal(err)
		}
		d.Data["enabled"] = false
		return collections.Write{Type: collections.WriteReplace, Path: d.Path, Data: d.Data}
	}
	follow := func(r *registry) {
		t.Helper()
		if _, err := r.stepToHead(ctx); err != nil {
			t.Fatal(err)
		}
	}

	st := open()
	a := loadedRegistry(t, st)
	for _, id := range []string{"x", "y", "z"} {
		mustRegister(t, a, id)
	}
	b := loadedRegistry(t, st)
	commit(st, note("n1"))
	follow(b)

	commit(st, collections.Write{Type: collections.WriteDelete, Path: triggerColl + "/x"})
	commit(st, note("n2"))
	follow(b)
	if b.entry("x") != nil {
		t.Fatal("b kept x after its state document was deleted directly")
	}
	commit(st, note("n3"), disable(st, "y"), note("n4"))
	commit(st, note("n5"))
	follow(b)
	if e := b.entry("y"); e == nil || e.enabled() {
		t.Fatal("b did not follow y's state written with ordinary documents")
	}

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	t.Cleanup(func() { _ = st.Close() })
	c := loadedRegistry(t, st)
	if e := c.entry("z"); e == nil || !e.enabled() {
		t.Fatal("after the restart z is not loaded enabled")
	}
	commit(st, note("n6"))
	follow(c)
	commit(st, disable(st, "z"))
	commit(st, note("n7"))
	follow(c)
	if e := c.entry("z"); e == nil || e.enabled() {
		t.Fatal("after a restart, a direct state write was not followed")
	}
}
