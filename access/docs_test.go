package access_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/webhooks"
)

// Docs is the agent runtime's document API in process.
var _ webhooks.Docs = (*access.Docs)(nil)

// serviceKey is the caller a service key with the "service" role resolves
// to: the shipped rules let it read and write users/{uid}/... only.
var serviceKey = access.CallerOfIdentity(&auth.Identity{UID: "svc:hooks", Username: "hooks", Roles: []string{"service"}, Kind: auth.KindServiceKey})

func newDocs(t *testing.T) (*access.Docs, collections.Store) {
	t.Helper()
	svc, st := newService(t, rules.Default())
	return access.NewDocs(svc, "", func(context.Context) (*access.Caller, error) { return serviceKey, nil }), st
}

func TestDocs_CreateGetUpdate(t *testing.T) {
	ctx := context.Background()
	docs, _ := newDocs(t)
	const path = "users/u1/chats/c1"

	d, err := docs.Create(ctx, path, map[string]any{"title": "hi", "turns": 1, "version": 9, "id": "other"})
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "c1" || d.Version != 1 || d.Data["title"] != "hi" || d.Data["version"] != nil || d.Data["id"] != nil {
		t.Fatalf("created %+v, want c1 v1 with the user fields only", d)
	}
	if _, err := docs.Create(ctx, path, map[string]any{}); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("second create: err=%v, want ErrAlreadyExists", err)
	}
	if got, err := docs.Get(ctx, path); err != nil || fmt.Sprint(got.Data["turns"]) != "1" {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := docs.Get(ctx, "users/u1/chats/none"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("get of a missing document: err=%v, want ErrNotFound", err)
	}

	d, err = docs.Update(ctx, path, map[string]any{"turns": 2, "meta": map[string]any{"k": "v"}}, 1)
	if err != nil || d.Version != 2 || d.Data["title"] != "hi" || fmt.Sprint(d.Data["turns"]) != "2" {
		t.Fatalf("update at version 1: %+v %v, want the merged version 2", d, err)
	}
	if _, err := docs.Update(ctx, path, map[string]any{"turns": 3}, 1); !errors.Is(err, collections.ErrPreconditionFailed) {
		t.Errorf("update at a stale version: err=%v, want ErrPreconditionFailed", err)
	}
	if d, err := docs.Update(ctx, path, map[string]any{"meta": nil}, 0); err != nil || d.Version != 3 || d.Data["meta"] != nil {
		t.Errorf("unconditional update: %+v %v, want version 3 without meta", d, err)
	}
	if _, err := docs.Update(ctx, "users/u1/chats/none", map[string]any{"x": 1}, 1); !errors.Is(err, collections.ErrPreconditionFailed) {
		t.Errorf("conditional update of a missing document: err=%v, want ErrPreconditionFailed", err)
	}

	if err := docs.Delete(ctx, path); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := docs.Get(ctx, path); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("get after delete: err=%v, want ErrNotFound", err)
	}
	if err := docs.Delete(ctx, path); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("second delete: err=%v, want ErrNotFound", err)
	}
	if err := docs.Delete(ctx, "posts/p1"); err == nil {
		t.Error("delete outside what the service key may write succeeded")
	}
}

func TestDocs_Query(t *testing.T) {
	ctx := context.Background()
	docs, st := newDocs(t)
	for i := range 5 {
		mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/tasks/t%d", i), Data: map[string]any{"n": i, "open": i%2 == 0}})
	}
	got, err := docs.Query(ctx, collections.Query{
		Collection: "users/u1/tasks",
		Filters:    []collections.Filter{{Field: "open", Op: collections.OpEq, Value: true}},
		OrderBy:    []collections.Order{{Field: "n", Direction: "desc"}},
	})
	if err != nil || len(got) != 3 || got[0].ID != "t4" || got[2].ID != "t0" {
		t.Fatalf("open tasks, newest first: %v %v, want t4 t2 t0", got, err)
	}
	// Go values in filters mean what their JSON means, as over REST.
	got, err = docs.Query(ctx, collections.Query{Collection: "users/u1/tasks", Filters: []collections.Filter{{Field: "n", Op: collections.OpGe, Value: 3}}, Limit: 1})
	if err != nil || len(got) != 1 || got[0].ID != "t3" {
		t.Errorf("n >= 3, limit 1: %v %v, want t3", got, err)
	}
	if _, err := docs.Query(ctx, collections.Query{Collection: "users/u1/tasks", Limit: -1}); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("negative limit: err=%v, want ErrInvalidQuery", err)
	}
	if _, err := docs.Query(ctx, collections.Query{Collection: "users/u1/tasks", OrderBy: []collections.Order{{Field: "n", Direction: "up"}}}); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("bad direction: err=%v, want ErrInvalidQuery", err)
	}
	// A cursor Loom did not hand out is an invalid query, as the 400
	// INVALID_QUERY it is over REST is to loomclient: the agent runtime
	// records it as the content's fault (webhooks' permanent) instead of
	// retrying it.
	_, err = docs.Query(ctx, collections.Query{Collection: "users/u1/tasks", StartAfter: "bm90LWEtY3Vyc29y"})
	if !errors.Is(err, access.ErrBadCursor) || !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("forged cursor: err=%v, want ErrBadCursor and ErrInvalidQuery", err)
	}
}

