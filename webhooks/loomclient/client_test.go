package loomclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/loomclient"
)

const adminKey = "test-admin-key-0123456789"

// The client is what the agent runtime's handlers use.
var _ webhooks.Docs = (*loomclient.Client)(nil)

type env struct {
	URL   string
	Auth  *auth.Service
	Store collections.Store
	// queries counts POST .../query requests.
	queries atomic.Int64
}

// newEnv serves a real server over a real SQLite store, with the auth
// service (service keys) and the given rules (nil: the defaults).
func newEnv(t *testing.T, rs *rules.Set) *env {
	t.Helper()
	return newEnvWith(t, rs, false)
}

// newEnvWith is newEnv with [compat] syntrix on or off.
func newEnvWith(t *testing.T, rs *rules.Set, syntrixCompat bool) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	as, err := auth.New(context.Background(), st, auth.Config{
		DB:         "default",
		Secret:     []byte("0123456789abcdef0123456789abcdef-test"),
		BcryptCost: bcrypt.MinCost,
	})
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	t.Cleanup(func() { as.Close() })
	srv, err := server.New(st, server.Config{AdminKey: adminKey, Auth: as, Rules: rs, RateLimit: -1, SyntrixCompat: syntrixCompat})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	e := &env{Auth: as, Store: st}
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/query") {
			e.queries.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	e.URL = ts.URL
	return e
}

func (e *env) client(t *testing.T, key string, pageSize int) *loomclient.Client {
	t.Helper()
	c, err := loomclient.New(loomclient.Config{BaseURL: e.URL, APIKey: key, PageSize: pageSize})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// serviceKey creates a service key through the admin API, as an operator
// would (POST /admin/v1/keys).
func (e *env) serviceKey(t *testing.T, name string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", e.URL+"/admin/v1/keys", strings.NewReader(fmt.Sprintf(`{"name":%q,"roles":["service"]}`, name)))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create service key: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Key == "" {
		t.Fatalf("create service key: no key in %s", b)
	}
	return out.Key
}

