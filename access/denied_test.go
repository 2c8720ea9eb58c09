package access_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

var (
	alice = &access.Caller{Kind: "user", UID: "alice", Username: "alice"}
	bob   = &access.Caller{Kind: "user", UID: "bob", Username: "bob"}
	// roleAdmin is a user with the "admin" role: it bypasses the rules as
	// the admin key does.
	roleAdmin = &access.Caller{Admin: true, Kind: "user", UID: "root", Roles: []string{"admin"}}
)

// wantDenied fails unless err is a *Denied for an anonymous (401) or an
// authenticated (403) caller, about what.
func wantDenied(t *testing.T, name string, err error, anonymous bool, what string) {
	t.Helper()
	var de *access.Denied
	if !errors.As(err, &de) || de.Anonymous != anonymous || de.What != what {
		t.Errorf("%s: err=%v, want *Denied{Anonymous: %v, What: %q}", name, err, anonymous, what)
	}
}

func newService(t *testing.T, set *rules.Set) (*access.Service, collections.Store) {
	t.Helper()
	st := mustOpenStore(t)
	svc, err := access.New(access.Config{Store: st, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func TestAuthorize_SystemCollections(t *testing.T) {
	for _, tc := range []struct {
		name   string
		caller *access.Caller
		action access.Action
		path   string
		want   func(*testing.T, error)
	}{
		{"anonymous reads", access.Anonymous, access.ActionGet, "_users/u1", func(t *testing.T, err error) {
			wantDenied(t, "anonymous", err, true, "read system collections")
		}},
		{"user lists", alice, access.ActionList, "_users", func(t *testing.T, err error) {
			wantDenied(t, "user", err, false, "read system collections")
		}},
		{"admin key reads", access.AdminKey, access.ActionGet, "_users/u1", nil},
		{"admin role lists", roleAdmin, access.ActionList, "_outbox", nil},
		{"admin key writes", access.AdminKey, access.ActionCreate, "_users/u1", func(t *testing.T, err error) {
			if !errors.Is(err, access.ErrSystemWrite) {
				t.Errorf("err=%v, want ErrSystemWrite", err)
			}
		}},
		{"anonymous deletes", access.Anonymous, access.ActionDelete, "_users/u1", func(t *testing.T, err error) {
			if !errors.Is(err, access.ErrSystemWrite) {
				t.Errorf("err=%v, want ErrSystemWrite", err)
			}
		}},
		{"user writes elsewhere", alice, access.ActionUpdate, "rooms/r1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := access.Authorize(tc.caller, tc.action, tc.path)
			if tc.want == nil {
				if err != nil {
					t.Errorf("err=%v, want nil", err)
				}
				return
			}
			tc.want(t, err)
		})
	}
}

// Without read access a missing document and a forbidden one fail alike;
// with it, a missing one is ErrNotFound.
func TestService_GetDenials(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, nil) // the built-in rules: users own users/{uid}/...
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/alice/notes/n1", Data: map[string]any{"text": "mine"}})

	_, err := svc.Get(ctx, access.Anonymous, "default", "users/alice/notes/n1")
	wantDenied(t, "anonymous", err, true, "read users/alice/notes/n1")
	_, err = svc.Get(ctx, bob, "default", "users/alice/notes/n1")
	wantDenied(t, "another user", err, false, "read users/alice/notes/n1")
	_, err = svc.Get(ctx, bob, "default", "users/alice/notes/missing")
	wantDenied(t, "another user, missing document", err, false, "read users/alice/notes/missing")
	_, err = svc.Get(ctx, bob, "default", "_users/alice")
	wantDenied(t, "a user, system collection", err, false, "read system collections")

	if d, err := svc.Get(ctx, alice, "default", "users/alice/notes/n1"); err != nil || d.Data["text"] != "mine" {
		t.Errorf("owner: %v %v, want the document", d, err)
	}
	if _, err := svc.Get(ctx, alice, "default", "users/alice/notes/missing"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("owner, missing document: err=%v, want ErrNotFound", err)
	}
	if d, err := svc.Get(ctx, access.AdminKey, "default", "users/alice/notes/n1"); err != nil || d.Version != 1 {
		t.Errorf("admin key: %v %v, want the document", d, err)
	}
	if _, err := svc.Get(ctx, alice, "default", "users/alice/notes"); !errors.Is(err, collections.ErrInvalidPath) {
		t.Errorf("a collection path: err=%v, want ErrInvalidPath", err)
	}
}

func TestService_QueryDenials(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, nil)
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/alice/notes/n1", Data: map[string]any{}})

	_, err := svc.Query(ctx, access.Anonymous, "default", collections.Query{Collection: "users/alice/notes"})
	wantDenied(t, "anonymous", err, true, "list users/alice/notes")
	_, err = svc.Query(ctx, alice, "default", collections.Query{Collection: "_users"})
	wantDenied(t, "a user, system collection", err, false, "read system collections")
	_, err = svc.Query(ctx, alice, "default", collections.Query{Collection: "rooms"})
	wantDenied(t, "a user, no rule", err, false, "list rooms")
	_, err = svc.Query(ctx, alice, "default", collections.Query{Collection: "users/alice/notes", StartAfter: "forged"})
	if !errors.Is(err, access.ErrBadCursor) {
		t.Errorf("a forged cursor: err=%v, want ErrBadCursor", err)
	}
	for _, c := range []*access.Caller{alice, access.AdminKey} {
		res, err := svc.Query(ctx, c, "default", collections.Query{Collection: "users/alice/notes"})
		if err != nil || len(res.Docs) != 1 {
			t.Errorf("%s: %v %v, want the one note", c.Kind, res.Docs, err)
		}
	}
	// Bob may list users/*/notes (his own), but sees none of Alice's.
	res, err := svc.Query(ctx, bob, "default", collections.Query{Collection: "users/*/notes"})
	if err != nil || len(res.Docs) != 0 {
		t.Errorf("another user over a pattern: %v %v, want no document", res.Docs, err)
	}
}

