package access_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
)

// The WriteCheck sees every write of a user as it would be stored (a
// patch merged into the stored document), refuses it as an *InvalidWrite
// naming the field, and nothing of a refused commit is written. Deletes
// and the admin are not checked.
func TestCommit_WriteCheck(t *testing.T) {
	ctx := context.Background()
	const path = "users/alice/agent-settings/rules"
	var seen []map[string]any
	st := mustOpenStore(t)
	svc, err := access.New(access.Config{Store: st, Rules: rules.Default(), WriteCheck: func(p string, data map[string]any) error {
		if p != path {
			return nil
		}
		seen = append(seen, data)
		switch n, _ := data["max"].(json.Number); n {
		case "60":
			return &access.InvalidWrite{Field: "plugins.p.max", Msg: "must be at most 50"}
		case "99":
			return errors.New("plain error")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	alice := access.CallerOfIdentity(&auth.Identity{UID: "alice", Username: "alice", Kind: auth.KindUser})
	write := func(c *access.Caller, ws ...collections.Write) error {
		_, err := svc.Commit(ctx, c, "default", ws)
		return err
	}
	data := func(s string) map[string]any {
		m, err := collections.DecodeObject([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	if err := write(alice, collections.Write{Type: collections.WriteCreate, Path: path, Data: data(`{"max":10,"other":"x"}`)}); err != nil {
		t.Fatalf("valid create: %v", err)
	}
	err = write(alice, collections.Write{Type: collections.WriteUpdate, Path: path, Data: data(`{"max":60}`)})
	var iw *access.InvalidWrite
	if !errors.As(err, &iw) || iw.Field != "plugins.p.max" || iw.Path != path || !errors.Is(err, collections.ErrInvalidDocument) {
		t.Fatalf("bad patch: err=%v, want an InvalidWrite naming plugins.p.max at %s", err, path)
	}
	if last := seen[len(seen)-1]; last["other"] != "x" {
		t.Errorf("the check saw %v, want the merged document", last)
	}
	err = write(alice,
		collections.Write{Type: collections.WriteCreate, Path: "users/alice/notes/n1", Data: data(`{"a":1}`)},
		collections.Write{Type: collections.WriteReplace, Path: path, Data: data(`{"max":99}`)})
	var we *collections.WriteError
	if !errors.As(err, &we) || we.Index != 1 || !errors.As(err, &iw) || iw.Msg != "plain error" {
		t.Fatalf("bad batch: err=%v, want an InvalidWrite at index 1", err)
	}
	if _, err := st.Get(ctx, "default", "users/alice/notes/n1"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("the refused batch wrote its other write: %v", err)
	}
	d, err := st.Get(ctx, "default", path)
	if err != nil || fmt.Sprint(d.Data["max"]) != "10" {
		t.Errorf("stored %v %v, want max 10 (nothing refused written)", d, err)
	}
	n := len(seen)
	if err := write(alice, collections.Write{Type: collections.WriteDelete, Path: path}); err != nil || len(seen) != n {
		t.Errorf("delete: err=%v, checked %d times, want allowed unchecked", err, len(seen)-n)
	}
	admin := access.AdminKey
	if err := write(admin, collections.Write{Type: collections.WriteCreate, Path: path, Data: data(`{"max":60}`)}); err != nil {
		t.Errorf("admin write: %v, want unchecked", err)
	}
}