func TestNew(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://h/?q=1"} {
		if _, err := loomclient.New(loomclient.Config{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
	if _, err := loomclient.New(loomclient.Config{BaseURL: "http://127.0.0.1:8080/"}); err != nil {
		t.Errorf("New: %v", err)
	}
}

func TestCreateGet(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	ctx := context.Background()

	data := map[string]any{"text": "hi", "n": 9007199254740993, "f": 1.5, "nested": map[string]any{"a": []any{1, "x"}}}
	d, err := c.Create(ctx, "users/u1/chats/c1", data)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if d.ID != "c1" || d.Collection != "users/u1/chats" || d.Path != "users/u1/chats/c1" || d.Version != 1 || d.CreatedAt == 0 || d.UpdatedAt != d.CreatedAt {
		t.Fatalf("Create envelope = %+v", d)
	}
	got, err := c.Get(ctx, "users/u1/chats/c1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.ID != "c1" || got.Collection != "users/u1/chats" || got.Path != "users/u1/chats/c1" || got.Version != 1 || got.CreatedAt != d.CreatedAt || got.UpdatedAt != d.UpdatedAt || got.Deleted {
		t.Fatalf("Get envelope = %+v", got)
	}
	for _, k := range []string{"id", "collection", "version", "createdAt", "updatedAt"} {
		if _, ok := got.Data[k]; ok {
			t.Errorf("Data has envelope field %q: %v", k, got.Data)
		}
	}
	if n, ok := got.Data["n"].(json.Number); !ok || n.String() != "9007199254740993" {
		t.Errorf("n = %#v, want json.Number 9007199254740993", got.Data["n"])
	}
	if f, ok := got.Data["f"].(json.Number); !ok || f.String() != "1.5" {
		t.Errorf("f = %#v, want json.Number 1.5", got.Data["f"])
	}
	if got.Data["text"] != "hi" {
		t.Errorf("text = %#v", got.Data["text"])
	}
	nested, _ := got.Data["nested"].(map[string]any)
	if a, _ := nested["a"].([]any); len(a) != 2 || a[0] != json.Number("1") || a[1] != "x" {
		t.Errorf("nested = %#v", got.Data["nested"])
	}
	if len(got.Data) != 4 {
		t.Errorf("Data = %v, want 4 user fields", got.Data)
	}
	// The caller's map is not modified.
	if _, ok := data["id"]; ok {
		t.Error("Create added \"id\" to the caller's map")
	}
}

func TestCreateTwiceAlreadyExists(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	ctx := context.Background()
	if _, err := c.Create(ctx, "users/u1/runs/r1", map[string]any{"v": "first"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	_, err := c.Create(ctx, "users/u1/runs/r1", map[string]any{"v": "second"})
	if !errors.Is(err, collections.ErrAlreadyExists) {
		t.Fatalf("second Create: %v, want ErrAlreadyExists", err)
	}
	var he *loomclient.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusConflict || he.Code != "ALREADY_EXISTS" || he.Retryable() || loomclient.Retryable(err) {
		t.Errorf("error = %#v", he)
	}
	d, err := c.Get(ctx, "users/u1/runs/r1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Data["v"] != "first" || d.Version != 1 {
		t.Errorf("after the second Create: %+v, want the first data at version 1", d)
	}
	// Envelope fields in data are ignored, including a conflicting "id".
	d, err = c.Create(ctx, "users/u1/runs/r2", map[string]any{"id": "other", "version": 7, "v": 1})
	if err != nil {
		t.Fatalf("Create with envelope fields: %v", err)
	}
	if d.ID != "r2" || d.Version != 1 || len(d.Data) != 1 {
		t.Errorf("Create with envelope fields = %+v", d)
	}
}

func TestUpdate(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	ctx := context.Background()
	if _, err := c.Create(ctx, "users/u1/chats/c1", map[string]any{"title": "t", "meta": map[string]any{"a": 1, "b": 2}, "gone": true}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Update(ctx, "users/u1/chats/c1", map[string]any{"meta": map[string]any{"b": 3}, "gone": nil, "status": "done"}, 0)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	meta, _ := d.Data["meta"].(map[string]any)
	if d.Version != 2 || d.Data["title"] != "t" || d.Data["status"] != "done" || meta["a"] != json.Number("1") || meta["b"] != json.Number("3") {
		t.Errorf("merged = %+v", d)
	}
	if _, ok := d.Data["gone"]; ok {
		t.Errorf("null did not remove the field: %v", d.Data)
	}

	d, err = c.Update(ctx, "users/u1/chats/c1", map[string]any{"status": "v3"}, 2)
	if err != nil || d.Version != 3 || d.Data["status"] != "v3" {
		t.Fatalf("Update at version 2: %+v, %v", d, err)
	}
	_, err = c.Update(ctx, "users/u1/chats/c1", map[string]any{"status": "stale"}, 2)
	if !errors.Is(err, collections.ErrPreconditionFailed) {
		t.Fatalf("stale Update: %v, want ErrPreconditionFailed", err)
	}
	var he *loomclient.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusPreconditionFailed || he.Message == "" || !strings.Contains(err.Error(), he.Message) {
		t.Errorf("stale Update error = %v (%#v): want the server message kept", err, he)
	}
	if d, _ := c.Get(ctx, "users/u1/chats/c1"); d.Data["status"] != "v3" {
		t.Errorf("stale Update applied: %v", d.Data)
	}
	if _, err := c.Update(ctx, "users/u1/chats/missing", map[string]any{"x": 1}, 0); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("Update of a missing document: %v, want ErrNotFound", err)
	}
	if _, err := c.Update(ctx, "users/u1/chats/missing", map[string]any{"x": 1}, 1); !errors.Is(err, collections.ErrPreconditionFailed) && !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("Update of a missing document at a version: %v", err)
	}
}

func TestGetMissing(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	_, err := c.Get(context.Background(), "users/u1/chats/nope")
	if !errors.Is(err, collections.ErrNotFound) {
		t.Fatalf("Get: %v, want ErrNotFound", err)
	}
	if loomclient.Retryable(err) {
		t.Error("404 is retryable")
	}
	if _, err := c.Get(context.Background(), "users/u1"+"/chats"); !errors.Is(err, collections.ErrInvalidPath) {
		t.Errorf("Get of a collection path: %v, want ErrInvalidPath", err)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	ctx := context.Background()
	const path = "users/u1/chats/c1"
	if _, err := c.Create(ctx, path, map[string]any{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, path); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := c.Get(ctx, path); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := c.Delete(ctx, path); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
}

func seed(t *testing.T, e *env, n int) {
	t.Helper()
	for start := 0; start < n; start += 250 {
		var writes []map[string]any
		for i := start; i < min(n, start+250); i++ {
			writes = append(writes, map[string]any{
				"type": "create",
				"path": fmt.Sprintf("users/u1/items/i%03d", i),
				"data": map[string]any{"n": i, "group": fmt.Sprintf("g%d", i%3)},
			})
		}
		b, _ := json.Marshal(map[string]any{"writes": writes})
		req, _ := http.NewRequest("POST", e.URL+"/api/v1/databases/default/batch", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("seed batch: %d %s", resp.StatusCode, body)
		}
	}
}

func TestQuery(t *testing.T) {
	e := newEnv(t, nil)
	seed(t, e, 300)
	ctx := context.Background()
	c := e.client(t, adminKey, 0)

	docs, err := c.Query(ctx, collections.Query{
		Collection: "users/u1/items",
		Filters:    []collections.Filter{{Field: "group", Op: collections.OpEq, Value: "g1"}, {Field: "n", Op: collections.OpGe, Value: 100}},
		OrderBy:    []collections.Order{{Field: "n", Direction: "desc"}},
		Limit:      5,
	})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	want := []int64{298, 295, 292, 289, 286}
	if len(docs) != len(want) {
		t.Fatalf("got %d docs, want %d", len(docs), len(want))
	}
	for i, d := range docs {
		n, _ := d.Data["n"].(json.Number).Int64()
		if n != want[i] || d.Data["group"] != "g1" || d.Path != fmt.Sprintf("users/u1/items/i%03d", n) || d.Version != 1 {
			t.Errorf("docs[%d] = %+v, want n=%d", i, d, want[i])
		}
	}

	// Limit 0 means 100.
	if docs, err := c.Query(ctx, collections.Query{Collection: "users/u1/items"}); err != nil || len(docs) != 100 {
		t.Errorf("default limit: %d docs, %v", len(docs), err)
	}
	// Fewer matches than the limit.
	if docs, err := c.Query(ctx, collections.Query{Collection: "users/u1/items", Filters: []collections.Filter{{Field: "n", Op: collections.OpLt, Value: 3}}, Limit: 50}); err != nil || len(docs) != 3 {
		t.Errorf("small result: %d docs, %v", len(docs), err)
	}
	// Bad query → ErrInvalidQuery.
	if _, err := c.Query(ctx, collections.Query{Collection: "users/u1/items", Filters: []collections.Filter{{Field: "n", Op: "~", Value: 1}}}); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("bad op: %v, want ErrInvalidQuery", err)
	}
}

func TestQueryPaging(t *testing.T) {
	e := newEnv(t, nil)
	seed(t, e, 300)
	ctx := context.Background()
	c := e.client(t, adminKey, 100) // at most 100 documents per request

	q := collections.Query{Collection: "users/u1/items", OrderBy: []collections.Order{{Field: "n"}}, Limit: 250}
	before := e.queries.Load()
	docs, err := c.Query(ctx, q)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if n := e.queries.Load() - before; n != 3 {
		t.Errorf("%d query requests, want 3 (100+100+50)", n)
	}
	if len(docs) != 250 {
		t.Fatalf("got %d docs, want 250", len(docs))
	}
	for i, d := range docs {
		if n, _ := d.Data["n"].(json.Number).Int64(); n != int64(i) {
			t.Fatalf("docs[%d].n = %d: pages overlap or skip", i, n)
		}
	}

	// More than there is: stops at the end (nextCursor null).
	before = e.queries.Load()
	docs, err = c.Query(ctx, collections.Query{Collection: "users/u1/items", OrderBy: []collections.Order{{Field: "n", Direction: "desc"}}, Limit: 1000})
	if err != nil || len(docs) != 300 {
		t.Fatalf("Query all: %d docs, %v", len(docs), err)
	}
	if n := e.queries.Load() - before; n > 4 {
		t.Errorf("%d query requests for 300 docs at page 100", n)
	}
	seen := map[string]bool{}
	for i, d := range docs {
		if n, _ := d.Data["n"].(json.Number).Int64(); n != int64(299-i) || seen[d.ID] {
			t.Fatalf("docs[%d] = %+v", i, d)
		}
		seen[d.ID] = true
	}
}

func TestWrongKey(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, "not-a-key", 0)
	_, err := c.Get(context.Background(), "users/u1/chats/c1")
	if !errors.Is(err, loomclient.ErrUnauthorized) {
		t.Fatalf("Get with a wrong key: %v, want ErrUnauthorized", err)
	}
	if !strings.Contains(err.Error(), "401") || loomclient.Retryable(err) {
		t.Errorf("error %q", err)
	}
	// No key at all.
	_, err = e.client(t, "", 0).Query(context.Background(), collections.Query{Collection: "users/u1/items"})
	if !errors.Is(err, loomclient.ErrUnauthorized) && !errors.Is(err, loomclient.ErrForbidden) {
		t.Errorf("anonymous query: %v", err)
	}
}

// TestServiceKeyRules: a service key is denied wherever no rule grants the
// "service" role (403 → ErrForbidden), so deployments need a service rule
// for the paths the handlers write (users/{uid}/...).
func TestServiceKeyRules(t *testing.T) {
	ctx := context.Background()

	// Rules with only the owner rule (the defaults before a service rule
	// was added): the service key is forbidden on users/...
	owner, err := rules.Parse([]byte(`[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read", "write"]
if    = "request.auth != null && request.auth.uid == userId"
`), "owner.toml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, owner)
	svc := e.client(t, e.serviceKey(t, "hooks"), 0)
	if _, err := e.client(t, adminKey, 0).Create(ctx, "users/u1/chats/c1", map[string]any{"x": 1}); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(ctx, "users/u1/chats/c2", map[string]any{"x": 1})
	if !errors.Is(err, loomclient.ErrForbidden) {
		t.Fatalf("service Create without a service rule: %v, want ErrForbidden", err)
	}
	if !strings.Contains(err.Error(), "403") || loomclient.Retryable(err) {
		t.Errorf("error %q", err)
	}
	if _, err := svc.Get(ctx, "users/u1/chats/c1"); !errors.Is(err, loomclient.ErrForbidden) {
		t.Errorf("service Get without a service rule: %v, want ErrForbidden", err)
	}

	// The default rules never cover paths outside users/.
	e = newEnv(t, nil)
	svc = e.client(t, e.serviceKey(t, "hooks"), 0)
	if _, err := svc.Create(ctx, "jobs/j1", map[string]any{"x": 1}); !errors.Is(err, loomclient.ErrForbidden) {
		t.Errorf("service Create on jobs/ with the default rules: %v, want ErrForbidden", err)
	}

	// With a service rule the same key reads and writes.
	withSvc, err := rules.Parse([]byte(`[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read", "write"]
if    = "request.auth != null && 'service' in request.auth.roles"
`), "service.toml")
	if err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, withSvc)
	svc = e.client(t, e.serviceKey(t, "hooks"), 0)
	d, err := svc.Create(ctx, "users/u1/chats/c1", map[string]any{"x": 1})
	if err != nil {
		t.Fatalf("service Create with a service rule: %v", err)
	}
	if _, err := svc.Update(ctx, d.Path, map[string]any{"y": 2}, d.Version); err != nil {
		t.Errorf("service Update: %v", err)
	}
	if _, err := svc.Create(ctx, "users/u1/chats/c1", map[string]any{"x": 2}); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("service Create twice: %v, want ErrAlreadyExists", err)
	}
	if docs, err := svc.Query(ctx, collections.Query{Collection: "users/u1/chats"}); err != nil || len(docs) != 1 {
		t.Errorf("service Query: %d docs, %v", len(docs), err)
	}
}

func TestContextCancel(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, adminKey, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "users/u1/chats/c1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := c.Create(ctx, "users/u1/chats/c1", map[string]any{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context: %v", err)
	}
	if _, err := c.Query(ctx, collections.Query{Collection: "users/u1/chats"}); !errors.Is(err, context.Canceled) || loomclient.Retryable(err) {
		t.Errorf("Query with a cancelled context: %v", err)
	}
	// Nothing was written.
	if _, err := c.Get(context.Background(), "users/u1/chats/c1"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("after a cancelled Create: %v", err)
	}

	// A deadline that expires while the server is slow.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	sc, err := loomclient.New(loomclient.Config{BaseURL: slow.URL, APIKey: adminKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := sc.Get(ctx, "users/u1/chats/c1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get past the deadline: %v, want DeadlineExceeded", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Error("the deadline did not abort the request")
	}
}

