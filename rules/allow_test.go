package rules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// mapGetter is an in-memory Getter: documents by path. err, when set, is
// returned by every read. It counts reads.
type mapGetter struct {
	mu    sync.Mutex
	docs  map[string]map[string]any
	err   error
	reads int
}

func (g *mapGetter) GetData(ctx context.Context, path string) (map[string]any, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	if g.err != nil {
		return nil, false, g.err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	d, ok := g.docs[path]
	return d, ok, nil
}

var (
	alice = &rules.Auth{UID: "alice", Username: "alice", Roles: []string{"user"}}
	bob   = &rules.Auth{UID: "bob", Username: "bob", Roles: []string{"user", "editor"}}
)

// MustDecode decodes a JSON object the way the server does (json.Number).
func MustDecode(t testing.TB, s string) map[string]any {
	t.Helper()
	m, err := collections.DecodeObject([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

// check runs Allow and compares it with want; Allow must not fail.
func check(t *testing.T, s *rules.Set, req rules.Request, g rules.Getter, want bool) {
	t.Helper()
	got, err := s.Allow(context.Background(), req, g)
	if err != nil {
		t.Fatalf("Allow(%s %s): %v", req.Op, req.Path, err)
	}
	if got != want {
		t.Fatalf("Allow(%s %s)=%v, want %v", req.Op, req.Path, got, want)
	}
}

func TestSet_Allow_Default(t *testing.T) {
	s := rules.Default()
	svc := &rules.Auth{UID: "key:agents", Roles: []string{"service"}}
	ops := []rules.Op{rules.OpGet, rules.OpList, rules.OpCreate, rules.OpUpdate, rules.OpDelete}
	tests := []struct {
		name string
		auth *rules.Auth
		path string
		want bool
	}{
		{"owner", alice, "users/alice/notes/n1", true},
		{"owner deep", alice, "users/alice/notes/n1/comments/c1", true},
		{"other user", bob, "users/alice/notes/n1", false},
		{"anonymous", nil, "users/alice/notes/n1", false},
		{"empty uid", &rules.Auth{}, "users/alice/notes/n1", false},
		{"user doc itself", alice, "users/alice", false},
		{"outside users", alice, "posts/alice", false},
		{"outside users deep", alice, "teams/alice/notes/n1", false},
		{"anonymous outside", nil, "public/p1", false},
		{"system", alice, "_users/alice", false},
		{"service key", svc, "users/alice/orch-chats/c1/messages/m1", true},
		{"service key, user doc itself", svc, "users/alice", false},
		{"service key outside users", svc, "posts/p1", false},
		{"other role", &rules.Auth{UID: "key:x", Roles: []string{"reader"}}, "users/alice/notes/n1", false},
	}
	for _, tt := range tests {
		for _, op := range ops {
			t.Run(tt.name+"/"+string(op), func(t *testing.T) {
				req := rules.Request{Auth: tt.auth, Op: op, Path: tt.path}
				if op == rules.OpCreate || op == rules.OpUpdate {
					req.Resource = map[string]any{"x": json.Number("1")}
				}
				if op != rules.OpCreate {
					req.Existing = map[string]any{"x": json.Number("0")}
				}
				check(t, s, req, nil, tt.want)
			})
		}
	}
}

// TestSet_Allow_DefaultRuntimeOwned: below users/{uid}/orch-chats/ the
// owner reads everything but writes only the chat document and new 'user'
// messages; users/{uid}/agent-usage/ is read-only to them.
func TestSet_Allow_DefaultRuntimeOwned(t *testing.T) {
	s := rules.Default()
	svc := &rules.Auth{UID: "key:agents", Roles: []string{"service"}}
	chat := "users/alice/orch-chats/c1"
	msg := chat + "/messages/m1"
	tests := []struct {
		name     string
		auth     *rules.Auth
		op       rules.Op
		path     string
		resource string // the document after the write ("" for reads and deletes)
		want     bool
	}{
		{"user message", alice, rules.OpCreate, msg, `{"role":"user","content":"hi","userId":"alice","chatId":"c1"}`, true},
		{"user message, bare", alice, rules.OpCreate, msg, `{"role":"user","content":"hi"}`, true},
		{"other user's chat", bob, rules.OpCreate, msg, `{"role":"user","content":"hi"}`, false},
		{"assistant message", alice, rules.OpCreate, msg, `{"role":"assistant","content":"hi"}`, false},
		{"no role", alice, rules.OpCreate, msg, `{"content":"hi"}`, false},
		{"content not a string", alice, rules.OpCreate, msg, `{"role":"user","content":{"x":1}}`, false},
		{"extra field", alice, rules.OpCreate, msg, `{"role":"user","content":"hi","status":"done"}`, false},
		{"wrong userId", alice, rules.OpCreate, msg, `{"role":"user","content":"hi","userId":"bob"}`, false},
		{"wrong chatId", alice, rules.OpCreate, msg, `{"role":"user","content":"hi","chatId":"c2"}`, false},
		{"edit message", alice, rules.OpUpdate, msg, `{"role":"user","content":"edited"}`, false},
		{"delete message", alice, rules.OpDelete, msg, "", false},
		{"read message", alice, rules.OpGet, msg, "", true},
		{"chat title", alice, rules.OpCreate, chat, `{"title":"t","userId":"alice"}`, true},
		{"chat rename", alice, rules.OpUpdate, chat, `{"title":"t2","role":"user","content":"hi"}`, true},
		{"chat other field", alice, rules.OpUpdate, chat, `{"title":"t","status":"x"}`, false},
		{"chat of bob", bob, rules.OpCreate, chat, `{"title":"t"}`, false},
		{"task", alice, rules.OpCreate, chat + "/tasks/t1", `{"type":"agent"}`, false},
		{"task status", alice, rules.OpUpdate, chat + "/tasks/t1", `{"status":"pending"}`, false},
		{"read task", alice, rules.OpGet, chat + "/tasks/t1", "", true},
		{"sub-agent", alice, rules.OpUpdate, chat + "/sub-agents/s1", `{"iterationCount":-1}`, false},
		{"sub-agent message", alice, rules.OpCreate, chat + "/sub-agents/s1/messages/m1", `{"role":"user","content":"x"}`, false},
		{"tool call", alice, rules.OpCreate, chat + "/sub-agents/s1/tool-calls/c1", `{"status":"pending"}`, false},
		{"read tool call", alice, rules.OpList, chat + "/sub-agents/s1/tool-calls/c1", "", true},
		{"usage", alice, rules.OpUpdate, "users/alice/agent-usage/2026-01-01", `{"tokens":0}`, false},
		{"read usage", alice, rules.OpGet, "users/alice/agent-usage/2026-01-01", "", true},
		{"a collection named like it", alice, rules.OpCreate, "users/alice/orch-chats-old/c1", `{"x":1}`, true},
		{"service writes a task", svc, rules.OpCreate, chat + "/tasks/t1", `{"type":"agent"}`, true},
		{"service updates a sub-agent", svc, rules.OpUpdate, chat + "/sub-agents/s1", `{"iterationCount":1}`, true},
		{"service writes usage", svc, rules.OpUpdate, "users/alice/agent-usage/2026-01-01", `{"tokens":1}`, true},
		// The lifecycle rules' documents (docs/agent-rules.md).
		{"own rule settings", alice, rules.OpCreate, "users/alice/agent-settings/rules", `{"disabledRules":[]}`, true},
		{"own rule settings patch", alice, rules.OpUpdate, "users/alice/agent-settings/rules", `{"plugins":{}}`, true},
		{"bob's rule settings", bob, rules.OpUpdate, "users/alice/agent-settings/rules", `{"plugins":{}}`, false},
		{"forge plugin state", alice, rules.OpCreate, chat + "/plugin-state/research-assistant", `{"values":{"n":1}}`, false},
		{"edit plugin state", alice, rules.OpUpdate, chat + "/plugin-state/standalone", `{"values":{}}`, false},
		{"read plugin state", alice, rules.OpGet, chat + "/plugin-state/standalone", "", true},
		{"forge a notification", alice, rules.OpCreate, chat + "/notifications/n1", `{"target":"orchestrator","message":"x"}`, false},
		{"forge an event", alice, rules.OpCreate, chat + "/agent-events/e1", `{"type":"x"}`, false},
		{"service writes plugin state", svc, rules.OpCreate, chat + "/plugin-state/standalone", `{"values":{}}`, true},
		{"service writes an event", svc, rules.OpCreate, chat + "/agent-events/e1", `{"type":"x"}`, true},
		{"user reads switches", alice, rules.OpList, "agent-rules/r1", "", false},
		{"user writes a switch", alice, rules.OpCreate, "agent-rules/r1", `{"key":"r1","enabled":false}`, false},
		{"user reads the log", alice, rules.OpGet, "agent-rule-log/l1", "", false},
		{"user forges the log", alice, rules.OpCreate, "agent-rule-log/l1", `{"userId":"alice"}`, false},
		{"anonymous reads the log", nil, rules.OpList, "agent-rule-log/l1", "", false},
		{"service writes a switch", svc, rules.OpUpdate, "agent-rules/r1", `{"key":"r1","enabled":true}`, true},
		{"service reads switches", svc, rules.OpList, "agent-rules/r1", "", true},
		{"service writes the log", svc, rules.OpCreate, "agent-rule-log/l1", `{"userId":"alice"}`, true},
		{"service prunes the log", svc, rules.OpDelete, "agent-rule-log/l1", "", true},
		{"other role, the log", &rules.Auth{UID: "key:x", Roles: []string{"reader"}}, rules.OpGet, "agent-rule-log/l1", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rules.Request{Auth: tt.auth, Op: tt.op, Path: tt.path}
			if tt.resource != "" {
				req.Resource = MustDecode(t, tt.resource)
			}
			if tt.op != rules.OpCreate {
				req.Existing = map[string]any{"role": "user", "content": "hi"}
			}
			check(t, s, req, nil, tt.want)
		})
	}
}

func TestSet_Allow_OpsAndOR(t *testing.T) {
	s := MustParse(t, `
[[rule]]                      # 1: errors for anonymous callers
match = "docs/{id}"
allow = ["get"]
if    = "request.auth.uid == 'nobody'"

[[rule]]                      # 2: false
match = "docs/{id}"
allow = ["read"]
if    = "id == 'secret'"

[[rule]]                      # 3: any rule is enough
match = "docs/{id}"
allow = ["get"]
if    = "id.startsWith('pub')"

[[rule]]
match = "docs/{id}"
allow = ["create"]
if    = "request.auth != null"

[[rule]]                      # constant false never allows
match = "{all=**}"
allow = ["read", "write"]
if    = "false"

[[rule]]                      # a non-bool result does not allow
match = "docs/{id}"
allow = ["delete"]
if    = "request.auth.uid"
`)
	tests := []struct {
		auth *rules.Auth
		op   rules.Op
		path string
		want bool
	}{
		{nil, rules.OpGet, "docs/pub1", true},   // rule 1 errors, rule 3 allows
		{nil, rules.OpGet, "docs/secret", true}, // rule 2 allows
		{nil, rules.OpList, "docs/secret", true},
		{nil, rules.OpList, "docs/pub1", false}, // rule 3 grants only get
		{nil, rules.OpGet, "docs/other", false},
		{nil, rules.OpCreate, "docs/x", false},
		{alice, rules.OpCreate, "docs/x", true},
		{alice, rules.OpUpdate, "docs/x", false}, // no rule grants update
		{alice, rules.OpDelete, "docs/x", false},
		{alice, rules.OpGet, "docs/x/sub/y", false}, // docs/{id} does not match deeper paths
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%s/%s", tt.auth != nil, tt.op, tt.path), func(t *testing.T) {
			check(t, s, rules.Request{Auth: tt.auth, Op: tt.op, Path: tt.path}, nil, tt.want)
		})
	}
}

func TestSet_Allow_ResourceData(t *testing.T) {
	s := MustParse(t, `
[[rule]]
match = "posts/{postId}"
allow = ["create"]
if    = "request.auth != null && resource == null && request.resource.data.owner == request.auth.uid"

[[rule]]
match = "posts/{postId}"
allow = ["update"]
if    = "request.auth != null && resource.data.owner == request.auth.uid && request.resource.data.owner == resource.data.owner"

[[rule]]
match = "posts/{postId}"
allow = ["delete"]
if    = "request.auth != null && resource.data.owner == request.auth.uid && request.resource == null"

[[rule]]
match = "posts/{postId}"
allow = ["read"]
if    = "resource.data.published == true || (request.auth != null && resource.data.owner == request.auth.uid)"
`)
	own := map[string]any{"owner": "alice", "title": "t", "published": false}
	pub := map[string]any{"owner": "alice", "published": true}
	tests := []struct {
		name     string
		auth     *rules.Auth
		op       rules.Op
		existing map[string]any
		resource map[string]any
		want     bool
	}{
		{"create own", alice, rules.OpCreate, nil, map[string]any{"owner": "alice"}, true},
		{"create for other", alice, rules.OpCreate, nil, map[string]any{"owner": "bob"}, false},
		{"create over existing", alice, rules.OpCreate, own, map[string]any{"owner": "alice"}, false},
		{"create anonymous", nil, rules.OpCreate, nil, map[string]any{"owner": "alice"}, false},
		{"update own", alice, rules.OpUpdate, own, map[string]any{"owner": "alice", "title": "new"}, true},
		{"update changes owner", alice, rules.OpUpdate, own, map[string]any{"owner": "bob"}, false},
		{"update drops owner", alice, rules.OpUpdate, own, map[string]any{"title": "x"}, false},
		{"update others", bob, rules.OpUpdate, own, map[string]any{"owner": "alice"}, false},
		{"update missing doc", alice, rules.OpUpdate, nil, map[string]any{"owner": "alice"}, false},
		{"delete own", alice, rules.OpDelete, own, nil, true},
		{"delete others", bob, rules.OpDelete, own, nil, false},
		{"delete missing", alice, rules.OpDelete, nil, nil, false},
		{"read published anonymous", nil, rules.OpGet, pub, nil, true},
		{"read draft anonymous", nil, rules.OpGet, own, nil, false},
		{"read draft owner", alice, rules.OpList, own, nil, true},
		{"read draft other", bob, rules.OpGet, own, nil, false},
		{"read missing", alice, rules.OpGet, nil, nil, false},
		{"read empty doc", alice, rules.OpGet, map[string]any{}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, s, rules.Request{Auth: tt.auth, Op: tt.op, Path: "posts/p1", Existing: tt.existing, Resource: tt.resource}, nil, tt.want)
		})
	}
}

