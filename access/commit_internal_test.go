package access

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/rules"
)

// interleavingStore is the real engine with a hook that runs once, right
// before the first Commit: it lets a test put a concurrent write exactly
// between the rules check and the commit.
type interleavingStore struct {
	collections.Store
	once   sync.Once
	before func()
}

func (s *interleavingStore) Commit(ctx context.Context, db string, ws []collections.Write, o collections.CommitOptions) ([]collections.WriteResult, error) {
	s.once.Do(s.before)
	return s.Store.Commit(ctx, db, ws, o)
}

func newGuardService(t *testing.T, src string) (*Service, *interleavingStore) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	set, err := rules.Parse([]byte(src), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	is := &interleavingStore{Store: st, before: func() {}}
	s, err := New(Config{Store: is, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	return s, is
}

func mustCommit(t *testing.T, st collections.Store, w collections.Write) {
	t.Helper()
	if _, err := st.Commit(context.Background(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A document locked between the rules check and the commit must not be
// updated: the guarded write is pinned to the version the rules saw, fails,
// and is re-evaluated against the locked document.
func TestCommitGuarded_ConcurrentChangeIsReevaluated(t *testing.T) {
	s, is := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null && resource.data.locked != true"
`)
	mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "posts/p1", Data: map[string]any{"locked": false}})
	is.before = func() {
		mustCommit(t, is.Store, collections.Write{Type: collections.WriteUpdate, Path: "posts/p1", Data: map[string]any{"locked": true}})
	}
	caller := &Caller{Kind: "user", UID: "u1"}
	_, err := s.commitGuarded(context.Background(), caller, "default", []collections.Write{
		{Type: collections.WriteUpdate, Path: "posts/p1", Data: map[string]any{"text": "sneaky"}},
	})
	var de *Denied
	if !errors.As(err, &de) || de.Anonymous {
		t.Fatalf("update racing a lock: err=%v, want a denial (403) after re-evaluation", err)
	}
	d, err := is.Store.Get(context.Background(), "default", "posts/p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Data["text"]; ok || d.Version != 2 {
		t.Fatalf("document after the denied update: v%d %v", d.Version, d.Data)
	}
}

// An upsert of a missing document is checked as a create; if someone else
// creates the document first, it is re-checked as an update.
func TestCommitGuarded_UpsertRaceBecomesUpdate(t *testing.T) {
	s, is := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["create"]
if    = "request.auth != null"
`)
	is.before = func() {
		mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "posts/p1", Data: map[string]any{"by": "other"}})
	}
	caller := &Caller{Kind: "user", UID: "u1"}
	_, err := s.commitGuarded(context.Background(), caller, "default", []collections.Write{
		{Type: collections.WriteReplace, Path: "posts/p1", Data: map[string]any{"by": "u1"}},
	})
	var de *Denied
	if !errors.As(err, &de) || de.Anonymous {
		t.Fatalf("upsert racing a create: err=%v, want a denial (403: now an update, which no rule allows)", err)
	}
	d, err := is.Store.Get(context.Background(), "default", "posts/p1")
	if err != nil || d.Data["by"] != "other" {
		t.Fatalf("document after the race: %v %v", d, err)
	}
}

// The client's own failing precondition is reported at once, not retried
// into something else.
func TestCommitGuarded_ClientPreconditionReported(t *testing.T) {
	s, is := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null"
`)
	mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "posts/p1", Data: map[string]any{}})
	_, err := s.commitGuarded(context.Background(), &Caller{Kind: "user", UID: "u1"}, "default", []collections.Write{{
		Type: collections.WriteUpdate, Path: "posts/p1", Data: map[string]any{"x": true},
		IfMatch: []collections.Filter{{Field: "version", Op: collections.OpEq, Value: json.Number("7")}},
	}})
	if !errors.Is(err, collections.ErrPreconditionFailed) {
		t.Fatalf("err=%v, want the client's precondition failure", err)
	}
}

// getCountingStore counts the engine's Gets.
type getCountingStore struct {
	collections.Store
	gets atomic.Int64
}

func (s *getCountingStore) Get(ctx context.Context, db, path string) (*collections.Document, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, db, path)
}

// A plain create is committed without looking its path up; a create whose
// rule reads the stored document still sees it when the path is taken: a
// rule refusing a create over a stored document answers 403, and one
// allowing it lets the engine answer 409, exactly as when the path was
// looked up before the rules.
func TestCommitGuarded_CreateLooksUpOnlyATakenPath(t *testing.T) {
	s, is := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["create"]
if    = "request.auth != null && resource == null"

[[rule]]
match = "open/{p}"
allow = ["create"]
if    = "request.auth != null && resource != null"
`)
	counting := &getCountingStore{Store: is.Store}
	s.store = counting
	ctx := context.Background()
	caller := &Caller{Kind: "user", UID: "u1"}
	create := func(path string) error {
		_, err := s.commitGuarded(ctx, caller, "default", []collections.Write{
			{Type: collections.WriteCreate, Path: path, Data: map[string]any{"by": "u1"}},
		})
		return err
	}

	if err := create("posts/p1"); err != nil {
		t.Fatal(err)
	}
	if n := counting.gets.Load(); n != 0 {
		t.Fatalf("a create on a free path made %d Gets, want none", n)
	}

	mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "posts/p2", Data: map[string]any{"by": "other"}})
	var de *Denied
	if err := create("posts/p2"); !errors.As(err, &de) {
		t.Fatalf("create over a stored document its rule refuses: err=%v, want a denial (403)", err)
	}
	if err := create("open/o1"); err == nil {
		t.Fatal("create on a free path its rule refuses (resource != null) succeeded")
	} else if !errors.As(err, &de) {
		t.Fatalf("create on a free path its rule refuses: err=%v, want a denial (403)", err)
	}
	mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "open/o2", Data: map[string]any{"by": "other"}})
	if err := create("open/o2"); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Fatalf("create over a stored document its rule allows: err=%v, want already exists (409)", err)
	}
	for _, p := range []string{"posts/p2", "open/o2"} {
		if d, err := is.Store.Get(ctx, "default", p); err != nil || d.Version != 1 || d.Data["by"] != "other" {
			t.Fatalf("%s after the refused create: %+v %v", p, d, err)
		}
	}
}

