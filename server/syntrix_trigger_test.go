package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// The requests below are the ones Syntrix's clients send to its trigger
// API, copied from:
//   - sdk/syntrix-client-ts/src/trigger/trigger-client.ts @ 94d499013f864b6dfd84eb9749c24914e89e98af
//     (TriggerClient: batch → POST /write {writes}; get → POST /get {path};
//     set/update/delete → batch([{type:'set'|'update'|'delete', path, data?, ifMatch?}]);
//     query → POST /query {collection, filters, orderBy, limit}, reading res.data.docs)
//   - sdk/syntrix-client-ts/src/api/reference.ts @ 68e4eb0ed85f4a9da383801c7c49026baf34bf65
//     (QueryImpl.get: the query body; ifMatch entries {field, op, value})
//   - internal/gateway/rest/handler_trigger.go @ 68836243fc8dc7ae2117247ec36a7849599e9175
//     (the server contract: get {paths} → {documents}, write → 200 empty body)
//   - tests/integration/trigger_api_test.go @ e83ff47b3097154dbccdb20167514083d51ca3f7
//     (the api/doc1, api/doc2 writes and the rollback of a batch with a duplicate create)

const triggerAPI = "/trigger/v1/databases/default"

// triggerRules: service keys read and write api/**; they may write but not
// read inbox/*; nothing at all is allowed on locked/* (the admin bypasses).
const triggerRules = `
[[rule]]
match = "api/{rest=**}"
allow = ["read", "write"]
if    = "request.auth != null && 'service' in request.auth.roles"

[[rule]]
match = "inbox/{id}"
allow = ["write"]
if    = "request.auth != null && 'service' in request.auth.roles"
`