func TestSet_Allow_Numbers(t *testing.T) {
	s := MustParse(t, `
[[rule]]
match = "counters/{id}"
allow = ["update"]
if    = "request.resource.data.count == resource.data.count + 1 && request.resource.data.count <= 10"

[[rule]]
match = "counters/{id}"
allow = ["get"]
if    = "resource.data.count < 10 && resource.data.stats.views > 100 && resource.data.tags[1] == 2 && resource.data.ratio > 0.5"

[[rule]]
match = "prices/{id}"
allow = ["get"]
if    = "resource.data.price == 2.5 && resource.data.big > 1000000 && resource.data.whole == 3 && type(resource.data.whole) == int"
`)
	tests := []struct {
		name, op, path, existing, resource string
		want                               bool
	}{
		{"increment", "update", "counters/c", `{"count": 3}`, `{"count": 4}`, true},
		{"increment by two", "update", "counters/c", `{"count": 3}`, `{"count": 5}`, false},
		{"over limit", "update", "counters/c", `{"count": 10}`, `{"count": 11}`, false},
		{"float count", "update", "counters/c", `{"count": 3.5}`, `{"count": 4.5}`, false}, // double + int has no overload
		{"nested", "get", "counters/c", `{"count": 3, "stats": {"views": 101}, "tags": [1, 2], "ratio": 0.75}`, ``, true},
		{"nested views low", "get", "counters/c", `{"count": 3, "stats": {"views": 100}, "tags": [1, 2], "ratio": 0.75}`, ``, false},
		{"count high", "get", "counters/c", `{"count": 12, "stats": {"views": 101}, "tags": [1, 2], "ratio": 0.75}`, ``, false},
		{"count is a string", "get", "counters/c", `{"count": "3", "stats": {"views": 101}, "tags": [1, 2], "ratio": 0.75}`, ``, false},
		{"doubles and big ints", "get", "prices/p", `{"price": 2.5, "big": 123456789012345678901234567890, "whole": 3.0}`, ``, true},
		{"integral exponent", "get", "prices/p", `{"price": 2.5, "big": 1e30, "whole": 3e0}`, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rules.Request{Auth: alice, Op: rules.Op(tt.op), Path: tt.path, Existing: MustDecode(t, tt.existing)}
			if tt.resource != "" {
				req.Resource = MustDecode(t, tt.resource)
			}
			check(t, s, req, nil, tt.want)
		})
	}
}

