package server_test

// Ports of Syntrix's Go integration tests (repository syntrixbase/syntrix,
// tests/integration/) not ported elsewhere in server/syntrix_*_test.go:
// each test names the file and commit it copies. The requests are those of
// the tests' helpers (MakeRequest, CreateDocument, PatchDocument,
// PutDocument of tests/integration/test_context_test.go and env_helper.go
// @ 5b9756d1), under /api/v1/databases/{db}/... (the tests' older
// /api/v1/{collection} routes are served by neither Syntrix's current
// server nor Loom). Syntrix tokens name a database; Loom tokens do not, so
// where a test relies on the token's database the port names it in the
// path.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// TestDocumentSystemFields of tests/integration/document_fields_test.go
// @ 056b26238ba3ed28553d68abe5133ae6350331d3: the envelope on create,
// PATCH (merge) and PUT (replace), and a PATCH that tries to write the
// server's fields (version, createdAt, collection): 200, ignored.
func TestSyntrixIT_DocumentSystemFields(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "test-user")
	collection := "test_fields"
	// The test sleeps 10 ms so that updatedAt can grow; the port waits
	// until the wall clock has passed the last updatedAt.
	clockPast := func(ms float64) {
		for float64(time.Now().UnixMilli()) <= ms {
			time.Sleep(time.Millisecond)
		}
	}

	r := env.sxDo(t, "POST", docs+collection, map[string]any{"field1": "value1"}, token)
	sxWant(t, "create", r, http.StatusCreated)
	created := sxObject(t, r)
	docID, _ := created["id"].(string)
	createdAt, _ := created["createdAt"].(float64)
	updatedAt, _ := created["updatedAt"].(float64)
	if docID == "" || created["collection"] != collection || created["version"] != float64(1) || createdAt == 0 || createdAt != updatedAt {
		t.Fatalf("created %s", r.Body)
	}
	docURL := docs + collection + "/" + docID

	clockPast(updatedAt)
	r = env.sxDo(t, "PATCH", docURL, map[string]any{"doc": map[string]any{"field2": "value2"}}, token)
	sxWant(t, "patch", r, http.StatusOK)
	patched := sxObject(t, r)
	if patched["field1"] != "value1" || patched["field2"] != "value2" || patched["version"] != float64(2) ||
		patched["createdAt"] != createdAt || patched["updatedAt"].(float64) <= updatedAt {
		t.Fatalf("patched %s (createdAt %v, updatedAt %v)", r.Body, createdAt, updatedAt)
	}
	updatedAt = patched["updatedAt"].(float64)

	clockPast(updatedAt)
	r = env.sxDo(t, "PUT", docURL, map[string]any{"doc": map[string]any{"field1": "value1-replaced", "field3": "value3"}}, token)
	sxWant(t, "put", r, http.StatusOK)
	replaced := sxObject(t, r)
	if replaced["version"] != float64(3) || replaced["createdAt"] != createdAt || replaced["updatedAt"].(float64) <= updatedAt || replaced["field2"] != nil {
		t.Fatalf("replaced %s", r.Body)
	}

	// "Verify Shadow Fields Protection".
	r = env.sxDo(t, "PATCH", docURL, map[string]any{"doc": map[string]any{
		"field4": "value4", "version": 999, "createdAt": 0, "collection": "hacked",
	}}, token)
	sxWant(t, "patch of the server's fields", r, http.StatusOK)
	protected := sxObject(t, r)
	if protected["version"] != float64(4) || protected["createdAt"] != createdAt || protected["collection"] != collection || protected["field4"] != "value4" {
		t.Fatalf("protected %s", r.Body)
	}
}