func newTriggerAPIEnv(t *testing.T) (*testEnv, map[string]string) {
	t.Helper()
	set, err := rules.Parse([]byte(triggerRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{Rules: set})
	k := env.Do(t, "POST", "/admin/v1/keys", `{"name":"worker","roles":["service"]}`, nil)
	wantStatus(t, "create service key", k, http.StatusCreated)
	key, _ := k.JSON(t)["key"].(string)
	return env, map[string]string{"Authorization": "Bearer " + key}
}

// triggerDocs decodes a get or query answer and checks that docs and
// documents are the same array.
func triggerDocs(t *testing.T, r *response) []map[string]any {
	t.Helper()
	var body struct {
		Docs      []map[string]any `json:"docs"`
		Documents []map[string]any `json:"documents"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("answer %s: %v", r.Body, err)
	}
	if body.Docs == nil || body.Documents == nil {
		t.Fatalf("answer %s: want both docs and documents arrays", r.Body)
	}
	a, _ := json.Marshal(body.Docs)
	b, _ := json.Marshal(body.Documents)
	if string(a) != string(b) {
		t.Fatalf("docs %s != documents %s", a, b)
	}
	return body.Docs
}

func TestSyntrixTrigger_SDKFlow(t *testing.T) {
	env, svc := newTriggerAPIEnv(t)

	// TriggerClient.batch([create, set]) — the SDK's set() is type "set".
	r := env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"create","path":"api/doc1","data":{"val":1}},{"type":"set","path":"api/doc2","data":{"val":2}}]}`, svc)
	wantStatus(t, "batch create+set", r, http.StatusOK)
	if len(r.Body) != 0 {
		t.Fatalf("write answered %q, want an empty body", r.Body)
	}
	if got := env.Do(t, "GET", api+"/documents/api/doc2", "", nil).JSON(t)["val"]; got != json.Number("2") {
		t.Fatalf("api/doc2 val=%v, want 2", got)
	}

	// TriggerClient.get(path): POST /get {path} → res.data.docs[0].
	r = env.Do(t, "POST", triggerAPI+"/get", `{"path":"api/doc1"}`, svc)
	wantStatus(t, "get {path}", r, http.StatusOK)
	docs := triggerDocs(t, r)
	if len(docs) != 1 || docs[0]["val"] != float64(1) || docs[0]["id"] != "doc1" || docs[0]["collection"] != "api" {
		t.Fatalf("get {path}: %s", r.Body)
	}

	// The Go contract: {paths} with a missing one → the others.
	r = env.Do(t, "POST", triggerAPI+"/get", `{"paths":["api/doc1","api/missing","api/doc2"]}`, svc)
	wantStatus(t, "get {paths}", r, http.StatusOK)
	if docs := triggerDocs(t, r); len(docs) != 2 || docs[0]["id"] != "doc1" || docs[1]["id"] != "doc2" {
		t.Fatalf("get {paths}: %s", r.Body)
	}
	// All missing: empty arrays, which the SDK turns into null.
	r = env.Do(t, "POST", triggerAPI+"/get", `{"path":"api/nothing"}`, svc)
	wantStatus(t, "get missing", r, http.StatusOK)
	if docs := triggerDocs(t, r); len(docs) != 0 {
		t.Fatalf("get missing: %s", r.Body)
	}

	// Atomic: a batch whose second create hits an existing document
	// applies nothing and names the write.
	head := env.Head(t)
	r = env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"create","path":"api/doc4","data":{"val":4}},{"type":"create","path":"api/doc1","data":{"val":33}}]}`, svc)
	wantStatus(t, "duplicate create", r, http.StatusConflict)
	if idx := r.JSON(t)["details"].(map[string]any)["index"]; idx != json.Number("1") {
		t.Fatalf("details.index=%v, want 1: %s", idx, r.Body)
	}
	if env.Head(t) != head {
		t.Fatal("a failed batch changed the change log")
	}
	wantStatus(t, "doc4 not created", env.Do(t, "GET", api+"/documents/api/doc4", "", nil), http.StatusNotFound)
	if got := env.Do(t, "GET", api+"/documents/api/doc1", "", nil).JSON(t)["val"]; got != json.Number("1") {
		t.Fatalf("api/doc1 val=%v after the failed batch, want 1", got)
	}

	// TriggerClient.update(path, data, ifMatch).
	upd := `{"writes":[{"type":"update","path":"api/doc1","data":{"val":10},"ifMatch":[{"field":"val","op":"==","value":1}]}]}`
	wantStatus(t, "update ifMatch holds", env.Do(t, "POST", triggerAPI+"/write", upd, svc), http.StatusOK)
	r = env.Do(t, "POST", triggerAPI+"/write", upd, svc)
	wantStatus(t, "update ifMatch fails", r, http.StatusPreconditionFailed)
	if idx := r.JSON(t)["details"].(map[string]any)["index"]; idx != json.Number("0") {
		t.Fatalf("412 details.index=%v, want 0: %s", idx, r.Body)
	}

	// TriggerClient.delete(path): {type:'delete', path} (ifMatch undefined
	// is left out by JSON.stringify).
	wantStatus(t, "delete", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"delete","path":"api/doc2"}]}`, svc), http.StatusOK)
	wantStatus(t, "deleted", env.Do(t, "GET", api+"/documents/api/doc2", "", nil), http.StatusNotFound)

	// QueryImpl.get through TriggerClient.query: res.data.docs.
	r = env.Do(t, "POST", triggerAPI+"/query", `{"collection":"api","filters":[{"field":"val","op":">=","value":5}],"orderBy":[{"field":"val","direction":"asc"}],"limit":10}`, svc)
	wantStatus(t, "query", r, http.StatusOK)
	if docs := triggerDocs(t, r); len(docs) != 1 || docs[0]["id"] != "doc1" || docs[0]["val"] != float64(10) {
		t.Fatalf("query: %s", r.Body)
	}
	if m := r.JSON(t); m["nextCursor"] != nil {
		t.Fatalf("query nextCursor=%v, want null", m["nextCursor"])
	}
	// limit left out (undefined in the SDK) and a page boundary.
	wantStatus(t, "more docs", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"create","path":"api/a"},{"type":"create","path":"api/b","data":null}]}`, svc), http.StatusOK)
	r = env.Do(t, "POST", triggerAPI+"/query", `{"collection":"api","filters":[],"orderBy":[],"limit":2}`, svc)
	wantStatus(t, "query page", r, http.StatusOK)
	if docs, m := triggerDocs(t, r), r.JSON(t); len(docs) != 2 || m["nextCursor"] == nil {
		t.Fatalf("query page: %s", r.Body)
	}
	r = env.Do(t, "POST", triggerAPI+"/query", `{"collection":"api","filters":[],"orderBy":[]}`, svc)
	if docs := triggerDocs(t, r); len(docs) != 3 {
		t.Fatalf("query without limit: %s", r.Body)
	}
}

func TestSyntrixTrigger_Callers(t *testing.T) {
	env, svc := newTriggerAPIEnv(t)
	alice := env.signup(t, "alice")
	bodies := map[string]string{
		"/get":   `{"path":"api/doc1"}`,
		"/write": `{"writes":[{"type":"create","path":"api/doc1","data":{"val":1}}]}`,
		"/query": `{"collection":"api"}`,
	}
	head := env.Head(t)
	for route, body := range bodies {
		r := env.Do(t, "POST", triggerAPI+route, body, alice.h())
		wantStatus(t, "user "+route, r, http.StatusForbidden)
		if code := r.JSON(t)["code"]; code != "PERMISSION_DENIED" {
			t.Fatalf("user %s: code %v", route, code)
		}
		wantStatus(t, "anonymous "+route, env.Do(t, "POST", triggerAPI+route, body, anon), http.StatusUnauthorized)
		wantStatus(t, "bad key "+route, env.Do(t, "POST", triggerAPI+route, body, map[string]string{"Authorization": "Bearer lk_nope"}), http.StatusUnauthorized)
	}
	if env.Head(t) != head {
		t.Fatal("a refused caller wrote")
	}
	// The admin key and a service key get through.
	wantStatus(t, "admin write", env.Do(t, "POST", triggerAPI+"/write", bodies["/write"], nil), http.StatusOK)
	wantStatus(t, "service get", env.Do(t, "POST", triggerAPI+"/get", bodies["/get"], svc), http.StatusOK)
	wantStatus(t, "bad database", env.Do(t, "POST", "/trigger/v1/databases/no$such/get", bodies["/get"], svc), http.StatusBadRequest)
}

func TestSyntrixTrigger_RulesApplyToServiceKeys(t *testing.T) {
	env, svc := newTriggerAPIEnv(t)

	// No rule allows locked/*: refused, with the index; the admin bypasses.
	r := env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"create","path":"api/ok","data":{}},{"type":"create","path":"locked/x","data":{"a":1}}]}`, svc)
	wantStatus(t, "locked write", r, http.StatusForbidden)
	if idx := r.JSON(t)["details"].(map[string]any)["index"]; idx != json.Number("1") {
		t.Fatalf("details.index=%v, want 1: %s", idx, r.Body)
	}
	wantStatus(t, "nothing applied", env.Do(t, "GET", api+"/documents/api/ok", "", nil), http.StatusNotFound)
	wantStatus(t, "admin locked write", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"create","path":"locked/x","data":{"a":1}}]}`, nil), http.StatusOK)
	wantStatus(t, "locked query", env.Do(t, "POST", triggerAPI+"/query", `{"collection":"locked"}`, svc), http.StatusForbidden)

	// inbox/* is writable but not readable: written, then skipped by get
	// exactly like a missing document (and absent from the answer).
	wantStatus(t, "inbox write", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"set","path":"inbox/m1","data":{"secret":"s"}}]}`, svc), http.StatusOK)
	r = env.Do(t, "POST", triggerAPI+"/get", `{"paths":["inbox/m1","inbox/m2","api/none"]}`, svc)
	wantStatus(t, "inbox get", r, http.StatusOK)
	if docs := triggerDocs(t, r); len(docs) != 0 {
		t.Fatalf("unreadable documents in the answer: %s", r.Body)
	}
	r = env.Do(t, "POST", triggerAPI+"/get", `{"path":"inbox/m1"}`, nil)
	if docs := triggerDocs(t, r); len(docs) != 1 || docs[0]["secret"] != "s" {
		t.Fatalf("admin get: %s", r.Body)
	}
	// System collections: refused by path, whoever the caller.
	wantStatus(t, "system get", env.Do(t, "POST", triggerAPI+"/get", `{"path":"_users/x"}`, svc), http.StatusForbidden)
	wantStatus(t, "system write", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[{"type":"set","path":"_users/x","data":{}}]}`, nil), http.StatusForbidden)
}

func TestSyntrixTrigger_BadRequests(t *testing.T) {
	env, svc := newTriggerAPIEnv(t)
	for _, c := range []struct {
		name, route, body string
		want              int
	}{
		{"empty writes", "/write", `{"writes":[]}`, 400},
		{"no writes", "/write", `{}`, 400},
		{"unknown type", "/write", `{"writes":[{"type":"upsert","path":"api/x","data":{}}]}`, 400},
		{"collection path", "/write", `{"writes":[{"type":"create","path":"api","data":{}}]}`, 400},
		{"data on delete", "/write", `{"writes":[{"type":"delete","path":"api/x","data":{}}]}`, 400},
		{"unknown field", "/write", `{"writes":[],"x":1}`, 400},
		{"empty paths", "/get", `{"paths":[]}`, 400},
		{"path and paths", "/get", `{"path":"api/a","paths":["api/b"]}`, 400},
		{"collection as path", "/get", `{"path":"api"}`, 400},
		{"not json", "/get", `{`, 400},
		{"query unknown key", "/query", `{"collection":"api","from":"x"}`, 400},
		{"query document path", "/query", `{"collection":"api/x"}`, 400},
	} {
		wantStatus(t, c.name, env.Do(t, "POST", triggerAPI+c.route, c.body, svc), c.want)
	}
	big := `{"paths":[` + `"api/x"`
	for range server.MaxTriggerGetPaths {
		big += `,"api/x"`
	}
	wantStatus(t, "too many paths", env.Do(t, "POST", triggerAPI+"/get", big+`]}`, svc), 400)
}

// TriggerClient.query and its QueryImpl.update/delete
// (sdk/syntrix-client-ts/src/trigger/trigger-client.ts @ 94d49901,
// trigger-client-query.test.ts @ a394804d: "limit: undefined") never page:
// they read res.data.docs and ignore nextCursor, and Syntrix's server has
// no default limit. So a query without a limit answers the maximum page
// (1000), as /query does under [compat] syntrix, not Loom's 100.
func TestSyntrixTrigger_QueryWithoutLimitIsTheMaximum(t *testing.T) {
	env, svc := newTriggerAPIEnv(t)
	const n = 150
	var writes []string
	for i := range n {
		writes = append(writes, fmt.Sprintf(`{"type":"create","path":"api/d%03d","data":{"n":%d}}`, i, i))
	}
	wantStatus(t, "seed", env.Do(t, "POST", triggerAPI+"/write", `{"writes":[`+strings.Join(writes, ",")+`]}`, svc), http.StatusOK)
	for _, body := range []string{
		`{"collection":"api","filters":[{"field":"n","op":">=","value":0}],"orderBy":[]}`, // limit undefined
		`{"collection":"api","filters":[],"orderBy":[],"limit":0}`,
	} {
		r := env.Do(t, "POST", triggerAPI+"/query", body, svc)
		wantStatus(t, "query", r, http.StatusOK)
		if docs, m := triggerDocs(t, r), r.JSON(t); len(docs) != n || m["nextCursor"] != nil {
			t.Fatalf("query %s: %d documents, nextCursor %v; want all %d, no cursor", body, len(docs), m["nextCursor"], n)
		}
	}
	// An explicit limit still pages.
	r := env.Do(t, "POST", triggerAPI+"/query", `{"collection":"api","limit":100}`, svc)
	if docs, m := triggerDocs(t, r), r.JSON(t); len(docs) != 100 || m["nextCursor"] == nil {
		t.Fatalf("limit 100: %d documents, nextCursor %v", len(docs), m["nextCursor"])
	}
}