func TestSet_Allow_AuthAndRequest(t *testing.T) {
	s := MustParse(t, `
[[rule]]
match = "articles/{id}"
allow = ["update"]
if    = "request.auth != null && 'editor' in request.auth.roles"

[[rule]]
match = "articles/{id}"
allow = ["get"]
if    = "request.auth.claims.tier == 'gold' && request.auth.claims.level >= 3 && request.auth.username == 'alice'"

[[rule]]
match = "events/{id}"
allow = ["read"]
if    = "request.time < timestamp('2030-01-01T00:00:00Z') && request.path == 'events/' + id && request.op in ['get', 'list']"

[[rule]]
match = "logs/{rest=**}"
allow = ["get"]
if    = "rest == 'a/b/c' && size(request.auth.roles) == 0 && size(request.auth.claims) == 0"

[[rule]]                # request and request.auth behave as ordinary maps
match = "maps/{id}"
allow = ["get"]
if    = """
  request.auth == {'uid': 'alice', 'username': 'alice', 'roles': ['user'], 'claims': {}} &&
  {'uid': 'alice', 'username': 'alice', 'roles': ['user'], 'claims': {}} == request.auth &&
  request.auth != {'uid': 'alice'} &&
  size(request) == 5 && size(request.auth) == 4 &&
  'uid' in request.auth && !('nope' in request.auth) && has(request.auth.uid) && !has(request.auth.nope) &&
  request.auth.all(k, k in ['uid', 'username', 'roles', 'claims']) &&
  request.exists(k, k == 'resource') &&
  type(request) == map && type(request.auth) == map && type(request.time) == google.protobuf.Timestamp &&
  request.auth.roles == ['user'] && request.resource == null &&
  request.auth['uid'] == 'alice' && request['op'] == 'get'
"""
`)
	gold := &rules.Auth{UID: "alice", Username: "alice", Claims: map[string]any{"tier": "gold", "level": json.Number("3")}}
	goldFloat := &rules.Auth{UID: "alice", Username: "alice", Claims: map[string]any{"tier": "gold", "level": 3.0}}
	low := &rules.Auth{UID: "alice", Username: "alice", Claims: map[string]any{"tier": "gold", "level": json.Number("2")}}
	bare := &rules.Auth{UID: "carol"}
	past := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	future := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		req  rules.Request
		want bool
	}{
		{"editor role", rules.Request{Auth: bob, Op: rules.OpUpdate, Path: "articles/a1"}, true},
		{"no editor role", rules.Request{Auth: alice, Op: rules.OpUpdate, Path: "articles/a1"}, false},
		{"nil roles", rules.Request{Auth: bare, Op: rules.OpUpdate, Path: "articles/a1"}, false},
		{"anonymous", rules.Request{Op: rules.OpUpdate, Path: "articles/a1"}, false},
		{"claims", rules.Request{Auth: gold, Op: rules.OpGet, Path: "articles/a1"}, true},
		{"claims float64", rules.Request{Auth: goldFloat, Op: rules.OpGet, Path: "articles/a1"}, true},
		{"claims low", rules.Request{Auth: low, Op: rules.OpGet, Path: "articles/a1"}, false},
		{"no claims", rules.Request{Auth: alice, Op: rules.OpGet, Path: "articles/a1"}, false},
		{"time before", rules.Request{Op: rules.OpGet, Path: "events/e1", Time: past}, true},
		{"time after", rules.Request{Op: rules.OpList, Path: "events/e1", Time: future}, false},
		{"time now", rules.Request{Op: rules.OpList, Path: "events/e1"}, time.Now().Before(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))},
		{"rest capture", rules.Request{Auth: bare, Op: rules.OpGet, Path: "logs/a/b/c"}, true},
		{"record maps", rules.Request{Auth: alice, Op: rules.OpGet, Path: "maps/m"}, true},
		{"record maps other user", rules.Request{Auth: bob, Op: rules.OpGet, Path: "maps/m"}, false},
		{"rest capture other", rules.Request{Auth: bare, Op: rules.OpGet, Path: "logs/a/b/d/e/f"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, s, tt.req, nil, tt.want)
		})
	}
}