// A denied write fails the whole commit with the write's index; nothing is
// written.
func TestService_CommitDenials(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, nil)
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/alice/notes/n1", Data: map[string]any{}})
	own := collections.Write{Type: collections.WriteCreate, Path: "users/bob/notes/b1", Data: map[string]any{}}

	_, err := svc.Commit(ctx, access.Anonymous, "default", []collections.Write{
		{Type: collections.WriteCreate, Path: "users/alice/notes/n2", Data: map[string]any{}},
	})
	wantDenied(t, "anonymous create", err, true, "create users/alice/notes/n2")
	_, err = svc.Commit(ctx, bob, "default", []collections.Write{own,
		{Type: collections.WriteUpdate, Path: "users/alice/notes/n1", Data: map[string]any{"x": 1}},
	})
	wantDenied(t, "another user's update", err, false, "update users/alice/notes/n1")
	var we *collections.WriteError
	if !errors.As(err, &we) || we.Index != 1 {
		t.Errorf("denied second write: err=%v, want a WriteError at index 1", err)
	}
	_, err = svc.Commit(ctx, access.AdminKey, "default", []collections.Write{own,
		{Type: collections.WriteCreate, Path: "_users/x", Data: map[string]any{}},
	})
	if !errors.Is(err, access.ErrSystemWrite) || !errors.As(err, &we) || we.Index != 1 {
		t.Errorf("admin key writing a system collection: err=%v, want ErrSystemWrite at index 1", err)
	}
	if _, err := st.Get(ctx, "default", own.Path); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("the allowed write of a denied commit: err=%v, want nothing written", err)
	}
	if _, err := svc.Commit(ctx, bob, "default", []collections.Write{own}); err != nil {
		t.Errorf("own create: %v", err)
	}
}

// A failed precondition shows the current document only to a caller who
// may read it.
func TestService_CommitHidesPreconditionOfUnreadable(t *testing.T) {
	ctx := context.Background()
	set, err := rules.Parse([]byte(`
[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null"

[[rule]]
match = "posts/{p}"
allow = ["read"]
if    = "request.auth != null && request.auth.uid == 'alice'"
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	svc, st := newService(t, set)
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "posts/p1", Data: map[string]any{"secret": "s"}})
	wrong := []collections.Write{{
		Type: collections.WriteUpdate, Path: "posts/p1", Data: map[string]any{"x": 1},
		IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number("7")}},
	}}

	_, err = svc.Commit(ctx, bob, "default", wrong)
	var hp *access.HiddenPrecondition
	if !errors.As(err, &hp) || hp.Path != "posts/p1" || !errors.Is(err, collections.ErrPreconditionFailed) {
		t.Errorf("unreadable: err=%v, want a HiddenPrecondition that is ErrPreconditionFailed", err)
	}
	_, err = svc.Commit(ctx, alice, "default", wrong)
	var pe *collections.PreconditionError
	if !errors.As(err, &pe) || pe.Current == nil || errors.As(err, &hp) {
		t.Errorf("readable: err=%v, want the PreconditionError with the current document", err)
	}
	// The result of bob's merge shows only the envelope.
	res, err := svc.Commit(ctx, bob, "default", []collections.Write{{Type: collections.WriteUpdate, Path: "posts/p1", Data: map[string]any{"x": 1}}})
	if err != nil || len(res) != 1 || res[0].Doc.Data != nil || res[0].Doc.Version != 2 {
		t.Errorf("unreadable merge result: %+v %v, want the envelope of version 2", res, err)
	}
}

func TestService_CheckMay(t *testing.T) {
	svc, _ := newService(t, nil)
	wantDenied(t, "anonymous", svc.CheckMay(access.Anonymous, "", "write documents", access.WriteOps...), true, "write documents")
	wantDenied(t, "user elsewhere", svc.CheckMay(alice, "rooms/r1", "write rooms/r1", access.WriteOps...), false, "write rooms/r1")
	if err := svc.CheckMay(alice, "users/alice/notes/*", "write", access.WriteOps...); err != nil {
		t.Errorf("user in her own tree: %v", err)
	}
	if err := svc.CheckMay(access.AdminKey, "rooms/r1", "write", access.WriteOps...); err != nil {
		t.Errorf("admin key: %v", err)
	}
}