// TestMultiDatabase_DataIsolation and TestMultiDatabase_ReplicationIsolation
// of tests/integration/multidatabase_test.go
// @ ae43ecf59ad0ddb7ee90a4e883250dd6fd72f33b (the realtime one is
// TestSyntrixIT_MultiDatabaseRealtimeIsolation): a document written in
// database-a is not found, listed, queried, patched, deleted or pulled
// through database-b, and one pushed to database-b is not pulled from
// database-a. The query answers decode into []interface{}: [compat] syntrix.
func TestSyntrixIT_MultiDatabaseIsolation(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	tokenA, tokenB := env.sxToken(t, "user-a"), env.sxToken(t, "user-b")
	dbA, dbB := "/api/v1/databases/database-a", "/api/v1/databases/database-b"

	t.Run("DataIsolation", func(t *testing.T) {
		collection := "private_docs"
		r := env.sxDo(t, "POST", dbA+"/documents/"+collection, map[string]any{"title": "Secret Plan A", "owner": "A"}, tokenA)
		sxWant(t, "create in A", r, http.StatusCreated)
		docID := sxObject(t, r)["id"].(string)
		inB := fmt.Sprintf("%s/documents/%s/%s", dbB, collection, docID)

		sxWant(t, "GET through B", env.sxDo(t, "GET", inB, nil, tokenB), http.StatusNotFound)
		r = env.sxDo(t, "POST", dbB+"/query", syntrixQuery{Collection: collection}, tokenB)
		sxWant(t, "list B", r, http.StatusOK)
		if got := sxArray(t, r); len(got) != 0 {
			t.Fatalf("B lists %v", got)
		}
		sxWant(t, "PATCH through B", env.sxDo(t, "PATCH", inB, map[string]any{"doc": map[string]any{"title": "Hacked by B"}}, tokenB), http.StatusNotFound)
		sxWant(t, "DELETE through B", env.sxDo(t, "DELETE", inB, nil, tokenB), http.StatusNotFound)
		r = env.sxDo(t, "POST", dbB+"/query", syntrixQuery{Collection: collection, Filters: []syntrixFilter{{Field: "title", Op: "==", Value: "Secret Plan A"}}}, tokenB)
		sxWant(t, "query B", r, http.StatusOK)
		if got := sxArray(t, r); len(got) != 0 {
			t.Fatalf("B's query finds %v", got)
		}
		r = env.sxDo(t, "GET", fmt.Sprintf("%s/documents/%s/%s", dbA, collection, docID), nil, tokenA)
		sxWant(t, "GET through A", r, http.StatusOK)
		if d := sxObject(t, r); d["title"] != "Secret Plan A" {
			t.Fatalf("A reads %s", r.Body)
		}
	})

	t.Run("ReplicationIsolation", func(t *testing.T) {
		collection := "repl_docs"
		sxWant(t, "create in A", env.sxDo(t, "POST", dbA+"/documents/"+collection, map[string]any{"title": "Repl Doc A"}, tokenA), http.StatusCreated)
		pull := func(db, token string) []map[string]any {
			t.Helper()
			r := env.sxDo(t, "GET", "/replication/v1/databases/"+db+"/pull?collection="+collection+"&checkpoint=0&limit=100", nil, token)
			sxWant(t, "pull "+db, r, http.StatusOK)
			var res struct {
				Documents []map[string]any `json:"documents"`
			}
			if err := json.Unmarshal(r.Body, &res); err != nil || res.Documents == nil {
				t.Fatalf("pull answer %s: want {documents: [...]} (%v)", r.Body, err)
			}
			return res.Documents
		}
		if got := pull("database-b", tokenB); len(got) != 0 {
			t.Fatalf("B pulls %v", got)
		}
		r := env.sxDo(t, "POST", "/replication/v1/databases/database-b/push", map[string]any{
			"collection": collection,
			"changes":    []map[string]any{{"action": "create", "document": map[string]any{"id": "doc-b", "title": "Repl Doc B"}}},
		}, tokenB)
		sxWant(t, "push to B", r, http.StatusOK)
		docsA := pull("database-a", tokenA)
		if len(docsA) != 1 || docsA[0]["title"] != "Repl Doc A" {
			t.Fatalf("A pulls %v, want only Repl Doc A", docsA)
		}
		if got := pull("database-b", tokenB); len(got) != 1 || got[0]["id"] != "doc-b" {
			t.Fatalf("B pulls %v, want doc-b", got)
		}
	})
}

// syntrixAuthzRules are the rules of TestAuthzIntegration
// (tests/integration/authz_test.go @ 00a8f4cb863cc9eeee4fe4f4310dde8fe42d82a7,
// also in main_test.go's shared rules, index id 39443165001) in Loom's
// format: public/ open to all, private/ to signed-in callers, admin/ to
// the admin role.
const syntrixAuthzRules = `
[[rule]]
match = "public/{doc=**}"
allow = ["read", "write"]
if    = "true"

[[rule]]
match = "private/{doc=**}"
allow = ["read", "write"]
if    = "request.auth != null"

[[rule]]
match = "admin/{doc=**}"
allow = ["read", "write"]
if    = "request.auth != null && 'admin' in request.auth.roles"
`