func TestSet_Allow_GetExists(t *testing.T) {
	s := MustParse(t, `
[[rule]]
match = "teams/{team}/docs/{doc}"
allow = ["read"]
if    = "request.auth != null && exists('teams/' + team + '/members/' + request.auth.uid)"

[[rule]]
match = "teams/{team}/docs/{doc}"
allow = ["update"]
if    = "request.auth != null && get('teams/' + team + '/members/' + request.auth.uid).data.role == 'admin'"

[[rule]]
match = "teams/{team}/docs/{doc}"
allow = ["delete"]
if    = "get('teams/' + team + '/members/nobody') == null"

[[rule]]
match = "bad/{x}"
allow = ["get"]
if    = "exists('not a path')"

[[rule]]
match = "bad/{x}"
allow = ["list"]
if    = "exists('teams')"

[[rule]]
match = "bad/{x}"
allow = ["create"]
if    = "true"
`)
	g := &mapGetter{docs: map[string]map[string]any{
		"teams/t1/members/alice": {"role": "admin"},
		"teams/t1/members/bob":   {"role": "reader"},
		"teams/t1":               nil, // exists, no data
	}}
	tests := []struct {
		name string
		auth *rules.Auth
		op   rules.Op
		path string
		want bool
	}{
		{"member reads", alice, rules.OpGet, "teams/t1/docs/d1", true},
		{"member lists", bob, rules.OpList, "teams/t1/docs/d1", true},
		{"non-member", alice, rules.OpGet, "teams/t2/docs/d1", false},
		{"anonymous", nil, rules.OpGet, "teams/t1/docs/d1", false},
		{"admin updates", alice, rules.OpUpdate, "teams/t1/docs/d1", true},
		{"reader cannot update", bob, rules.OpUpdate, "teams/t1/docs/d1", false},
		{"get of missing is null", nil, rules.OpDelete, "teams/t1/docs/d1", true},
		{"invalid path denies", alice, rules.OpGet, "bad/x", false},
		{"collection path denies", alice, rules.OpList, "bad/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, s, rules.Request{Auth: tt.auth, Op: tt.op, Path: tt.path}, g, tt.want)
		})
	}

	t.Run("GetterError", func(t *testing.T) {
		boom := errors.New("disk on fire")
		ok, err := s.Allow(context.Background(), rules.Request{Auth: alice, Op: rules.OpGet, Path: "teams/t1/docs/d1"}, &mapGetter{err: boom})
		if ok || !errors.Is(err, boom) {
			t.Fatalf("Allow=%v, %v; want false, %v", ok, err, boom)
		}
	})
	t.Run("NilGetter", func(t *testing.T) {
		ok, err := s.Allow(context.Background(), rules.Request{Auth: alice, Op: rules.OpGet, Path: "teams/t1/docs/d1"}, nil)
		if ok || err == nil {
			t.Fatalf("Allow=%v, %v; want false and an error", ok, err)
		}
		// Rules that read nothing work without a Getter.
		check(t, s, rules.Request{Op: rules.OpCreate, Path: "bad/x"}, nil, true)
	})
}