// The shipped rules give the service role users/{uid}/... and nothing
// else: anywhere else the Docs are denied, as a service key is over REST.
func TestDocs_Denied(t *testing.T) {
	ctx := context.Background()
	docs, st := newDocs(t)
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "jobs/j0", Data: map[string]any{}})
	var de *access.Denied
	if _, err := docs.Create(ctx, "jobs/j1", map[string]any{"x": 1}); !errors.As(err, &de) || de.Anonymous {
		t.Errorf("create outside users/: err=%v, want a denial (403)", err)
	}
	if _, err := docs.Get(ctx, "jobs/j0"); !errors.As(err, &de) {
		t.Errorf("get outside users/: err=%v, want a denial", err)
	}
	if _, err := docs.Query(ctx, collections.Query{Collection: "jobs"}); !errors.As(err, &de) {
		t.Errorf("query outside users/: err=%v, want a denial", err)
	}
	if _, err := docs.Create(ctx, "_users/u9", map[string]any{}); !errors.Is(err, access.ErrSystemWrite) {
		t.Errorf("create in a system collection: err=%v, want ErrSystemWrite", err)
	}

	// The caller is resolved per call: a revoked key stops working at once.
	revoked := errors.New("revoked")
	svc, err := access.New(access.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	gone := access.NewDocs(svc, "default", func(context.Context) (*access.Caller, error) { return nil, revoked })
	if _, err := gone.Get(ctx, "users/u1/chats/c1"); !errors.Is(err, revoked) {
		t.Errorf("revoked caller: err=%v, want its error", err)
	}
}

