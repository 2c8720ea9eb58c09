package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// rxBase is the replication base URL of a collection (schema version 0).
func rxBase(collection string) string { return "/replication/rxdb/default/" + collection + "/0" }

// rxBatch is a pull response or a pullStream event.
type rxBatch struct {
	Documents  []map[string]any `json:"documents"`
	Checkpoint struct {
		ID  string `json:"id"`
		LWT int64  `json:"lwt"`
	} `json:"checkpoint"`
}

func decodeBatch(t testing.TB, b []byte) rxBatch {
	t.Helper()
	var out rxBatch
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("batch %s: %v", b, err)
	}
	if out.Documents == nil {
		t.Fatalf("batch %s: documents must be an array", b)
	}
	return out
}

// wantRx checks a replication response's status; error bodies are
// {"code","message"} plus "error": true where rxdb-server's client needs it
// to throw and retry (every status but 401, 403 and 426).
func wantRx(t *testing.T, what string, r *response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, want, r.Body)
	}
	if want < 400 {
		return
	}
	var e struct {
		Error   *bool           `json:"error"`
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	}
	dec := json.NewDecoder(strings.NewReader(string(r.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("%s: error body %s (%v)", what, r.Body, err)
	}
	flagged := e.Error != nil && *e.Error
	if wantFlag := want != http.StatusUnauthorized && want != http.StatusForbidden && want != http.StatusUpgradeRequired; flagged != wantFlag {
		t.Fatalf("%s: error body %s: \"error\": true present=%v, want %v", what, r.Body, flagged, wantFlag)
	}
}

// mustPull fetches one pull page.
func (e *testEnv) mustPull(t testing.TB, h map[string]string, collection string, lwt int64, id string, limit int) rxBatch {
	t.Helper()
	r := e.Do(t, "GET", fmt.Sprintf("%s/pull?lwt=%d&id=%s&limit=%d", rxBase(collection), lwt, id, limit), "", h)
	if r.Status != http.StatusOK {
		t.Fatalf("pull: status=%d, want 200; body %s", r.Status, r.Body)
	}
	return decodeBatch(t, r.Body)
}

// pullAll pulls pages from (lwt, id) until a short page, as the RxDB client
// does; it returns the documents by id (the latest state seen) and the final
// checkpoint.
func (e *testEnv) pullAll(t testing.TB, h map[string]string, collection string, lwt int64, id string, limit int, seen map[string]map[string]any) (int64, string) {
	t.Helper()
	for {
		b := e.mustPull(t, h, collection, lwt, id, limit)
		for _, d := range b.Documents {
			seen[d["id"].(string)] = d
		}
		if len(b.Documents) > 0 {
			last := b.Documents[len(b.Documents)-1]
			// Past documents the rules hide, the checkpoint is {their
			// lwt, ""}: it never names them.
			if b.Checkpoint.ID != last["id"] && b.Checkpoint.ID != "" {
				t.Fatalf("checkpoint id=%q, want the last document's %q or \"\"", b.Checkpoint.ID, last["id"])
			}
		}
		if b.Checkpoint.LWT < lwt || b.Checkpoint.LWT == lwt && b.Checkpoint.ID < id {
			t.Fatalf("checkpoint went backwards: (%d,%q) → (%d,%q)", lwt, id, b.Checkpoint.LWT, b.Checkpoint.ID)
		}
		lwt, id = b.Checkpoint.LWT, b.Checkpoint.ID
		if len(b.Documents) < limit {
			return lwt, id
		}
	}
}

func mustPush(t testing.TB, e *testEnv, h map[string]string, collection, body string) []map[string]any {
	t.Helper()
	r := e.Do(t, "POST", rxBase(collection)+"/push", body, h)
	if r.Status != http.StatusOK {
		t.Fatalf("push %s: status=%d, want 200; body %s", body, r.Status, r.Body)
	}
	var conflicts []map[string]any
	dec := json.NewDecoder(strings.NewReader(string(r.Body)))
	dec.UseNumber()
	if err := dec.Decode(&conflicts); err != nil || conflicts == nil {
		t.Fatalf("push response %s is not an array (%v)", r.Body, err)
	}
	return conflicts
}

func TestRxDB_PullPagingAndShape(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/todos"

	empty := env.mustPull(t, alice.h(), coll, 0, "", 10)
	if len(empty.Documents) != 0 || empty.Checkpoint.ID != "" || empty.Checkpoint.LWT != 0 {
		t.Fatalf("empty pull=%+v, want no documents and the echoed checkpoint {\"\",0}", empty)
	}
	for i := range 25 {
		wantStatus(t, "put", env.Do(t, "PUT", fmt.Sprintf("%s/documents/%s/t%02d", api, coll, i), fmt.Sprintf(`{"doc":{"n":%d,"title":"x"}}`, i), alice.h()), http.StatusCreated)
	}
	wantStatus(t, "delete", env.Do(t, "DELETE", api+"/documents/"+coll+"/t03", "", alice.h()), http.StatusNoContent)

	first := env.mustPull(t, alice.h(), coll, 0, "", 10)
	if len(first.Documents) != 10 {
		t.Fatalf("first page has %d documents, want 10", len(first.Documents))
	}
	d := first.Documents[0]
	if d["id"] != "t00" || d["n"] != json.Number("0") || d["title"] != "x" || d["_deleted"] != false || len(d) != 4 {
		t.Fatalf("replicated document=%v, want exactly id, n, title, _deleted", d)
	}

	seen := map[string]map[string]any{}
	lwt, id := env.pullAll(t, alice.h(), coll, 0, "", 10, seen)
	if len(seen) != 25 {
		t.Fatalf("pulled %d documents, want 25", len(seen))
	}
	if seen["t03"]["_deleted"] != true {
		t.Fatalf("tombstone=%v, want _deleted true", seen["t03"])
	}
	if id != "t03" || lwt != env.Head(t) {
		t.Fatalf("final checkpoint=(%d,%q), want (%d,\"t03\")", lwt, id, env.Head(t))
	}
	// Caught up: the checkpoint is echoed.
	again := env.mustPull(t, alice.h(), coll, lwt, id, 10)
	if len(again.Documents) != 0 || again.Checkpoint.LWT != lwt || again.Checkpoint.ID != id {
		t.Fatalf("caught-up pull=%+v, want the checkpoint (%d,%q) echoed", again, lwt, id)
	}
	// An update moves the document after the checkpoint.
	wantStatus(t, "patch", env.Do(t, "PATCH", api+"/documents/"+coll+"/t00", `{"doc":{"n":100}}`, alice.h()), http.StatusOK)
	next := env.mustPull(t, alice.h(), coll, lwt, id, 10)
	if len(next.Documents) != 1 || next.Documents[0]["id"] != "t00" || next.Documents[0]["n"] != json.Number("100") {
		t.Fatalf("pull after update=%+v, want t00 with n=100", next)
	}

	for _, bad := range []string{"lwt=x", "lwt=-1", "limit=0", "limit=abc"} {
		wantRx(t, bad, env.Do(t, "GET", rxBase(coll)+"/pull?"+bad, "", alice.h()), http.StatusBadRequest)
	}
}

// TestRxDB_PullConcurrentWriters pulls while writers create and update
// documents: once the writers stop and the puller catches up from its
// checkpoint, it must hold every document's final state.
func TestRxDB_PullConcurrentWriters(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/items"

	const writers, writes = 6, 25
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				id := fmt.Sprintf("w%d-%d", w, i%7) // rewrites move documents forward
				body := fmt.Sprintf(`{"doc":{"w":%d,"i":%d}}`, w, i)
				r := env.Do(t, "PUT", api+"/documents/"+coll+"/"+id, body, alice.h())
				if r.Status != http.StatusOK && r.Status != http.StatusCreated {
					t.Errorf("put %s: status=%d %s", id, r.Status, r.Body)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	seen := map[string]map[string]any{}
	var lwt int64
	var id string
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		lwt, id = env.pullAll(t, alice.h(), coll, lwt, id, 5, seen)
	}
	lwt, id = env.pullAll(t, alice.h(), coll, lwt, id, 5, seen)

	admin := map[string]string{}
	final := map[string]map[string]any{}
	env.pullAll(t, admin, coll, 0, "", 1000, final)
	if len(final) != writers*7 {
		t.Fatalf("server holds %d documents, want %d", len(final), writers*7)
	}
	for k, want := range final {
		got := seen[k]
		if got == nil || got["i"] != want["i"] || got["w"] != want["w"] {
			t.Errorf("document %s: puller has %v, server has %v (skipped a write)", k, got, want)
		}
	}
	if lwt != env.Head(t) {
		t.Errorf("final checkpoint lwt=%d (id %q), want head %d", lwt, id, env.Head(t))
	}
}

func TestRxDB_Push(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/todos"
	doc := api + "/documents/" + coll + "/a"

	// Insert: no master.
	if c := mustPush(t, env, alice.h(), coll, `[{"newDocumentState":{"id":"a","title":"one","_deleted":false,"_meta":{"lwt":1},"_rev":"1-x","_attachments":{}}}]`); len(c) != 0 {
		t.Fatalf("insert conflicts=%v, want none", c)
	}
	got := env.Do(t, "GET", doc, "", alice.h()).JSON(t)
	if got["title"] != "one" || got["version"] != json.Number("1") {
		t.Fatalf("stored=%v, want title one, version 1", got)
	}
	for _, f := range []string{"_deleted", "_meta", "_rev", "_attachments"} {
		if _, ok := got[f]; ok {
			t.Fatalf("stored document keeps RxDB field %s: %v", f, got)
		}
	}

	// Update with the right assumed master (meta fields are ignored).
	if c := mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"one","_deleted":false,"_meta":{"lwt":5}},"newDocumentState":{"id":"a","title":"two","_deleted":false}}]`); len(c) != 0 {
		t.Fatalf("update conflicts=%v, want none", c)
	}
	// Stale assumed master → conflict with the master.
	c := mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"one","_deleted":false},"newDocumentState":{"id":"a","title":"three","_deleted":false}}]`)
	if len(c) != 1 || c[0]["title"] != "two" || c[0]["_deleted"] != false || c[0]["id"] != "a" || len(c[0]) != 3 {
		t.Fatalf("stale update conflicts=%v, want the master {id a, title two, _deleted false}", c)
	}
	// Master exists, no assumed → conflict.
	if c := mustPush(t, env, alice.h(), coll, `[{"newDocumentState":{"id":"a","title":"blind","_deleted":false}}]`); len(c) != 1 || c[0]["title"] != "two" {
		t.Fatalf("blind write conflicts=%v, want the master", c)
	}
	// Numbers compare by value.
	mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"two","_deleted":false},"newDocumentState":{"id":"a","title":"two","n":1.0,"_deleted":false}}]`)
	if c := mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"two","n":1,"_deleted":false},"newDocumentState":{"id":"a","title":"four","_deleted":false}}]`); len(c) != 0 {
		t.Fatalf("1 vs 1.0: conflicts=%v, want none", c)
	}

	// Delete.
	if c := mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"four","_deleted":false},"newDocumentState":{"id":"a","title":"four","_deleted":true}}]`); len(c) != 0 {
		t.Fatalf("delete conflicts=%v, want none", c)
	}
	wantStatus(t, "get deleted", env.Do(t, "GET", doc, "", alice.h()), http.StatusNotFound)
	seen := map[string]map[string]any{}
	env.pullAll(t, alice.h(), coll, 0, "", 10, seen)
	if seen["a"]["_deleted"] != true || seen["a"]["title"] != "four" {
		t.Fatalf("pulled tombstone=%v, want _deleted true", seen["a"])
	}
	// A tombstone is a master: a blind insert conflicts with it...
	if c := mustPush(t, env, alice.h(), coll, `[{"newDocumentState":{"id":"a","title":"again","_deleted":false}}]`); len(c) != 1 || c[0]["_deleted"] != true {
		t.Fatalf("insert over tombstone conflicts=%v, want the tombstone", c)
	}
	// ...and an insert that assumed it succeeds.
	if c := mustPush(t, env, alice.h(), coll, `[{"assumedMasterState":{"id":"a","title":"four","_deleted":true},"newDocumentState":{"id":"a","title":"again","_deleted":false}}]`); len(c) != 0 {
		t.Fatalf("re-create conflicts=%v, want none", c)
	}
	if got := env.Do(t, "GET", doc, "", alice.h()).JSON(t); got["title"] != "again" {
		t.Fatalf("re-created=%v", got)
	}

	// Several rows: results in order, only conflicts returned.
	c = mustPush(t, env, alice.h(), coll, `[
		{"newDocumentState":{"id":"b","v":1,"_deleted":false}},
		{"newDocumentState":{"id":"a","title":"blind","_deleted":false}},
		{"newDocumentState":{"id":"c","_deleted":true}}]`)
	if len(c) != 1 || c[0]["id"] != "a" {
		t.Fatalf("multi-row conflicts=%v, want only a", c)
	}

	head := env.Head(t)
	for name, body := range map[string]string{
		"not an array":     `{"newDocumentState":{"id":"x"}}`,
		"no id":            `[{"newDocumentState":{"title":"x"}}]`,
		"bad id":           `[{"newDocumentState":{"id":"a/b"}}]`,
		"reserved field":   `[{"newDocumentState":{"id":"x","createdAt":1}}]`,
		"bad _deleted":     `[{"newDocumentState":{"id":"x","_deleted":"yes"}}]`,
		"bad assumed":      `[{"newDocumentState":{"id":"x"},"assumedMasterState":3}]`,
		"invalid JSON":     `[{`,
		"valid then bad":   `[{"newDocumentState":{"id":"ok"}},{"newDocumentState":{}}]`,
		"row not a object": `[1]`,
	} {
		wantRx(t, name, env.Do(t, "POST", rxBase(coll)+"/push", body, alice.h()), http.StatusBadRequest)
	}
	if got := env.Head(t); got != head {
		t.Fatalf("rejected pushes wrote: head %d → %d", head, got)
	}
}

// TestRxDB_PushRace: many clients push the same assumed master at once;
// exactly one wins, every other gets the winner's state as a conflict.
func TestRxDB_PushRace(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/todos"
	mustPush(t, env, alice.h(), coll, `[{"newDocumentState":{"id":"r","n":0,"_deleted":false}}]`)

	const n = 16
	var wg sync.WaitGroup
	results := make([][]map[string]any, n)
	for i := range n {
		wg.Go(func() {
			results[i] = mustPush(t, env, alice.h(), coll, fmt.Sprintf(`[{"assumedMasterState":{"id":"r","n":0,"_deleted":false},"newDocumentState":{"id":"r","n":%d,"_deleted":false}}]`, i+1))
		})
	}
	wg.Wait()
	winners := 0
	final := env.Do(t, "GET", api+"/documents/"+coll+"/r", "", alice.h()).JSON(t)
	for i, c := range results {
		switch {
		case len(c) == 0:
			winners++
			if final["n"] != json.Number(fmt.Sprint(i+1)) {
				t.Errorf("winner %d, but the server holds n=%v", i+1, final["n"])
			}
		case c[0]["n"] != final["n"]:
			t.Errorf("loser %d got master n=%v, want the winner's %v", i+1, c[0]["n"], final["n"])
		}
	}
	if winners != 1 || final["version"] != json.Number("2") {
		t.Fatalf("winners=%d version=%v, want exactly 1 winner and version 2", winners, final["version"])
	}
}

var rxSharedRules = rules.DefaultSource() + `
[[rule]]
match = "shared/{id}"
allow = ["read", "delete"]
if    = "request.auth != null && resource.data.owner == request.auth.uid"

[[rule]]
match = "shared/{id}"
allow = ["create", "update"]
if    = "request.auth != null && request.resource.data.owner == request.auth.uid"
`

func TestRxDB_Rules(t *testing.T) {
	set, err := rules.Parse([]byte(rxSharedRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	aliceColl := "users/" + alice.UID + "/todos"
	mustPush(t, env, alice.h(), aliceColl, `[{"newDocumentState":{"id":"a1","_deleted":false}}]`)

	head := env.Head(t)
	wantRx(t, "bob pulls alice's", env.Do(t, "GET", rxBase(aliceColl)+"/pull?lwt=0&id=&limit=10", "", bob.h()), http.StatusForbidden)
	wantRx(t, "bob streams alice's", env.Do(t, "GET", rxBase(aliceColl)+"/pullStream", "", bob.h()), http.StatusForbidden)
	wantRx(t, "bob pushes into alice's", env.Do(t, "POST", rxBase(aliceColl)+"/push", `[{"newDocumentState":{"id":"b1","_deleted":false}}]`, bob.h()), http.StatusForbidden)
	wantRx(t, "bob overwrites alice's", env.Do(t, "POST", rxBase(aliceColl)+"/push", `[{"assumedMasterState":{"id":"a1","_deleted":false},"newDocumentState":{"id":"a1","x":1,"_deleted":false}}]`, bob.h()), http.StatusForbidden)
	for _, ep := range []struct{ method, url, body string }{
		{"GET", rxBase(aliceColl) + "/pull?lwt=0&id=&limit=10", ""},
		{"POST", rxBase(aliceColl) + "/push", `[]`},
		{"GET", rxBase(aliceColl) + "/pullStream", ""},
	} {
		wantRx(t, "anonymous "+ep.url, env.Do(t, ep.method, ep.url, ep.body, anon), http.StatusUnauthorized)
		wantRx(t, "bad token "+ep.url, env.Do(t, ep.method, ep.url, ep.body, map[string]string{"Authorization": "Bearer nope"}), http.StatusUnauthorized)
	}
	wantRx(t, "system collection", env.Do(t, "GET", rxBase("_users")+"/pull", "", alice.h()), http.StatusForbidden)
	// _triggers is in the change log (the nodes follow it) and holds
	// signing secrets: not even the admin replicates or streams it.
	adminH := map[string]string{"Authorization": "Bearer " + testAdminKey}
	wantRx(t, "admin pulls _triggers", env.Do(t, "GET", rxBase("_triggers")+"/pull?lwt=0&id=&limit=10", "", adminH), http.StatusForbidden)
	wantRx(t, "admin streams _triggers", env.Do(t, "GET", rxBase("_triggers")+"/pullStream", "", adminH), http.StatusForbidden)
	// pullStream takes the token in the query too (browser EventSource).
	wantRx(t, "bob streams alice's via the query", env.Do(t, "GET", rxBase(aliceColl)+"/pullStream?access_token="+bob.Access, "", anon), http.StatusForbidden)
	wantRx(t, "bad token in the query", env.Do(t, "GET", rxBase(aliceColl)+"/pullStream?access_token=nope", "", anon), http.StatusUnauthorized)
	wantRx(t, "query token on pull", env.Do(t, "GET", rxBase(aliceColl)+"/pull?lwt=0&id=&limit=10&access_token="+alice.Access, "", anon), http.StatusUnauthorized)
	openStreamQuery(t, env, nil, aliceColl, "access_token="+alice.Access)
	if got := env.Head(t); got != head {
		t.Fatalf("denied requests wrote: head %d → %d", head, got)
	}

	// A shared collection: each user sees only their own documents, and
	// pages filtered by the rules are refilled (a short page would make
	// the client stop early).
	for i := range 12 {
		owner := alice
		if i%3 != 0 {
			owner = bob
		}
		mustPush(t, env, owner.h(), "shared", fmt.Sprintf(`[{"newDocumentState":{"id":"s%02d","owner":%q,"_deleted":false}}]`, i, owner.UID))
	}
	wantRx(t, "push as someone else", env.Do(t, "POST", rxBase("shared")+"/push", fmt.Sprintf(`[{"newDocumentState":{"id":"x","owner":%q,"_deleted":false}}]`, bob.UID), alice.h()), http.StatusForbidden)
	// A conflict would hand over the master: not for a document the
	// pusher may not read.
	wantRx(t, "blind push onto bob's document", env.Do(t, "POST", rxBase("shared")+"/push", fmt.Sprintf(`[{"newDocumentState":{"id":"s01","owner":%q,"_deleted":false}}]`, alice.UID), alice.h()), http.StatusForbidden)
	wantRx(t, "stale push onto bob's document", env.Do(t, "POST", rxBase("shared")+"/push", fmt.Sprintf(`[{"assumedMasterState":{"id":"s01","owner":%q,"_deleted":false},"newDocumentState":{"id":"s01","owner":%q,"_deleted":false}}]`, alice.UID, alice.UID), alice.h()), http.StatusForbidden)
	page := env.mustPull(t, alice.h(), "shared", 0, "", 2)
	if len(page.Documents) != 2 || page.Documents[0]["id"] != "s00" || page.Documents[1]["id"] != "s03" {
		t.Fatalf("alice's first page=%v, want s00 and s03", page.Documents)
	}
	seen := map[string]map[string]any{}
	env.pullAll(t, alice.h(), "shared", 0, "", 2, seen)
	if len(seen) != 4 {
		t.Fatalf("alice pulled %d shared documents, want her 4", len(seen))
	}
	for id, d := range seen {
		if d["owner"] != alice.UID {
			t.Fatalf("alice pulled %s owned by %v", id, d["owner"])
		}
	}
}

func TestRxDB_PathsAndSchemaVersion(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1, RxDB: server.RxDBConfig{MinSchemaVersion: 2}})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/todos"
	base := "/replication/rxdb/default/" + coll
	for _, tc := range []struct {
		method, url string
		want        int
	}{
		{"GET", base + "/2/pull", http.StatusOK},
		{"GET", base + "/3/pull?lwt=0&id=&limit=5", http.StatusOK},
		{"GET", base + "/1/pull", http.StatusUpgradeRequired},
		{"GET", base + "/0/pullStream", http.StatusUpgradeRequired},
		{"POST", base + "/1/push", http.StatusUpgradeRequired},
		{"GET", base + "/x/pull", http.StatusBadRequest},
		{"GET", base + "/-1/pull", http.StatusBadRequest},
		{"GET", base + "/2/nope", http.StatusNotFound},
		{"GET", "/replication/rxdb/default/2/pull", http.StatusNotFound},
		{"GET", "/replication/rxdb/default/users/" + alice.UID + "/2/pull", http.StatusBadRequest},
		{"GET", "/replication/rxdb/bad!db/" + coll + "/2/pull", http.StatusBadRequest},
		{"GET", base + "/2/push", http.StatusMethodNotAllowed},
		{"POST", base + "/2/pull", http.StatusMethodNotAllowed},
	} {
		body := ""
		if tc.method == "POST" {
			body = "[]"
		}
		wantRx(t, tc.method+" "+tc.url, env.Do(t, tc.method, tc.url, body, alice.h()), tc.want)
	}
}

// sseReader reads a pullStream response line by line.
type sseReader struct {
	res   *http.Response
	lines chan string
}

func openStream(t *testing.T, env *testEnv, h map[string]string, collection string) *sseReader {
	return openStreamQuery(t, env, h, collection, "")
}

// openStreamQuery opens pullStream with a query string (e.g.
// "access_token=...").
func openStreamQuery(t *testing.T, env *testEnv, h map[string]string, collection, query string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	url := env.URL + rxBase(collection) + "/pullStream"
	if query != "" {
		url += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("pullStream: %v", err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("pullStream: status=%d content-type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	r := &sseReader{res: res, lines: make(chan string, 64)}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	return r
}

// next returns the next data event (skipping comments), or fails after d.
func (r *sseReader) next(t *testing.T, d time.Duration) rxBatch {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-r.lines:
			if !ok {
				t.Fatal("pullStream ended")
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				if data == `"RESYNC"` || data == "RESYNC" {
					t.Fatal("pullStream sent RESYNC as data")
				}
				return decodeBatch(t, []byte(data))
			}
		case <-timeout:
			t.Fatal("no pullStream event in time")
		}
	}
}

func TestRxDB_PullStream(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1, RxDB: server.RxDBConfig{Heartbeat: 50 * time.Millisecond}})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	coll := "users/" + alice.UID + "/todos"
	mustPush(t, env, alice.h(), coll, `[{"newDocumentState":{"id":"before","_deleted":false}}]`)

	st := openStream(t, env, alice.h(), coll)
	// Heartbeats arrive as comments.
	deadline := time.After(5 * time.Second)
	for beats := 0; beats < 2; {
		select {
		case line := <-st.lines:
			if line == ":" {
				beats++
			}
		case <-deadline:
			t.Fatal("no heartbeat comments")
		}
	}
	// Writes elsewhere are not delivered; the stream starts at the current
	// state, so "before" is not replayed.
	mustPush(t, env, bob.h(), "users/"+bob.UID+"/todos", `[{"newDocumentState":{"id":"other","_deleted":false}}]`)
	wantStatus(t, "put", env.Do(t, "PUT", api+"/documents/"+coll+"/live", `{"doc":{"title":"hi"}}`, alice.h()), http.StatusCreated)
	ev := st.next(t, 5*time.Second)
	if len(ev.Documents) != 1 || ev.Documents[0]["id"] != "live" || ev.Documents[0]["title"] != "hi" || ev.Documents[0]["_deleted"] != false {
		t.Fatalf("event=%+v, want the live document", ev)
	}
	if ev.Checkpoint.ID != "live" || ev.Checkpoint.LWT != env.Head(t) {
		t.Fatalf("event checkpoint=%+v, want (head, live)", ev.Checkpoint)
	}
	// A delete arrives as a tombstone, in commit order.
	wantStatus(t, "delete", env.Do(t, "DELETE", api+"/documents/"+coll+"/before", "", alice.h()), http.StatusNoContent)
	ev = st.next(t, 5*time.Second)
	if len(ev.Documents) != 1 || ev.Documents[0]["id"] != "before" || ev.Documents[0]["_deleted"] != true {
		t.Fatalf("event=%+v, want the tombstone of before", ev)
	}
	// A burst larger than one batch is delivered completely, in order.
	var rows []string
	for i := range 150 {
		rows = append(rows, fmt.Sprintf(`{"newDocumentState":{"id":"b%03d","_deleted":false}}`, i))
	}
	mustPush(t, env, alice.h(), coll, "["+strings.Join(rows, ",")+"]")
	got := 0
	last := ev.Checkpoint.LWT
	for got < 150 {
		ev := st.next(t, 5*time.Second)
		for _, d := range ev.Documents {
			if want := fmt.Sprintf("b%03d", got); d["id"] != want {
				t.Fatalf("stream document %v, want %s", d["id"], want)
			}
			got++
		}
		if ev.Checkpoint.LWT <= last {
			t.Fatalf("stream checkpoint went backwards: %d → %d", last, ev.Checkpoint.LWT)
		}
		last = ev.Checkpoint.LWT
	}
	// The stream is still open here: the server's cleanup checks that
	// shutdown ends it (Serve must return nil, not cut it off).
}

// TestRxDB_RateLimitedPullIsAnError: a 429 from the shared middleware also
// carries "error": true, so the client retries instead of crashing.
func TestRxDB_RateLimitedPullIsAnError(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: 0.001, RateBurst: 3})
	alice := env.signup(t, "alice")
	url := rxBase("users/"+alice.UID+"/todos") + "/pull?lwt=0&id=&limit=5"
	for {
		r := env.Do(t, "GET", url, "", alice.h())
		if r.Status == http.StatusOK {
			continue
		}
		wantRx(t, "rate limited", r, http.StatusTooManyRequests)
		return
	}
}

// TestRxDB_PullStreamEndsOnShutdown: an open stream does not hold up a
// graceful shutdown; the client sees the stream end (and would reconnect).
func TestRxDB_PullStreamEndsOnShutdown(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{ShutdownTimeout: 5 * time.Second})
	st := openStream(t, env, map[string]string{"Authorization": "Bearer " + testAdminKey}, "rooms")
	if line := <-st.lines; line != ": connected" {
		t.Fatalf("first line %q, want the connected comment", line)
	}

	start := time.Now()
	if err := env.WaitServe(t, 10*time.Second); err != nil {
		t.Fatalf("Serve=%v, want nil (the stream must end at shutdown)", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v with an open stream", d)
	}
	for range st.lines { // the body ends
	}
}

// A push is one commit: a row the rules deny fails the whole push (403,
// details.index = that row) and no row of it is applied.
func TestRxDB_PushIsAllOrNothing(t *testing.T) {
	set, err := rules.Parse([]byte(rxSharedRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set})
	alice := env.signup(t, "alice")
	head := env.Head(t)
	body := fmt.Sprintf(`[{"newDocumentState":{"id":"s1","owner":%q,"_deleted":false}},{"newDocumentState":{"id":"s2","owner":"someone-else","_deleted":false}}]`, alice.UID)
	r := env.Do(t, "POST", rxBase("shared")+"/push", body, alice.h())
	wantRx(t, "push with a forbidden row", r, http.StatusForbidden)
	if !strings.Contains(string(r.Body), `"index":1`) {
		t.Fatalf("body %s: want details.index 1", r.Body)
	}
	if got := env.Head(t); got != head {
		t.Fatalf("a denied push applied rows: head %d → %d", head, got)
	}
	// Without the forbidden row it goes through.
	mustPush(t, env, alice.h(), "shared", fmt.Sprintf(`[{"newDocumentState":{"id":"s1","owner":%q,"_deleted":false}}]`, alice.UID))
	// One document twice in one push is refused.
	r = env.Do(t, "POST", rxBase("shared")+"/push", fmt.Sprintf(`[{"newDocumentState":{"id":"s3","owner":%q,"_deleted":false}},{"newDocumentState":{"id":"s3","owner":%q,"_deleted":false}}]`, alice.UID, alice.UID), alice.h())
	wantRx(t, "duplicate row", r, http.StatusBadRequest)
}

// pullStream applies the rules as pull does: an event carries the
// document's state after a change when the caller may read it, a document
// that becomes unreadable is not sent, one that becomes readable is, and
// each event equals a pull from the previous event's checkpoint (its
// checkpoint never names a hidden document).
func TestRxDB_PullStreamRulesAsPull(t *testing.T) {
	set, err := rules.Parse([]byte(rxSharedRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set})
	alice := env.signup(t, "alice")
	admin := map[string]string{"Authorization": "Bearer " + testAdminKey}
	put := func(id, owner string) {
		t.Helper()
		r := env.Do(t, "PUT", api+"/documents/shared/"+id, fmt.Sprintf(`{"doc":{"owner":%q}}`, owner), admin)
		if r.Status != http.StatusOK && r.Status != http.StatusCreated {
			t.Fatalf("put %s: status=%d; body %s", id, r.Status, r.Body)
		}
	}
	st := openStream(t, env, alice.h(), "shared")
	var cp rxBatch // the previous event
	wantEvent := func(what string, ids ...string) {
		t.Helper()
		ev := st.next(t, 5*time.Second)
		var got []string
		for _, d := range ev.Documents {
			got = append(got, d["id"].(string))
			if d["owner"] != alice.UID {
				t.Fatalf("%s: sent %v, which alice may not read", what, d)
			}
		}
		if strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Fatalf("%s: event documents %v, want %v", what, got, ids)
		}
		if cp.Checkpoint.LWT > 0 {
			pull := env.mustPull(t, alice.h(), "shared", cp.Checkpoint.LWT, cp.Checkpoint.ID, 100)
			if len(pull.Documents) != len(ev.Documents) || pull.Checkpoint != ev.Checkpoint {
				t.Fatalf("%s: event %+v, but a pull from the previous checkpoint gives %+v", what, ev, pull)
			}
		}
		cp = ev
	}
	put("s1", alice.UID)
	wantEvent("readable create", "s1")
	put("s1", "bob") // becomes unreadable: not sent
	put("s2", "bob") // never readable: not sent
	put("s3", alice.UID)
	wantEvent("after hidden changes", "s3")
	put("s1", alice.UID) // readable again
	wantEvent("becomes readable", "s1")
}

// A pullStream opened with a user token ends when the token expires, with
// no commit needed to notice (the client reconnects and sees the 401).
func TestRxDB_PullStreamEndsAtTokenExpiry(t *testing.T) {
	env := newShortTokenEnv(t, time.Second)
	u := env.signup(t, "rxexp")
	st := openStream(t, env, u.h(), "users/"+u.UID+"/todos")
	wantStreamEnds(t, st, "the stream went on after the token expired")
}

// An open pullStream is a live subscription: it counts towards
// MaxSubscriptionsPerUser with WebSocket and SSE subscriptions, and
// closing it frees its place.
func TestRxDB_PullStreamCountsAsSubscription(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1, Realtime: server.RealtimeConfig{MaxSubscriptionsPerUser: 1}})
	alice := env.signup(t, "alice")
	coll := "users/" + alice.UID + "/todos"
	st := openStream(t, env, alice.h(), coll)
	wantRx(t, "second pullStream", env.Do(t, "GET", rxBase(coll)+"/pullStream", "", alice.h()), http.StatusTooManyRequests)
	wantStatus(t, "SSE beside a pullStream", env.Do(t, "GET", "/realtime/sse?collection="+coll, "", alice.h()), http.StatusTooManyRequests)
	st.res.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the place of a closed pullStream was not freed")
		}
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", env.URL+rxBase(coll)+"/pullStream", nil)
		req.Header.Set("Authorization", "Bearer "+alice.Access)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		ok := res.StatusCode == http.StatusOK
		res.Body.Close()
		cancel()
		if ok {
			return
		}
	}
}

// A pullStream opened with a service key ends soon after the key is
// revoked (it is checked again at each heartbeat), with no commit needed.
func TestRxDB_PullStreamEndsWhenKeyRevoked(t *testing.T) {
	env, key := newServiceKeyEnv(t, server.Config{RxDB: server.RxDBConfig{Heartbeat: 50 * time.Millisecond}})
	st := openStream(t, env, map[string]string{"X-API-Key": key}, "jobs")
	wantStatus(t, "revoke", env.Do(t, "DELETE", "/admin/v1/keys/sync", "", nil), http.StatusNoContent)
	wantStreamEnds(t, st, "the stream went on after its key was revoked")
}

// wantStreamEnds reads st until it ends, failing with msg if it does not
// within 5 s.
func wantStreamEnds(t *testing.T, st *sseReader, msg string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-st.lines:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal(msg)
		}
	}
}

// newServiceKeyEnv starts a server whose rules let the service role read
// jobs/*, with a service key named "sync" (revoke: DELETE
// /admin/v1/keys/sync).
func newServiceKeyEnv(t *testing.T, cfg server.Config) (*testEnv, string) {
	t.Helper()
	set, err := rules.Parse([]byte(rules.DefaultSource()+`
[[rule]]
match = "jobs/{id}"
allow = ["read"]
if    = "request.auth != null && 'service' in request.auth.roles"
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RateLimit, cfg.Rules = -1, set
	env := newAuthEnv(t, cfg)
	r := env.Do(t, "POST", "/admin/v1/keys", `{"name":"sync"}`, nil)
	wantStatus(t, "create key", r, http.StatusCreated)
	key, _ := r.JSON(t)["key"].(string)
	return env, key
}

// An SSE stream opened with a service key ends soon after the key is
// revoked, like a pullStream: a service key has no expiry to end it.
func TestRealtimeSSE_EndsWhenKeyRevoked(t *testing.T) {
	env, key := newServiceKeyEnv(t, server.Config{Realtime: server.RealtimeConfig{SSEHeartbeat: 50 * time.Millisecond}})
	s := env.openSSE(t, "collection=jobs", map[string]string{"Authorization": "", "X-API-Key": key})
	wantStatus(t, "revoke", env.Do(t, "DELETE", "/admin/v1/keys/sync", "", nil), http.StatusNoContent)
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("the stream went on after its key was revoked (%v), or ended without saying why", err)
		}
		if !ev.comment {
			if !strings.Contains(ev.data, "UNAUTHENTICATED") {
				t.Fatalf("last event %q, want an UNAUTHENTICATED error", ev.data)
			}
			if _, err := s.next(); err == nil {
				t.Fatal("the stream went on after the error")
			}
			return
		}
	}
}

// A WebSocket connection authenticated with a service key is closed soon
// after the key is revoked, with an UNAUTHENTICATED error.
func TestRealtimeWS_ClosedWhenKeyRevoked(t *testing.T) {
	env, key := newServiceKeyEnv(t, server.Config{Realtime: server.RealtimeConfig{Heartbeat: 50 * time.Millisecond}})
	w := env.dialWS(t, "", map[string]string{"Authorization": "", "X-API-Key": key})
	w.subscribe("s", map[string]any{"query": q("jobs")})
	wantStatus(t, "revoke", env.Do(t, "DELETE", "/admin/v1/keys/sync", "", nil), http.StatusNoContent)
	m := w.read()
	if m.Type != "error" || m.str("code") != "UNAUTHENTICATED" {
		t.Fatalf("after revoking the key got %s, want an UNAUTHENTICATED error", m)
	}
	if _, err := w.tryRead(); err == nil {
		t.Fatal("the connection went on after its key was revoked")
	}
}
