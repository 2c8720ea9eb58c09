package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// Every response must carry only what the caller may read. These tests run
// a real server under rules where anyone signed in may create and update a
// post but may read it only when it is public or their own: a write
// permission must never turn into a read of the stored document.
var leakRules = rules.DefaultSource() + `
[[rule]]
match = "posts/{id}"
allow = ["create", "update"]
if    = "request.auth != null"

[[rule]]
match = "posts/{id}"
allow = ["read"]
if    = "request.auth != null && (('public' in resource.data && resource.data.public == true) || ('owner' in resource.data && resource.data.owner == request.auth.uid))"

[[rule]]
match = "vault/{id}"
allow = ["create", "update"]
if    = "request.auth != null"
`

// secret is the private content the tests look for in every response.
const secret = "s3cret-draft"

func newLeakEnv(t *testing.T) (env *testEnv, alice, bob user) {
	t.Helper()
	set, err := rules.Parse([]byte(leakRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	// No SSE heartbeat: a comment would restart the SSE reader's hang
	// guard, and a missing event must fail the test, not stall it.
	env = newAuthEnv(t, server.Config{RateLimit: -1, Rules: set, Realtime: server.RealtimeConfig{SSEHeartbeat: time.Hour}})
	return env, env.signup(t, "alice"), env.signup(t, "bob")
}

// putPost stores posts/{id} as alice's, private or public, with the secret.
func putPost(t *testing.T, env *testEnv, alice user, id string, public bool) {
	t.Helper()
	body := fmt.Sprintf(`{"doc":{"owner":%q,"public":%t,"draft":%q}}`, alice.UID, public, secret)
	wantStatus(t, "alice writes "+id, env.Do(t, "PUT", api+"/documents/posts/"+id, body, alice.h()), http.StatusCreated)
}

func with(h map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range h {
		out[hk] = hv
	}
	return out
}

// wantHidden fails when a response shows the secret or a details.current.
func wantHidden(t *testing.T, what string, r *response, status int) {
	t.Helper()
	wantStatus(t, what, r, status)
	if strings.Contains(string(r.Body), secret) {
		t.Errorf("%s: the response shows the private content: %s", what, r.Body)
	}
	if d, _ := r.JSON(t)["details"].(map[string]any); d != nil {
		if _, ok := d["current"]; ok {
			t.Errorf("%s: details.current is present for a document the caller may not read: %s", what, r.Body)
		}
	}
}

// TestReadLeak_PreconditionDetails: a 412 shows details.current only to a
// caller who may get the document — through If-Match, ifMatch filters,
// every write route and batches.
func TestReadLeak_PreconditionDetails(t *testing.T) {
	env, alice, bob := newLeakEnv(t)
	putPost(t, env, alice, "p1", false)
	putPost(t, env, alice, "pub", true)
	p1 := api + "/documents/posts/p1"
	head := env.Head(t)

	wantHidden(t, "bob PATCH If-Match 999", env.Do(t, "PATCH", p1, `{"doc":{"x":1}}`, with(bob.h(), "If-Match", `"999"`)), http.StatusPreconditionFailed)
	wantHidden(t, "bob PUT If-Match 999", env.Do(t, "PUT", p1, `{"doc":{"x":1}}`, with(bob.h(), "If-Match", `"999"`)), http.StatusPreconditionFailed)
	// A missing document fails the same way: no "current": null that would
	// tell it apart from one bob may not read.
	existing := env.Do(t, "PUT", p1, `{"doc":{"x":1}}`, with(bob.h(), "If-Match", `"999"`))
	missing := env.Do(t, "PUT", api+"/documents/posts/p0", `{"doc":{"x":1}}`, with(bob.h(), "If-Match", `"999"`))
	wantHidden(t, "bob PUT If-Match on a missing post", missing, http.StatusPreconditionFailed)
	if a, b := string(existing.Body), strings.ReplaceAll(string(missing.Body), "posts/p0", "posts/p1"); a != b {
		t.Errorf("existing post answered %s, missing post %s", a, b)
	}
	// An ifMatch on a field bob may not read is an oracle (write or 412):
	// refused, whether the guess is right or wrong, and on a missing post.
	for _, c := range []struct{ what, path, op, guess string }{
		{"wrong guess", "p1", "==", "guess"},
		{"right guess", "p1", "==", secret},
		{"right prefix", "p1", "prefix", secret[:3]},
		{"missing post", "p0", "==", "guess"},
	} {
		body := fmt.Sprintf(`{"doc":{"x":1},"ifMatch":[{"field":"draft","op":%q,"value":%q}]}`, c.op, c.guess)
		r := env.Do(t, "PATCH", api+"/documents/posts/"+c.path, body, bob.h())
		wantHidden(t, "ifMatch on a private field, "+c.what, r, http.StatusForbidden)
		if want := "Security rules do not allow you to read posts/" + c.path + " (its ifMatch conditions read its fields)."; r.JSON(t)["message"] != want {
			t.Errorf("%s: message %s, want %q", c.what, r.Body, want)
		}
	}
	batch := `{"writes":[
		{"type":"update","path":"posts/pub","data":{"n":1}},
		{"type":"update","path":"posts/p1","data":{"x":1},"ifMatch":[{"field":"version","op":"==","value":999}]}]}`
	r := env.Do(t, "POST", api+"/batch", batch, bob.h())
	wantHidden(t, "bob batch with a failing ifMatch", r, http.StatusPreconditionFailed)
	if d, _ := r.JSON(t)["details"].(map[string]any); d["index"] != json.Number("1") {
		t.Errorf("batch failure details=%v, want index 1", d)
	}
	if r.JSON(t)["code"] != "PRECONDITION_FAILED" {
		t.Errorf("code %s, want PRECONDITION_FAILED", r.Body)
	}
	if got := env.Head(t); got != head {
		t.Errorf("failed preconditions wrote: head %d → %d", head, got)
	}

	// Who may read the document still gets it, and may condition on it.
	owned := fmt.Sprintf(`{"doc":{"x":1},"ifMatch":[{"field":"draft","op":"==","value":%q}]}`, secret)
	wantStatus(t, "alice's ifMatch on her draft", env.Do(t, "PATCH", p1, owned, alice.h()), http.StatusOK)

	for _, c := range []struct {
		who  string
		path string
		h    map[string]string
	}{{"alice on her private post", p1, alice.h()}, {"bob on a public post", api + "/documents/posts/pub", bob.h()}} {
		r := env.Do(t, "PATCH", c.path, `{"doc":{"x":1}}`, with(c.h, "If-Match", `"999"`))
		wantStatus(t, c.who, r, http.StatusPreconditionFailed)
		d, _ := r.JSON(t)["details"].(map[string]any)
		cur, _ := d["current"].(map[string]any)
		if cur == nil || cur["draft"] != secret || cur["version"] == nil {
			t.Errorf("%s: details=%v, want the current document", c.who, d)
		}
	}
}

// TestReadLeak_WriteResults: the document a write returns is the merged,
// stored document; a caller allowed to write but not to read gets only its
// envelope.
func TestReadLeak_WriteResults(t *testing.T) {
	env, alice, bob := newLeakEnv(t)
	putPost(t, env, alice, "p1", false)
	p1 := api + "/documents/posts/p1"

	r := env.Do(t, "PATCH", p1, `{"doc":{"note":"from bob"}}`, bob.h())
	wantHidden(t, "bob's PATCH", r, http.StatusOK)
	if m := r.JSON(t); m["id"] != "p1" || m["version"] != json.Number("2") || m["note"] != nil || r.Header.Get("ETag") != `"2"` {
		t.Errorf("bob's PATCH answered %s (ETag %s), want the envelope of version 2 only", r.Body, r.Header.Get("ETag"))
	}
	r = env.Do(t, "POST", api+"/batch", `{"writes":[{"type":"update","path":"posts/p1","data":{"n":1}}]}`, bob.h())
	wantHidden(t, "bob's batch update", r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"version":3`) {
		t.Errorf("batch result %s, want the envelope of version 3", r.Body)
	}

	// The owner's writes return the whole document.
	r = env.Do(t, "PATCH", p1, `{"doc":{"n":2}}`, alice.h())
	wantStatus(t, "alice's PATCH", r, http.StatusOK)
	if m := r.JSON(t); m["draft"] != secret || m["note"] != "from bob" {
		t.Fatalf("alice's PATCH answered %s, want the whole document", r.Body)
	}
}

// TestReadLeak_RealtimeBefore: a post switching private → public enters
// bob's view (a create) with no old state; public → private leaves it (a
// delete) with nothing of the new state, exactly like a document leaving
// his filters. The owner still sees updates with their old state.
// WebSocket and SSE.
func TestReadLeak_RealtimeBefore(t *testing.T) {
	env, alice, bob := newLeakEnv(t)
	putPost(t, env, alice, "p1", false)

	ws := env.dialWS(t, "", bob.h())
	start := ws.subscribe("posts", map[string]any{"query": q("posts")}).str("resumeToken")
	// Without data, the type alone must not tell that the private old
	// state was in the result set.
	ids := env.dialWS(t, "", bob.h())
	ids.subscribe("ids", map[string]any{"query": q("posts"), "includeData": false})
	owner := env.dialWS(t, "", alice.h())
	owner.subscribe("posts", map[string]any{"query": q("posts")})
	sse := env.openSSE(t, "collection=posts&access_token="+url.QueryEscape(bob.Access), map[string]string{"Authorization": ""})

	p1 := api + "/documents/posts/p1"
	// private → public (the draft goes away with the switch).
	wantStatus(t, "publish", env.Do(t, "PATCH", p1, `{"doc":{"public":true,"draft":null}}`, alice.h()), http.StatusOK)
	// public → private, with a new secret.
	wantStatus(t, "unpublish", env.Do(t, "PATCH", p1, fmt.Sprintf(`{"doc":{"public":false,"draft":%q}}`, secret+"-2"), alice.h()), http.StatusOK)
	// A public post after both: the stream must have shown the two changes
	// of p1 before it.
	putPost(t, env, alice, "z", true)

	type delta = map[string]any
	check := func(who string, next func() (delta, string)) {
		t.Helper()
		d, raw := next()
		if d["type"] != "create" || d["op"] != "update" || d["path"] != "posts/p1" || d["document"] == nil {
			t.Errorf("%s: publish event %s, want create/update of posts/p1 with its document", who, raw)
		}
		if _, ok := d["before"]; ok || strings.Contains(raw, secret) {
			t.Errorf("%s: publish event shows the private old state: %s", who, raw)
		}
		d, raw = next()
		if d["type"] != "delete" || d["op"] != "update" || d["path"] != "posts/p1" {
			t.Errorf("%s: unpublish event %s, want delete/update of posts/p1", who, raw)
		}
		if _, ok := d["document"]; ok || strings.Contains(raw, secret) {
			t.Errorf("%s: unpublish event shows the new private state: %s", who, raw)
		}
		if before, _ := d["before"].(map[string]any); before["public"] != true {
			t.Errorf("%s: unpublish event %s, want the old public state as before (as for any leave)", who, raw)
		}
		if d, raw = next(); d["path"] != "posts/z" {
			t.Errorf("%s: third event %s, want posts/z", who, raw)
		}
	}
	check("ws", func() (delta, string) {
		m := ws.expect("event")
		return m.delta(), m.String()
	})
	sseCheck := func(sse *sseStream) func() (delta, string) {
		return func() (delta, string) {
			ev := sse.event()
			var m struct {
				Payload struct {
					Delta delta `json:"delta"`
				} `json:"payload"`
			}
			if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
				t.Fatalf("sse event %s: %v", ev.data, err)
			}
			return m.Payload.Delta, ev.data
		}
	}
	check("sse", sseCheck(sse))
	// A resumed stream reads the same changes from the change log: the
	// same answers.
	resumed := env.openSSE(t, "collection=posts&lastEventId="+start+"&access_token="+url.QueryEscape(bob.Access), map[string]string{"Authorization": ""})
	check("sse resumed", sseCheck(resumed))

	for i, want := range []string{"create/update posts/p1", "delete/update posts/p1", "create/create posts/z"} {
		if m := ids.expect("event"); deltaKey(m) != want {
			t.Errorf("data-less event %d: %s, want %s", i, m, want)
		}
	}

	// The owner sees plain updates, old state included.
	for i, wantBefore := range []string{secret, "public"} {
		m := owner.expect("event")
		d := m.delta()
		if d["type"] != "update" || !strings.Contains(m.String(), `"before":`) || !strings.Contains(m.String(), wantBefore) {
			t.Fatalf("owner event %d: %s, want an update with the old state", i, m)
		}
	}
}

// TestReadLeak_RxDBPush: a push never hands over or confirms a master the
// caller may not read, and pushing a state the caller could not read
// answers the same whether the id exists or not.
func TestReadLeak_RxDBPush(t *testing.T) {
	env, alice, bob := newLeakEnv(t)
	putPost(t, env, alice, "p1", false)
	head := env.Head(t)

	row := func(id, assumed string) string {
		nd := fmt.Sprintf(`{"id":%q,"owner":%q,"public":false,"draft":"bob's","_deleted":false}`, id, alice.UID)
		if assumed == "" {
			return "[{\"newDocumentState\":" + nd + "}]"
		}
		return "[{\"assumedMasterState\":" + assumed + ",\"newDocumentState\":" + nd + "}]"
	}
	type answer struct {
		Status        int
		Code, Message string
	}
	ans := func(what string, r *response, id string) answer {
		t.Helper()
		if r.Status != http.StatusForbidden {
			t.Errorf("%s: status=%d, want 403; body %s", what, r.Status, r.Body)
			return answer{Status: r.Status}
		}
		if strings.Contains(string(r.Body), secret) {
			t.Errorf("%s: the response shows the private content: %s", what, r.Body)
		}
		m := r.JSON(t)
		msg, _ := m["message"].(string)
		return answer{r.Status, fmt.Sprint(m["code"]), strings.ReplaceAll(msg, id, "ID")}
	}

	// A conflict on an unreadable master: refused, nothing shown.
	existing := ans("conflict on a private post", env.Do(t, "POST", rxBase("posts")+"/push", row("p1", ""), bob.h()), "p1")
	// A correct guess of the master must not be confirmed by a write.
	guess := fmt.Sprintf(`{"id":"p1","owner":%q,"public":false,"draft":%q,"_deleted":false}`, alice.UID, secret)
	ans("push assuming the guessed private master", env.Do(t, "POST", rxBase("posts")+"/push", row("p1", guess), bob.h()), "p1")
	// The same push to an id that does not exist answers the same.
	absent := ans("the same push to an absent id", env.Do(t, "POST", rxBase("posts")+"/push", row("nope", ""), bob.h()), "nope")
	if existing != absent {
		t.Errorf("existing id answered %+v, absent id %+v: a push tells whether an id exists", existing, absent)
	}
	if got := env.Head(t); got != head {
		t.Errorf("refused pushes wrote: head %d → %d", head, got)
	}

	// A collection the caller can never read: existing and absent ids
	// answer the same, before anything stored is looked at.
	wantStatus(t, "admin seeds the vault", env.Do(t, "PUT", api+"/documents/vault/v1", fmt.Sprintf(`{"doc":{"k":%q}}`, secret), nil), http.StatusCreated)
	v1 := ans("push to an existing vault id", env.Do(t, "POST", rxBase("vault")+"/push", `[{"newDocumentState":{"id":"v1","_deleted":false}}]`, bob.h()), "v1")
	v2 := ans("push to an absent vault id", env.Do(t, "POST", rxBase("vault")+"/push", `[{"newDocumentState":{"id":"v2","_deleted":false}}]`, bob.h()), "v2")
	if v1 != v2 {
		t.Errorf("vault: existing id answered %+v, absent id %+v", v1, v2)
	}

	// Readable documents replicate as before: alice's conflict gets her
	// master, bob's own public post goes through.
	conflicts := mustPush(t, env, alice.h(), "posts", row("p1", ""))
	if len(conflicts) != 1 || conflicts[0]["draft"] != secret {
		t.Fatalf("alice's conflict=%v, want her master", conflicts)
	}
	mustPush(t, env, bob.h(), "posts", fmt.Sprintf(`[{"newDocumentState":{"id":"b1","owner":%q,"public":true,"_deleted":false}}]`, bob.UID))
}