func TestSet_Allow_ReadBudget(t *testing.T) {
	exists := func(n int) string {
		calls := make([]string, n)
		for i := range calls {
			calls[i] = fmt.Sprintf("exists('m/%d')", i)
		}
		return strings.Join(calls, " && ")
	}
	g := &mapGetter{docs: map[string]map[string]any{}}
	for i := range 20 {
		g.docs[fmt.Sprintf("m/%d", i)] = map[string]any{}
	}
	src := fmt.Sprintf(`
[[rule]]
match = "ten/{x}"
allow = ["get"]
if    = %q

[[rule]]
match = "eleven/{x}"
allow = ["get"]
if    = %q

[[rule]]                 # uses the whole budget, then denies
match = "shared/{x}"
allow = ["get"]
if    = "%s && x == 'never'"

[[rule]]                 # would allow, but the budget is spent
match = "shared/{x}"
allow = ["get"]
if    = "exists('m/0')"

[[rule]]                 # the same path twice counts twice
match = "repeat/{x}"
allow = ["get"]
if    = "[1,2,3,4,5,6,7,8,9,10,11].all(i, exists('m/1'))"

[[rule]]                 # a rule that reads nothing is unaffected
match = "shared/{x}"
allow = ["get"]
if    = "x == 'free'"
`, exists(rules.MaxDocumentReads), exists(rules.MaxDocumentReads+1), exists(rules.MaxDocumentReads))
	s := MustParse(t, src)
	tests := []struct {
		path  string
		want  bool
		reads int
	}{
		{"ten/a", true, 10},
		{"eleven/a", false, 10},
		{"shared/a", false, 10},
		{"shared/free", true, 10},
		{"repeat/a", false, 10},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			g.reads = 0
			check(t, s, rules.Request{Op: rules.OpGet, Path: tt.path}, g, tt.want)
			if g.reads != tt.reads {
				t.Fatalf("reads=%d, want %d", g.reads, tt.reads)
			}
		})
	}
}