// TestRetryable: 429 and 5xx are retryable *HTTPErrors carrying the status.
func TestRetryable(t *testing.T) {
	status := atomic.Int64{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, `{"code":"X","message":"boom"}`)
	}))
	defer ts.Close()
	c, err := loomclient.New(loomclient.Config{BaseURL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []int{429, 500, 502, 503} {
		status.Store(int64(st))
		_, err := c.Get(context.Background(), "a/b")
		var he *loomclient.HTTPError
		if !errors.As(err, &he) || he.Status != st || !he.Retryable() || !loomclient.Retryable(err) || he.Message != "boom" || he.RetryAfter != 2*time.Second {
			t.Errorf("%d: %v (%#v)", st, err, he)
		}
	}
	status.Store(400)
	if _, err := c.Get(context.Background(), "a/b"); loomclient.Retryable(err) || err == nil {
		t.Errorf("400: %v", err)
	}
	// Transport errors (nothing listening) are retryable.
	ts.Close()
	if _, err := c.Get(context.Background(), "a/b"); !loomclient.Retryable(err) {
		t.Errorf("connection refused: %v, want retryable", err)
	}
}

// TestQueryFollowsEmptyPages: when security rules hide every document the
// server examined for a page, the page is empty but has a nextCursor; the
// client follows it to the documents further on instead of stopping.
func TestQueryFollowsEmptyPages(t *testing.T) {
	ctx := context.Background()
	sparse, err := rules.Parse([]byte(`[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read"]
if    = "request.auth != null && 'service' in request.auth.roles && resource.data.n % 100 == 99"
`), "sparse.toml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, sparse)
	seed(t, e, 300) // n = 0..299: the key may read n = 99, 199, 299
	svc := e.client(t, e.serviceKey(t, "hooks"), 5)

	before := e.queries.Load()
	docs, err := svc.Query(ctx, collections.Query{Collection: "users/u1/items", OrderBy: []collections.Order{{Field: "n"}}, Limit: 10})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	var got []int64
	for _, d := range docs {
		n, _ := d.Data["n"].(json.Number).Int64()
		got = append(got, n)
	}
	if fmt.Sprint(got) != "[99 199 299]" {
		t.Fatalf("got n=%v, want [99 199 299] (the readable documents past empty pages)", got)
	}
	if n := e.queries.Load() - before; n < 3 {
		t.Errorf("%d query requests: the server's pages should have been empty in between", n)
	}
}

// TestQueryEmptyPagesBounded: past maxEmptyPages empty pages in a row the
// client stops, and says so with ErrIncomplete instead of returning a short
// result that looks whole.
func TestQueryEmptyPagesBounded(t *testing.T) {
	ctx := context.Background()
	last, err := rules.Parse([]byte(`[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read"]
if    = "request.auth != null && 'service' in request.auth.roles && resource.data.n == 299"
`), "last.toml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, last)
	seed(t, e, 300) // only n = 299 is readable, ~300 hidden documents before it
	svc := e.client(t, e.serviceKey(t, "hooks"), 1)
	docs, err := svc.Query(ctx, collections.Query{Collection: "users/u1/items", OrderBy: []collections.Order{{Field: "n"}}, Limit: 10})
	if !errors.Is(err, loomclient.ErrIncomplete) {
		t.Fatalf("Query = %d docs, %v; want ErrIncomplete", len(docs), err)
	}
	if len(docs) != 0 {
		t.Fatalf("got %d docs before the hidden run, want 0", len(docs))
	}
}

// Against a server with [compat] syntrix (Syntrix's error code names with
// Loom's in details.code, bare-array query pages with X-Next-Cursor) the
// client works as against Loom's own formats: `loom agents` may talk to
// such a server.
func TestSyntrixCompatServer(t *testing.T) {
	e := newEnvWith(t, nil, true)
	seed(t, e, 300)
	ctx := context.Background()
	c := e.client(t, adminKey, 100)

	docs, err := c.Query(ctx, collections.Query{Collection: "users/u1/items", OrderBy: []collections.Order{{Field: "n"}}, Limit: 250})
	if err != nil || len(docs) != 250 {
		t.Fatalf("Query: %d docs, %v; want 250", len(docs), err)
	}
	for i, d := range docs {
		if n, _ := d.Data["n"].(json.Number).Int64(); n != int64(i) {
			t.Fatalf("docs[%d].n = %d: pages overlap or skip", i, n)
		}
	}
	if _, err := c.Create(ctx, "users/u1/items/i000", map[string]any{"n": 1}); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("Create over a live document: %v, want ErrAlreadyExists", err)
	} else if loomclient.Retryable(err) {
		t.Errorf("ALREADY_EXISTS (CONFLICT under the switch) must not be retryable")
	}
	if _, err := c.Get(ctx, "users/u1/items/missing"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
	if _, err := c.Query(ctx, collections.Query{Collection: "users/u1/items", Filters: []collections.Filter{{Field: "n", Op: "~", Value: 1}}}); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("bad op: %v, want ErrInvalidQuery", err)
	}
	bad := e.client(t, "wrong-key", 0)
	if _, err := bad.Get(ctx, "users/u1/items/i000"); !errors.Is(err, loomclient.ErrUnauthorized) {
		t.Errorf("wrong key: %v, want ErrUnauthorized", err)
	}
}

// Batch is POST /batch: atomic, each write meaning what Create, Update and
// Delete do, a failed write committing none, the sentinels as for one
// write.
func TestBatch(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, e.serviceKey(t, "hooks"), 0)
	ctx := context.Background()
	for _, p := range []string{"users/u1/chats/b", "users/u1/chats/c"} {
		if _, err := c.Create(ctx, p, map[string]any{"n": 1}); err != nil {
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
	for name, w := range map[string]struct {
		write collections.Write
		want  error
	}{
		"stale version": {update("users/u1/chats/b", map[string]any{"n": 2}, 7), collections.ErrPreconditionFailed},
		"existing":      {create("users/u1/chats/c", map[string]any{}), collections.ErrAlreadyExists},
		"missing":       {collections.Write{Type: collections.WriteDelete, Path: "users/u1/chats/none"}, collections.ErrNotFound},
		"forbidden":     {create("posts/p1", map[string]any{}), loomclient.ErrForbidden},
	} {
		_, err := c.Batch(ctx, []collections.Write{create("users/u1/chats/a", map[string]any{"n": 1}), w.write})
		if !errors.Is(err, w.want) {
			t.Errorf("%s: err=%v, want %v", name, err, w.want)
		}
		if _, err := c.Get(ctx, "users/u1/chats/a"); !errors.Is(err, collections.ErrNotFound) {
			t.Fatalf("%s: the batch's first write committed: %v", name, err)
		}
	}
	got, err := c.Batch(ctx, []collections.Write{
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
	if _, err := c.Get(ctx, "users/u1/chats/c"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("the batch's delete: %v", err)
	}
}