// writeView evaluates the get rules only for an update, the one write
// whose result can carry stored fields the caller never sent: a create or
// replace shows back exactly the caller's own data, with no rule
// evaluation on the hot path of every write.
func TestWriteView_OnlyMergesAreHidden(t *testing.T) {
	s, _ := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["write"]
if    = "request.auth != null"
`)
	caller := &Caller{Kind: "user", UID: "u1"}
	d := &collections.Document{Path: "posts/p1", Collection: "posts", ID: "p1", Version: 2, Data: map[string]any{"x": "mine"}, Raw: []byte(`{"x":"mine"}`)}
	for _, typ := range []collections.WriteType{collections.WriteCreate, collections.WriteReplace} {
		got, err := s.writeView(context.Background(), caller, "default", typ, d)
		if err != nil || got != d {
			t.Errorf("%s result: %+v %v, want the document as written", typ, got, err)
		}
	}
	got, err := s.writeView(context.Background(), caller, "default", collections.WriteUpdate, d)
	if err != nil || got.Data != nil || got.Raw != nil || got.Version != 2 || got.ID != "p1" {
		t.Errorf("update result of an unreadable document: %+v %v, want the envelope only", got, err)
	}
}

// Each write of a commit is decided over the documents as the earlier
// writes leave them, the one just before the last included: in two-write
// and three-write commits, an update is allowed only over the locked:false
// its own commit's create wrote, and denied over the locked:true a create
// or an update before it in the same commit wrote.
func TestGuardWrites_SeesEarlierWrites(t *testing.T) {
	s, _ := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["create"]
if    = "request.auth != null"

[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null && resource != null && resource.data.locked == false"
`)
	caller := &Caller{Kind: "user", UID: "u1"}
	create := func(p string, locked bool) collections.Write {
		return collections.Write{Type: collections.WriteCreate, Path: p, Data: map[string]any{"locked": locked}}
	}
	update := func(p string, locked bool) collections.Write {
		return collections.Write{Type: collections.WriteUpdate, Path: p, Data: map[string]any{"locked": locked}}
	}
	for _, tt := range []struct {
		name   string
		writes []collections.Write
		allow  bool
	}{
		{"update over an unlocked create", []collections.Write{create("posts/a", false), update("posts/a", false)}, true},
		{"update over a locked create", []collections.Write{create("posts/b", true), update("posts/b", false)}, false},
		{"update over a lock of the same commit", []collections.Write{create("posts/c", false), update("posts/c", true), update("posts/c", false)}, false},
		{"update over an unlock of the same commit", []collections.Write{create("posts/d", false), update("posts/d", false), update("posts/d", true)}, true},
	} {
		_, _, err := s.guardWrites(context.Background(), caller, "default", tt.writes, true)
		if (err == nil) != tt.allow {
			t.Errorf("%s: err=%v, want allowed=%v", tt.name, err, tt.allow)
		}
	}
}