// A page the rules shortened is continued through the sealed cursor until
// it is full; after too many empty pages the query stops with
// ErrIncomplete rather than scan forever.
func TestDocs_QueryContinuesPastHiddenDocuments(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, rules.Default())
	zoe := &access.Caller{Kind: "user", UID: "zoe"}
	docs := access.NewDocs(svc, "default", func(context.Context) (*access.Caller, error) { return zoe, nil })
	hide := func(from, n int) {
		ws := make([]collections.Write, n)
		for i := range ws {
			ws[i] = collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/bob/notes/n%04d", from+i), Data: map[string]any{}}
		}
		if _, err := st.Commit(ctx, "default", ws, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hide(0, 20) // users/bob/... sorts before users/zoe/...: 20 rounds of hidden documents at limit 1
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/zoe/notes/z1", Data: map[string]any{}})
	got, err := docs.Query(ctx, collections.Query{Collection: "users/*/notes", Limit: 1})
	if err != nil || len(got) != 1 || got[0].Path != "users/zoe/notes/z1" {
		t.Fatalf("past 20 hidden documents: %v %v, want users/zoe/notes/z1", got, err)
	}

	// Each Service.Query examines at most 8 engine pages: 33 empty pages
	// of one document are more than Docs.Query reads.
	hide(20, 8*33)
	if _, err := docs.Query(ctx, collections.Query{Collection: "users/*/notes", Limit: 1}); !errors.Is(err, access.ErrIncomplete) {
		t.Errorf("past %d hidden documents: err=%v, want ErrIncomplete", 20+8*33, err)
	}
}

// Query returns up to q.Limit documents however many pages that takes, as
// loomclient's Query does (it asks for MaxLimit at a time): a limit above
// MaxLimit is not cut to one engine page.
func TestDocs_QueryLimitAboveMaxLimit(t *testing.T) {
	ctx := context.Background()
	docs, st := newDocs(t)
	ws := make([]collections.Write, collections.MaxLimit+5)
	for i := range ws {
		ws[i] = collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/msgs/m%05d", i), Data: map[string]any{"n": i}}
	}
	if _, err := st.Commit(ctx, "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := docs.Query(ctx, collections.Query{Collection: "users/u1/msgs", Limit: collections.MaxLimit + 2})
	if err != nil || len(got) != collections.MaxLimit+2 || got[len(got)-1].ID != fmt.Sprintf("m%05d", collections.MaxLimit+1) {
		t.Fatalf("limit MaxLimit+2: %d documents, %v; want %d in order", len(got), err, collections.MaxLimit+2)
	}
	if got, err := docs.Query(ctx, collections.Query{Collection: "users/u1/msgs", Limit: 2 * collections.MaxLimit}); err != nil || len(got) != len(ws) {
		t.Fatalf("limit 2*MaxLimit: %d documents, %v; want all %d", len(got), err, len(ws))
	}
}

// Batch commits its writes atomically, each one meaning what Create,
// Update and Delete do, under the same checks: a failed write commits none.
func TestDocs_Batch(t *testing.T) {
	ctx := context.Background()
	docs, _ := newDocs(t)
	for _, p := range []string{"users/u1/chats/b", "users/u1/chats/c"} {
		if _, err := docs.Create(ctx, p, map[string]any{"n": 1}); err != nil {
			t.Fatal(err)
		}
	}
	update := func(path string, data map[string]any, version int64) collections.Write {
		return collections.Write{Type: collections.WriteUpdate, Path: path, Data: data, IfMatch: []collections.Filter{
			{Field: collections.FieldVersion, Op: collections.OpEq, Value: version}}}
	}
	create := func(path string, data map[string]any) collections.Write {
		return collections.Write{Type: collections.WriteCreate, Path: path, Data: data}
	}
	// Each failure commits nothing: the create of a stays undone.
	for name, w := range map[string]struct {
		write collections.Write
		want  error
	}{
		"stale version": {update("users/u1/chats/b", map[string]any{"n": 2}, 7), collections.ErrPreconditionFailed},
		"existing":      {create("users/u1/chats/c", map[string]any{}), collections.ErrAlreadyExists},
		"missing":       {collections.Write{Type: collections.WriteDelete, Path: "users/u1/chats/none"}, collections.ErrNotFound},
	} {
		_, err := docs.Batch(ctx, []collections.Write{create("users/u1/chats/a", map[string]any{"n": 1}), w.write})
		var we *collections.WriteError
		if !errors.Is(err, w.want) || !errors.As(err, &we) || we.Index != 1 {
			t.Errorf("%s: err=%v, want %v at index 1", name, err, w.want)
		}
		if _, err := docs.Get(ctx, "users/u1/chats/a"); !errors.Is(err, collections.ErrNotFound) {
			t.Fatalf("%s: the batch's first write committed: %v", name, err)
		}
	}
	if _, err := docs.Batch(ctx, []collections.Write{create("users/u1/chats/a", nil), create("posts/p1", map[string]any{})}); err == nil {
		t.Error("a batch with a write the service key may not make succeeded")
	} else if _, err := docs.Get(ctx, "users/u1/chats/a"); !errors.Is(err, collections.ErrNotFound) {
		t.Fatalf("a denied batch committed its first write: %v", err)
	}
	got, err := docs.Batch(ctx, []collections.Write{
		create("users/u1/chats/a", map[string]any{"n": 1, "version": 9, "id": "other"}),
		update("users/u1/chats/b", map[string]any{"n": 2}, 1),
		{Type: collections.WriteDelete, Path: "users/u1/chats/c"},
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("batch: %v %v", got, err)
	}
	if got[0].ID != "a" || got[0].Version != 1 || got[0].Data["version"] != nil || got[0].Data["id"] != nil ||
		got[1].Version != 2 || fmt.Sprint(got[1].Data["n"]) != "2" || got[2] != nil {
		t.Errorf("batch results %+v %+v %+v", got[0], got[1], got[2])
	}
	if _, err := docs.Get(ctx, "users/u1/chats/c"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("the batch's delete: %v", err)
	}
}

// A page the rules shortened is refilled up to the limit and never past it,
// and its cursor continues right after the last document it holds.
func TestQuery_RefilledPageKeepsTheLimit(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, rules.Default())
	zoe := &access.Caller{Kind: "user", UID: "zoe"}
	ws := []collections.Write{{Type: collections.WriteCreate, Path: "users/bob/notes/b1", Data: map[string]any{}}}
	for i := range 5 {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/zoe/notes/z%d", i), Data: map[string]any{}})
	}
	if _, err := st.Commit(ctx, "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	q := collections.Query{Collection: "users/*/notes", Limit: 2}
	var got []string
	for page := 0; page < 4; page++ {
		res, err := svc.Query(ctx, zoe, "default", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Docs) > q.Limit {
			t.Fatalf("page %d holds %d documents, limit %d", page, len(res.Docs), q.Limit)
		}
		for _, d := range res.Docs {
			got = append(got, d.ID)
		}
		if res.NextCursor == "" {
			break
		}
		q.StartAfter = res.NextCursor
	}
	if fmt.Sprint(got) != "[z0 z1 z2 z3 z4]" {
		t.Fatalf("pages hold %v, want [z0 z1 z2 z3 z4] (bob's b1 hidden)", got)
	}
}