func TestSet_Allow_BadRequest(t *testing.T) {
	s := rules.Default()
	ok, err := s.Allow(context.Background(), rules.Request{Auth: alice, Op: "read", Path: "users/alice/n/1"}, nil)
	if ok || err == nil {
		t.Fatalf("Allow(op read)=%v, %v; want false and an error", ok, err)
	}
	for _, p := range []string{"", "users/alice/notes", "users//x/y", "users/alice/../x", "/users/alice/n/1"} {
		ok, err := s.Allow(context.Background(), rules.Request{Auth: alice, Op: rules.OpGet, Path: p}, nil)
		if ok || !errors.Is(err, collections.ErrInvalidPath) {
			t.Fatalf("Allow(path %q)=%v, %v; want false, ErrInvalidPath", p, ok, err)
		}
	}
}

func TestSet_Allow_Limits(t *testing.T) {
	s := MustParse(t, `
[[rule]]
match = "heavy/{x}"
allow = ["get"]
if    = "resource.data.items.all(a, resource.data.items.all(b, resource.data.items.all(c, a + b + c >= 0)))"

[[rule]]
match = "heavy/{x}"
allow = ["get"]
if    = "x == 'ok'"
`)
	items := make([]any, 200)
	for i := range items {
		items[i] = json.Number(fmt.Sprint(i))
	}
	req := rules.Request{Op: rules.OpGet, Path: "heavy/h", Existing: map[string]any{"items": items}}

	t.Run("CostLimit", func(t *testing.T) {
		start := time.Now()
		check(t, s, req, nil, false) // 8e6 iterations: stopped by the cost limit
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("evaluation took %v", d)
		}
		req := req
		req.Path = "heavy/ok"
		check(t, s, req, nil, true) // the next rule still allows
	})
	t.Run("WithinLimit", func(t *testing.T) {
		s := MustParse(t, "[[rule]]\nmatch = \"teams/{t}\"\nallow = [\"get\"]\nif = \"resource.data.members.exists(m, m.uid == request.auth.uid)\"\n")
		members := make([]any, 500)
		for i := range members {
			members[i] = map[string]any{"uid": fmt.Sprint("u", i)}
		}
		req := rules.Request{Auth: &rules.Auth{UID: "u499"}, Op: rules.OpGet, Path: "teams/t", Existing: map[string]any{"members": members}}
		check(t, s, req, nil, true)
	})
	t.Run("Canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ok, err := s.Allow(ctx, req, nil)
		if ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("Allow=%v, %v; want false, context.Canceled", ok, err)
		}
	})
	t.Run("CanceledGetter", func(t *testing.T) {
		s := MustParse(t, "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"get\"]\nif = \"exists('a/x') || true\"\n")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ok, err := s.Allow(ctx, rules.Request{Op: rules.OpGet, Path: "a/b"}, &mapGetter{})
		if ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("Allow=%v, %v; want false, context.Canceled (a failed read is not overridden by || true)", ok, err)
		}
	})
}

// TestSet_Allow_Concurrent shares one Set (and one Getter) between
// goroutines; run with -race.
func TestSet_Allow_Concurrent(t *testing.T) {
	s := MustParse(t, rules.DefaultSource()+`
[[rule]]
match = "teams/{team}/docs/{doc}"
allow = ["read"]
if    = "request.auth != null && exists('teams/' + team + '/members/' + request.auth.uid) && resource.data.n < 100"
`)
	g := &mapGetter{docs: map[string]map[string]any{"teams/t/members/u3": {}}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := range 200 {
				uid := fmt.Sprintf("u%d", (w+i)%5)
				auth := &rules.Auth{UID: uid}
				owner := fmt.Sprintf("u%d", i%5)
				path := "users/" + owner + "/notes/n"
				want := uid == owner
				if i%2 == 1 {
					path, want = "teams/t/docs/d", uid == "u3"
				}
				got, err := s.Allow(context.Background(), rules.Request{
					Auth: auth, Op: rules.OpGet, Path: path,
					Existing: map[string]any{"n": json.Number(fmt.Sprint(i % 50))},
				}, g)
				if err != nil || got != want {
					errs <- fmt.Errorf("worker %d: Allow(%s, %s)=%v, %v; want %v", w, uid, path, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