// pinMoved retries a guarded commit only when a pinned document moved away
// from the state the rules saw, never for the client's own precondition or
// an error that names no pinned write.
func TestPinMoved(t *testing.T) {
	pins := []pin{{set: true, version: 3}, {}, {set: true, version: 0}}
	precond := func(i int, cur *collections.Document) error {
		return &collections.WriteError{Index: i, Path: "c/d", Err: &collections.PreconditionError{Path: "c/d", Current: cur}}
	}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"not a write error", errors.New("disk on fire"), false},
		{"index past the pins", precond(len(pins), nil), false},
		{"negative index", precond(-1, nil), false},
		{"unpinned write", precond(1, nil), false},
		{"pinned version still current", precond(0, &collections.Document{Version: 3}), false},
		{"pinned document changed", precond(0, &collections.Document{Version: 4}), true},
		{"pinned document deleted", precond(0, nil), true},
		{"upsert turned create lost a race", &collections.WriteError{Index: 2, Err: collections.ErrAlreadyExists}, true},
		{"create of a pinned existing document", &collections.WriteError{Index: 0, Err: collections.ErrAlreadyExists}, false},
		{"other write error", &collections.WriteError{Index: 0, Err: collections.ErrNotFound}, false},
	} {
		got := func() (got bool) {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", tt.name, r)
				}
			}()
			return pinMoved(tt.err, pins)
		}()
		if got != tt.want {
			t.Errorf("%s: pinMoved=%v, want %v", tt.name, got, tt.want)
		}
	}
}

// The rules see each write of a commit over the state the commit's earlier
// writes leave: a document the commit created is updated as its creator's,
// and one it gave away is no longer the caller's to change.
func TestGuardWrites_LaterWritesSeeEarlierOnes(t *testing.T) {
	s, is := newGuardService(t, `
[[rule]]
match = "posts/{p}"
allow = ["create"]
if    = "request.auth != null && request.resource.data.owner == request.auth.uid"

[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null && resource.data.owner == request.auth.uid"
`)
	mustCommit(t, is.Store, collections.Write{Type: collections.WriteCreate, Path: "posts/mine", Data: map[string]any{"owner": "u1"}})
	caller := &Caller{Kind: "user", UID: "u1"}
	ctx := context.Background()
	if _, err := s.commitGuarded(ctx, caller, "default", []collections.Write{
		{Type: collections.WriteCreate, Path: "posts/new", Data: map[string]any{"owner": "u1"}},
		{Type: collections.WriteUpdate, Path: "posts/new", Data: map[string]any{"text": "hi"}},
	}); err != nil {
		t.Fatalf("create then update of the created document: %v", err)
	}
	_, err := s.commitGuarded(ctx, caller, "default", []collections.Write{
		{Type: collections.WriteUpdate, Path: "posts/mine", Data: map[string]any{"owner": "u2"}},
		{Type: collections.WriteUpdate, Path: "posts/mine", Data: map[string]any{"text": "after giving it away"}},
	})
	var de *Denied
	var we *collections.WriteError
	if !errors.As(err, &de) || !errors.As(err, &we) || we.Index != 1 {
		t.Fatalf("update after giving the document away in the same commit: err=%v, want a denial of write 1", err)
	}
	d, err := is.Store.Get(ctx, "default", "posts/mine")
	if err != nil || d.Data["owner"] != "u1" || d.Version != 1 {
		t.Fatalf("posts/mine after the denied commit: %v %v", d, err)
	}
}