// TestAuthzIntegration of authz_test.go: the statuses by path and caller.
// One differs on purpose: an anonymous caller the rules refuse gets 401
// (Loom: "authenticate and retry"), where Syntrix answers 403. Syntrix's SDK
// handles both the same way (its interceptor refreshes on 401 and 403).
// Syntrix's "syntrix" admin user is Loom's admin key here (a Loom user with
// the admin role bypasses the rules the same way).
func TestSyntrixIT_Authz(t *testing.T) {
	st := apptest.OpenSQLite(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	set, err := rules.Parse([]byte(syntrixAuthzRules), "authz-test")
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.New(access.Config{Store: st, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Rules: set, Access: acc, RateLimit: -1, SignupRate: -1}
	cfg.Auth = MustAuth(t, st, nil)
	env := MustStartServer(t, st, cfg)
	// "Insert Test Data" (the test writes to its store directly).
	for _, w := range []string{
		`{"type":"create","path":"public/doc1","data":{"foo":"bar"}}`,
		`{"type":"create","path":"private/doc1","data":{"secret":"data"}}`,
		`{"type":"create","path":"admin/doc1","data":{"top":"secret"}}`,
	} {
		env.MustDo(t, http.StatusOK, "POST", api+"/batch", `{"writes":[`+w+`]}`)
	}
	user1 := env.signup(t, "user1").Access

	for _, c := range []struct {
		name, path, token string
		want              int
	}{
		{"Public Access", "public/doc1", "", http.StatusOK},
		{"Private Access No Token", "private/doc1", "", http.StatusUnauthorized}, // Syntrix: 403
		{"Private Access With Token", "private/doc1", user1, http.StatusOK},
		{"Admin Access User Token", "admin/doc1", user1, http.StatusForbidden},
	} {
		r := env.sxDo(t, "GET", docs+c.path, nil, c.token)
		if r.Status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.want)
		}
		if c.want == http.StatusUnauthorized && !strings.HasPrefix(sxErr(t, r).Message, "Unauthorized: ") {
			t.Errorf("%s: message %s, want it to start \"Unauthorized: \"", c.name, r.Body)
		}
	}
	// "Admin Access Admin Token": the admin key (the env's default headers).
	env.MustDo(t, http.StatusOK, "GET", docs+"admin/doc1", "")
}

// TestReplication_Delete of tests/integration/replication_delete_test.go
// @ 87f42b3febb0b75f1fd4d9aeea5f68cc4b129dfe (its push URL, then
// /replication/v1/push?collection=..., is now
// /replication/v1/databases/{db}/push): push doc-1 at version 0, push its
// delete at version 1, then a pull from checkpoint 0 returns doc-1 once,
// "deleted": true, with no "data".
func TestSyntrixIT_ReplicationDelete(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "user1")
	collectionName := "replication_delete_test"
	pushURL := "/replication/v1/databases/default/push?collection=" + collectionName

	r := env.sxDo(t, "POST", pushURL, replicaPushRequest{Collection: collectionName, Changes: []replicaChange{
		{Doc: map[string]any{"id": "doc-1", "msg": "to be deleted", "version": float64(0)}},
	}}, token)
	sxWant(t, "push", r, http.StatusOK)
	r = env.sxDo(t, "POST", pushURL, replicaPushRequest{Collection: collectionName, Changes: []replicaChange{
		{Action: "delete", Doc: map[string]any{"id": "doc-1", "version": float64(1)}},
	}}, token)
	sxWant(t, "push delete", r, http.StatusOK)

	r = env.sxDo(t, "GET", "/replication/v1/databases/default/pull?collection="+collectionName+"&checkpoint=0", nil, token)
	sxWant(t, "pull", r, http.StatusOK)
	var pullResult struct {
		Documents  []map[string]any `json:"documents"`
		Checkpoint string           `json:"checkpoint"`
	}
	if err := json.Unmarshal(r.Body, &pullResult); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, doc := range pullResult.Documents {
		if doc["id"] == "doc-1" {
			found++
			if deleted, ok := doc["deleted"].(bool); !ok || !deleted || doc["data"] != nil {
				t.Errorf("doc-1 %v: want deleted true and no data", doc)
			}
		}
	}
	if found != 1 {
		t.Fatalf("pull %s: doc-1 %d times, want once", r.Body, found)
	}
}
