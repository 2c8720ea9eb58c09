package server_test

// Black-box tests of [compat] syntrix (docs/syntrix.md, "The compatibility
// switch"): the requests are the ones Syntrix's own clients send, built as
// they build them, and the responses are decoded as they decode them. Each
// test names the Syntrix file it copies from (repository syntrixbase/syntrix,
// path @ commit).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// syntrixRules stand in for the rules of Syntrix's integration tests
// (tests/integration/env_helper.go @ 5b9756d1: read, write "true" on every
// document), for signed-in callers, except under locked/ (the 403 case).
const syntrixRules = `
[[rule]]
match = "{path=**}"
allow = ["read", "write"]
if    = "request.auth != null && !request.path.startsWith('locked/')"
`

// syntrixQuery is Syntrix's model.Query with its JSON tags
// (docs/design/server/003_query.md, "Query Model (wire shape)"; the
// operators of pkg/model/filter.go @ 68e4eb0e). Its tests marshal it with
// Go zero values: "filters":null, "orderBy":null, "limit":0,
// "startAfter":"", "showDeleted":false.
type syntrixQuery struct {
	Collection  string          `json:"collection"`
	Filters     []syntrixFilter `json:"filters"`
	OrderBy     []syntrixOrder  `json:"orderBy"`
	Limit       int             `json:"limit"`
	StartAfter  string          `json:"startAfter"`
	ShowDeleted bool            `json:"showDeleted"`
}

type syntrixFilter struct {
	Field string `json:"field"`
	Op    string `json:"op"`
	Value any    `json:"value"`
}

type syntrixOrder struct {
	Field     string `json:"field"`
	Direction string `json:"direction"`
}

type syntrixOpts struct {
	compat      bool
	editAuth    func(*auth.Config)
	writeCheck  func(path string, data map[string]any) error
	maxDocBytes int
	maxReqBytes int64
	corsOrigins []string
}

// newSyntrixEnv is a real server with user authentication over a real
// SQLite store, with syntrixRules and [compat] syntrix as o.compat says.
func newSyntrixEnv(t *testing.T, o syntrixOpts) *testEnv {
	t.Helper()
	st := apptest.OpenSQLite(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db"), MaxDocumentBytes: o.maxDocBytes})
	set, err := rules.Parse([]byte(syntrixRules), "syntrix-test")
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.New(access.Config{Store: st, Rules: set, WriteCheck: o.writeCheck})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{
		SyntrixCompat:   o.compat,
		Rules:           set,
		Access:          acc,
		RateLimit:       -1,
		SignupRate:      -1,
		MaxRequestBytes: o.maxReqBytes,
		CORSOrigins:     o.corsOrigins,
	}
	cfg.Auth = MustAuth(t, st, o.editAuth)
	return MustStartServer(t, st, cfg)
}

// sxDo is MakeRequest of Syntrix's integration tests
// (tests/integration/env_helper.go @ 5b9756d1): the body JSON-marshalled,
// Content-Type only with a body, "Authorization: Bearer <token>" only with
// a token.
func (e *testEnv) sxDo(t testing.TB, method, path string, body any, token string) *response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	return e.sxRaw(t, method, path, rd, body != nil, token)
}

func (e *testEnv) sxRaw(t testing.TB, method, path string, body io.Reader, hasBody bool, token string) *response {
	t.Helper()
	req, err := http.NewRequest(method, e.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func sxWant(t testing.TB, what string, r *response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, status, r.Body)
	}
}

// sxObject decodes a body as Syntrix's tests do: into map[string]any
// (numbers as float64).
func sxObject(t testing.TB, r *response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return m
}

// sxArray decodes a query answer as Syntrix's tests do:
// json.NewDecoder(resp.Body).Decode(&[]map[string]interface{}).
func sxArray(t testing.TB, r *response) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.NewDecoder(bytes.NewReader(r.Body)).Decode(&out); err != nil {
		t.Fatalf("query answer %s does not decode into []map[string]any: %v", r.Body, err)
	}
	return out
}

// sxToken is GetToken of Syntrix's integration tests
// (tests/integration/test_context_test.go @ 1ff559ac): signup with
// {"tenant","username","password":"password123456"}, and the access_token
// of the answer. The "tenant" field is unknown to Loom: only [compat]
// syntrix accepts the body.
func (e *testEnv) sxToken(t testing.TB, username string) string {
	t.Helper()
	r := e.sxDo(t, "POST", "/auth/v1/signup", map[string]string{
		"tenant":   "default",
		"username": username,
		"password": "password123456",
	}, "")
	sxWant(t, "signup "+username, r, http.StatusOK)
	tok, _ := sxObject(t, r)["access_token"].(string)
	if tok == "" {
		t.Fatalf("signup: no access_token in %s", r.Body)
	}
	return tok
}

// sxError is a Syntrix-style error body: code, message, and Loom's
// details.
type sxError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
	Errors  []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func sxErr(t testing.TB, r *response) sxError {
	t.Helper()
	var e sxError
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("error body %s: want {code, message} (%v)", r.Body, err)
	}
	return e
}

// docs is the default database's document route prefix.
const docs = api + "/documents/"

// TestSyntrixCompat_APIFlow is TestAPIIntegration of
// tests/integration/api_test.go @ 056b2623 (helpers: CreateDocument,
// GetDocument, PatchDocument, PutDocument of
// tests/integration/test_context_test.go, newest indexed, which POST/GET/
// PATCH/PUT under /api/v1/databases/default/documents/): every request and
// every check of it, against Loom under [compat] syntrix.
func TestSyntrixCompat_APIFlow(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "test-user")
	collection := "rooms/room-1/messages"

	// 3. Create Document: the body is the document itself; 201.
	r := env.sxDo(t, "POST", docs+collection, map[string]any{"name": "Integration User", "age": 42}, token)
	sxWant(t, "create", r, http.StatusCreated)
	created := sxObject(t, r)
	docID, _ := created["id"].(string)
	if docID == "" || created["name"] != "Integration User" {
		t.Fatalf("created=%s, want an id and the name", r.Body)
	}
	docURL := fmt.Sprintf("%s%s/%s", docs, collection, docID)

	// 4. Get Document.
	r = env.sxDo(t, "GET", docURL, nil, token)
	sxWant(t, "get", r, http.StatusOK)
	if got := sxObject(t, r); got["id"] != docID || got["age"] != float64(42) {
		t.Fatalf("fetched=%s", r.Body)
	}

	// 4.5 Patch Document: {"doc": {...}} merges.
	r = env.sxDo(t, "PATCH", docURL, map[string]any{"doc": map[string]any{"age": 43}}, token)
	sxWant(t, "patch", r, http.StatusOK)
	if got := sxObject(t, r); got["name"] != "Integration User" || got["age"] != float64(43) {
		t.Fatalf("patched=%s", r.Body)
	}

	// 4.6 Replace Document (PUT): age is gone.
	r = env.sxDo(t, "PUT", docURL, map[string]any{"doc": map[string]any{"name": "Replaced User", "status": "active"}}, token)
	sxWant(t, "put", r, http.StatusOK)
	if got := sxObject(t, r); got["name"] != "Replaced User" || got["status"] != "active" || got["age"] != nil {
		t.Fatalf("replaced=%s", r.Body)
	}

	// 5. Query Document: a marshalled model.Query with Go zero values;
	// the answer decodes into []map[string]interface{}.
	r = env.sxDo(t, "POST", api+"/query", syntrixQuery{
		Collection: collection,
		Filters:    []syntrixFilter{{Field: "name", Op: "==", Value: "Replaced User"}},
	}, token)
	sxWant(t, "query", r, http.StatusOK)
	found := false
	for _, d := range sxArray(t, r) {
		found = found || d["id"] == docID
	}
	if !found {
		t.Fatalf("query answer %s lacks the document", r.Body)
	}

	// 5.5 Conditional Update (IfMatch).
	r = env.sxDo(t, "PATCH", docURL, map[string]any{"doc": map[string]any{"age": 43}}, token)
	sxWant(t, "patch back to 43", r, http.StatusOK)
	r = env.sxDo(t, "PATCH", docURL, map[string]any{
		"doc":     map[string]any{"age": 44},
		"ifMatch": []map[string]any{{"field": "age", "op": "==", "value": 43}},
	}, token)
	sxWant(t, "ifMatch holds", r, http.StatusOK)
	r = env.sxDo(t, "PATCH", docURL, map[string]any{
		"doc":     map[string]any{"age": 45},
		"ifMatch": []map[string]any{{"field": "age", "op": "==", "value": 999}},
	}, token)
	sxWant(t, "ifMatch fails", r, http.StatusPreconditionFailed)
	if e := sxErr(t, r); e.Code != "PRECONDITION_FAILED" || e.Details["code"] != nil {
		t.Errorf("412 body %s: want PRECONDITION_FAILED (the same name in both), no details.code", r.Body)
	}

	// 6. Delete Document (no body): 204, then 404.
	r = env.sxDo(t, "DELETE", docURL, nil, token)
	sxWant(t, "delete", r, http.StatusNoContent)
	r = env.sxDo(t, "GET", docURL, nil, token)
	sxWant(t, "get deleted", r, http.StatusNotFound)
	if e := sxErr(t, r); e.Code != "NOT_FOUND" {
		t.Errorf("404 code=%s, want NOT_FOUND", e.Code)
	}
}

// TestSyntrixCompat_QueryAdvanced is TestAPIQueryAdvanced of
// tests/integration/api_test.go @ 056b2623: five products, then
// multiple filters, orderBy desc, limit, >=, and showDeleted, each a
// marshalled model.Query decoded as a bare array.
func TestSyntrixCompat_QueryAdvanced(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "query-user")
	collection := "products"
	var createdIDs []string
	for _, doc := range []map[string]any{
		{"name": "Apple", "price": 1.50, "category": "fruit", "stock": 100},
		{"name": "Banana", "price": 0.75, "category": "fruit", "stock": 200},
		{"name": "Carrot", "price": 0.50, "category": "vegetable", "stock": 150},
		{"name": "Milk", "price": 2.00, "category": "dairy", "stock": 50},
		{"name": "Cheese", "price": 5.00, "category": "dairy", "stock": 30},
	} {
		r := env.sxDo(t, "POST", docs+collection, doc, token)
		sxWant(t, "create", r, http.StatusCreated)
		createdIDs = append(createdIDs, sxObject(t, r)["id"].(string))
	}
	query := func(t *testing.T, q syntrixQuery) []map[string]any {
		t.Helper()
		r := env.sxDo(t, "POST", api+"/query", q, token)
		sxWant(t, "query", r, http.StatusOK)
		return sxArray(t, r)
	}

	t.Run("MultipleFilters", func(t *testing.T) {
		res := query(t, syntrixQuery{Collection: collection, Filters: []syntrixFilter{
			{Field: "category", Op: "==", Value: "fruit"},
			{Field: "price", Op: "<", Value: 1.0},
		}})
		if len(res) != 1 || res[0]["name"] != "Banana" {
			t.Fatalf("got %v, want only Banana", res)
		}
	})
	t.Run("OrderBy", func(t *testing.T) {
		res := query(t, syntrixQuery{
			Collection: collection,
			Filters:    []syntrixFilter{{Field: "category", Op: "==", Value: "dairy"}},
			OrderBy:    []syntrixOrder{{Field: "price", Direction: "desc"}},
		})
		if len(res) != 2 || res[0]["name"] != "Cheese" || res[1]["name"] != "Milk" {
			t.Fatalf("got %v, want Cheese then Milk", res)
		}
	})
	t.Run("Limit", func(t *testing.T) {
		if res := query(t, syntrixQuery{Collection: collection, Limit: 2}); len(res) != 2 {
			t.Fatalf("got %d documents, want 2", len(res))
		}
	})
	t.Run("DifferentOperators", func(t *testing.T) {
		res := query(t, syntrixQuery{Collection: collection, Filters: []syntrixFilter{{Field: "stock", Op: ">=", Value: 150}}})
		if len(res) != 2 {
			t.Fatalf("got %v, want Banana and Carrot", res)
		}
	})
	t.Run("ShowDeleted", func(t *testing.T) {
		r := env.sxDo(t, "DELETE", fmt.Sprintf("%s%s/%s", docs, collection, createdIDs[0]), nil, token)
		sxWant(t, "delete", r, http.StatusNoContent)
		if res := query(t, syntrixQuery{Collection: collection, ShowDeleted: false}); len(res) != 4 {
			t.Fatalf("without showDeleted: %d documents, want 4", len(res))
		}
		if res := query(t, syntrixQuery{Collection: collection, ShowDeleted: true}); len(res) != 5 {
			t.Fatalf("with showDeleted: %d documents, want 5", len(res))
		}
	})
}

// TestSyntrixCompat_ErrorCases is TestAPIErrorCases of
// tests/integration/api_test.go @ 056b2623, with the codes Syntrix's SDK
// tests (sdk/syntrix-client-ts/src/api/errors.ts @ b91620bd) and Loom's
// own code in details.code.
func TestSyntrixCompat_ErrorCases(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "error-user")
	collection := "errors"

	check := func(t *testing.T, r *response, status int, code, loomCode string) {
		t.Helper()
		sxWant(t, "request", r, status)
		e := sxErr(t, r)
		if e.Code != code {
			t.Errorf("code=%s, want %s; body %s", e.Code, code, r.Body)
		}
		if got, _ := e.Details["code"].(string); got != loomCode {
			t.Errorf("details.code=%q, want %q; body %s", got, loomCode, r.Body)
		}
	}
	t.Run("NotFound", func(t *testing.T) {
		check(t, env.sxDo(t, "GET", docs+collection+"/nonexistent-id", nil, token), http.StatusNotFound, "NOT_FOUND", "")
	})
	t.Run("BadRequest", func(t *testing.T) {
		// The raw body "{invalid json}" with Content-Type and the token.
		r := env.sxRaw(t, "POST", docs+collection, strings.NewReader("{invalid json}"), true, token)
		check(t, r, http.StatusBadRequest, "BAD_REQUEST", "INVALID_JSON")
	})
	t.Run("Unauthorized", func(t *testing.T) {
		check(t, env.sxDo(t, "GET", docs+collection+"/some-id", nil, "invalid-token"), http.StatusUnauthorized, "UNAUTHORIZED", "UNAUTHENTICATED")
	})
	t.Run("DeleteNotFound", func(t *testing.T) {
		check(t, env.sxDo(t, "DELETE", docs+collection+"/nonexistent-id", nil, token), http.StatusNotFound, "NOT_FOUND", "")
	})
	t.Run("InvalidQuery", func(t *testing.T) {
		r := env.sxDo(t, "POST", api+"/query", map[string]any{
			"filters": []map[string]any{{"field": "name", "op": "invalid_op", "value": "test"}},
		}, token)
		// The body has no collection either, which Loom reports first.
		check(t, r, http.StatusBadRequest, "BAD_REQUEST", "INVALID_PATH")
	})
	t.Run("PatchNotFound", func(t *testing.T) {
		r := env.sxDo(t, "PATCH", docs+collection+"/nonexistent-id", map[string]any{"doc": map[string]any{"name": "updated"}}, token)
		check(t, r, http.StatusNotFound, "NOT_FOUND", "")
	})
	t.Run("PutCreatesIfNotExists", func(t *testing.T) {
		r := env.sxDo(t, "PUT", docs+collection+"/new-doc-via-put", map[string]any{"doc": map[string]any{"name": "Created via PUT", "status": "new"}}, token)
		sxWant(t, "put create", r, http.StatusOK)
		r = env.sxDo(t, "GET", docs+collection+"/new-doc-via-put", nil, token)
		sxWant(t, "get", r, http.StatusOK)
		if d := sxObject(t, r); d["name"] != "Created via PUT" || d["status"] != "new" {
			t.Fatalf("doc=%s", r.Body)
		}
	})
	t.Run("PutReplacesExisting", func(t *testing.T) {
		r := env.sxDo(t, "POST", docs+collection, map[string]any{"name": "Original Name", "field": "original"}, token)
		sxWant(t, "create", r, http.StatusCreated)
		id := sxObject(t, r)["id"].(string)
		r = env.sxDo(t, "PUT", docs+collection+"/"+id, map[string]any{"doc": map[string]any{"name": "Replaced Name", "status": "replaced"}}, token)
		sxWant(t, "put replace", r, http.StatusOK)
		r = env.sxDo(t, "GET", docs+collection+"/"+id, nil, token)
		if d := sxObject(t, r); d["name"] != "Replaced Name" || d["status"] != "replaced" || d["field"] != nil {
			t.Fatalf("doc=%s", r.Body)
		}
	})
}

// TestSyntrixCompat_ErrorCodeTable: every renamed code, and the unchanged
// ones, with the switch on and off. Off, the bodies are Loom's exactly:
// no details.code, no "errors".
func TestSyntrixCompat_ErrorCodeTable(t *testing.T) {
	checkTitle := func(path string, data map[string]any) error {
		if _, ok := data["title"].(string); !ok && strings.HasPrefix(path, "checked/") {
			return &access.InvalidWrite{Field: "title", Msg: "must be a string"}
		}
		return nil
	}
	type row struct {
		name     string
		status   int
		loom     string // the code without the switch
		syntrix  string // the code with it
		send     func(t *testing.T, e *testEnv, token string) *response
		wantList bool // "errors": [{"field","message"}] under the switch
	}
	rows := []row{
		{"401 invalid token", 401, "UNAUTHENTICATED", "UNAUTHORIZED", func(t *testing.T, e *testEnv, _ string) *response {
			return e.sxDo(t, "GET", docs+"a/b", nil, "invalid-token")
		}, false},
		{"401 anonymous read", 401, "UNAUTHENTICATED", "UNAUTHORIZED", func(t *testing.T, e *testEnv, _ string) *response {
			return e.sxDo(t, "GET", docs+"a/b", nil, "")
		}, false},
		{"403 rules", 403, "PERMISSION_DENIED", "FORBIDDEN", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "PUT", docs+"locked/x", map[string]any{"doc": map[string]any{"a": 1}}, tok)
		}, false},
		{"409 duplicate create", 409, "ALREADY_EXISTS", "CONFLICT", func(t *testing.T, e *testEnv, tok string) *response {
			sxWant(t, "first create", e.sxDo(t, "POST", docs+"dups", map[string]any{"id": "d1"}, tok), http.StatusCreated)
			return e.sxDo(t, "POST", docs+"dups", map[string]any{"id": "d1"}, tok)
		}, false},
		{"412 ifMatch", 412, "PRECONDITION_FAILED", "PRECONDITION_FAILED", func(t *testing.T, e *testEnv, tok string) *response {
			e.sxDo(t, "PUT", docs+"p/1", map[string]any{"doc": map[string]any{"n": 1}}, tok)
			return e.sxDo(t, "PATCH", docs+"p/1", map[string]any{"doc": map[string]any{"n": 2}, "ifMatch": []map[string]any{{"field": "n", "op": "==", "value": 5}}}, tok)
		}, false},
		{"413 document", 413, "DOCUMENT_TOO_LARGE", "REQUEST_TOO_LARGE", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "PUT", docs+"big/1", map[string]any{"doc": map[string]any{"s": strings.Repeat("x", 3000)}}, tok)
		}, false},
		{"413 request", 413, "REQUEST_TOO_LARGE", "REQUEST_TOO_LARGE", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "PUT", docs+"big/2", map[string]any{"doc": map[string]any{"s": strings.Repeat("x", 70000)}}, tok)
		}, false},
		{"400 invalid JSON", 400, "INVALID_JSON", "BAD_REQUEST", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxRaw(t, "POST", docs+"c", strings.NewReader("{invalid json}"), true, tok)
		}, false},
		{"400 invalid path", 400, "INVALID_PATH", "BAD_REQUEST", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "PUT", docs+"a/b/c", map[string]any{"doc": map[string]any{}}, tok)
		}, false},
		{"400 invalid query", 400, "INVALID_QUERY", "BAD_REQUEST", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "POST", api+"/query", syntrixQuery{Collection: "c", Filters: []syntrixFilter{{Field: "a", Op: "invalid_op", Value: 1}}}, tok)
		}, false},
		{"400 invalid document field", 400, "BAD_REQUEST", "BAD_REQUEST", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "PUT", docs+"checked/1", map[string]any{"doc": map[string]any{"title": 5}}, tok)
		}, true},
		{"404", 404, "NOT_FOUND", "NOT_FOUND", func(t *testing.T, e *testEnv, tok string) *response {
			return e.sxDo(t, "GET", docs+"a/missing", nil, tok)
		}, false},
	}
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			t.Parallel()
			env := newSyntrixEnv(t, syntrixOpts{compat: compat, maxDocBytes: 2048, maxReqBytes: 64 << 10, writeCheck: checkTitle})
			var token string
			if compat {
				token = env.sxToken(t, "codes")
			} else {
				token = env.signup(t, "codes").Access
			}
			for _, rw := range rows {
				t.Run(rw.name, func(t *testing.T) {
					r := rw.send(t, env, token)
					sxWant(t, rw.name, r, rw.status)
					e := sxErr(t, r)
					loomCode, _ := e.Details["code"].(string)
					switch {
					case !compat:
						// Exactly Loom's README "Errors" shape.
						checkErrorShape(t, r)
						if e.Code != rw.loom || loomCode != "" || e.Errors != nil {
							t.Errorf("body %s: want code %s, no details.code, no errors", r.Body, rw.loom)
						}
					case rw.loom != rw.syntrix:
						if e.Code != rw.syntrix || loomCode != rw.loom {
							t.Errorf("body %s: want code %s with details.code %s", r.Body, rw.syntrix, rw.loom)
						}
					default:
						if e.Code != rw.syntrix || loomCode != "" {
							t.Errorf("body %s: want code %s and no details.code", r.Body, rw.syntrix)
						}
					}
					if wantList := compat && rw.wantList; wantList != (len(e.Errors) > 0) {
						t.Errorf("body %s: errors list present=%v, want %v", r.Body, len(e.Errors) > 0, wantList)
					} else if wantList && (e.Errors[0].Field != "title" || e.Errors[0].Message == "" || e.Errors[0].Message == e.Message) {
						t.Errorf("errors=%+v, want [{field: title, message}] (the field's own message, not the whole one)", e.Errors)
					}
				})
			}
		})
	}
}

// Under the switch, realtime error payloads carry the same names as REST
// (the WebSocket error message of sdk/syntrix-client-ts realtime.ts:
// payload.code, payload.message). RxDB replication keeps Loom's codes: its
// client keys on the status and on "error": true.
func TestSyntrixCompat_RealtimeAndRxDBCodes(t *testing.T) {
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			env := newSyntrixEnv(t, syntrixOpts{compat: compat})
			ws := env.dialWS(t, "", anon)
			ws.send("a1", "auth", map[string]any{"token": "invalid-token"})
			m := ws.expect("error")
			want, details := "UNAUTHENTICATED", ""
			if compat {
				// Syntrix's realtime protocol's own code, lower case
				// (TestSyntrixRealtime_NewestSDKRefreshesOnCode).
				want, details = "unauthorized", "UNAUTHENTICATED"
			}
			d, _ := m.Payload["details"].(map[string]any)
			if got, _ := d["code"].(string); m.str("code") != want || got != details || m.str("message") == "" {
				t.Errorf("ws error %s: want code %s, details.code %q", m, want, details)
			}

			r := env.sxDo(t, "POST", "/replication/rxdb/default/notes/0/pull", nil, "invalid-token")
			sxWant(t, "rxdb with a bad token", r, http.StatusUnauthorized)
			if e := sxErr(t, r); e.Code != "UNAUTHENTICATED" || e.Details["code"] != nil {
				t.Errorf("rxdb error %s: want Loom's UNAUTHENTICATED whatever the switch", r.Body)
			}
		})
	}
}

// The SDK's login, refresh and logout bodies
// (sdk/syntrix-client-ts/src/internal/auth/provider.ts @ 0ecdf490): login
// sends {username, password, database}; refresh and logout
// {refresh_token}. Under the switch unknown fields of any JSON type are
// ignored; known fields must still be strings and the body stays capped.
// Without it, "database" is refused as before.
func TestSyntrixCompat_SDKAuthBodies(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	env.sxToken(t, "sdkuser")

	r := env.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "sdkuser", "password": "password123456", "database": "default"}, "")
	sxWant(t, "SDK login", r, http.StatusOK)
	pair := sxObject(t, r)
	access, _ := pair["access_token"].(string)
	refresh, _ := pair["refresh_token"].(string)
	if access == "" || refresh == "" {
		t.Fatalf("login answer %s: want access_token and refresh_token", r.Body)
	}
	sxWant(t, "use the token", env.sxDo(t, "GET", docs+"a/missing", nil, access), http.StatusNotFound)

	r = env.sxDo(t, "POST", "/auth/v1/refresh", map[string]any{"refresh_token": refresh}, "")
	sxWant(t, "SDK refresh", r, http.StatusOK)
	next := sxObject(t, r)
	newRefresh, _ := next["refresh_token"].(string)
	if next["access_token"] == nil || newRefresh == "" {
		t.Fatalf("refresh answer %s", r.Body)
	}
	sxWant(t, "SDK logout", env.sxDo(t, "POST", "/auth/v1/logout", map[string]any{"refresh_token": newRefresh}, ""), http.StatusOK)
	r = env.sxDo(t, "POST", "/auth/v1/refresh", map[string]any{"refresh_token": newRefresh}, "")
	sxWant(t, "refresh after logout", r, http.StatusUnauthorized)
	if e := sxErr(t, r); e.Code != "UNAUTHORIZED" {
		t.Errorf("refresh after logout: code %s, want UNAUTHORIZED", e.Code)
	}

	// Unknown fields of every JSON type are ignored.
	r = env.sxDo(t, "POST", "/auth/v1/login", map[string]any{
		"username": "sdkuser", "password": "password123456",
		"database": "default", "n": 1, "b": true, "z": nil, "o": map[string]any{"x": []any{1}}, "l": []any{"a"},
	}, "")
	sxWant(t, "login with unknown fields of every type", r, http.StatusOK)
	// Known fields must still be strings, and present.
	r = env.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "sdkuser", "password": 123456789012, "database": "default"}, "")
	sxWant(t, "non-string password", r, http.StatusBadRequest)
	if e := sxErr(t, r); e.Code != "BAD_REQUEST" {
		t.Errorf("code=%s", e.Code)
	}
	sxWant(t, "missing password", env.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "sdkuser", "database": "default"}, ""), http.StatusBadRequest)
	// The 16 KiB cap holds, whatever the fields.
	r = env.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "sdkuser", "password": "password123456", "pad": strings.Repeat("x", 17<<10)}, "")
	sxWant(t, "oversized auth body", r, http.StatusRequestEntityTooLarge)
	if e := sxErr(t, r); e.Code != "REQUEST_TOO_LARGE" {
		t.Errorf("code=%s", e.Code)
	}

	// Without the switch the SDK's login is refused, naming the field.
	off := newSyntrixEnv(t, syntrixOpts{})
	off.signup(t, "sdkuser")
	r = off.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "sdkuser", "password": "correct horse battery", "database": "default"}, "")
	sxWant(t, "SDK login without the switch", r, http.StatusBadRequest)
	if e := sxErr(t, r); e.Code != "BAD_REQUEST" || !strings.Contains(e.Message, `"database"`) {
		t.Errorf("body %s: want BAD_REQUEST naming \"database\"", r.Body)
	}
}

// [auth] min_password_length = 8 accepts the 8-character passwords
// Syntrix accepts (and the message states the configured minimum); 7 is
// refused when the configuration loads; login is never affected.
func TestSyntrixCompat_MinPasswordLength(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{editAuth: func(c *auth.Config) { c.MinPasswordLength = 8 }})
	r := env.sxDo(t, "POST", "/auth/v1/signup", map[string]any{"username": "eight", "password": "12345678"}, "")
	sxWant(t, "8-character password", r, http.StatusOK)
	r = env.sxDo(t, "POST", "/auth/v1/signup", map[string]any{"username": "seven", "password": "1234567"}, "")
	sxWant(t, "7-character password", r, http.StatusBadRequest)
	if e := sxErr(t, r); !strings.Contains(e.Message, "at least 8 characters") {
		t.Errorf("message %q: want the configured minimum, 8", e.Message)
	}
	sxWant(t, "login", env.sxDo(t, "POST", "/auth/v1/login", map[string]any{"username": "eight", "password": "12345678"}, ""), http.StatusOK)

	// The default minimum is 10, and the message says so.
	def := newSyntrixEnv(t, syntrixOpts{})
	r = def.sxDo(t, "POST", "/auth/v1/signup", map[string]any{"username": "nine", "password": "123456789"}, "")
	sxWant(t, "9 characters under the default", r, http.StatusBadRequest)
	if e := sxErr(t, r); !strings.Contains(e.Message, "at least 10 characters") {
		t.Errorf("message %q: want the default minimum, 10", e.Message)
	}

	for _, n := range []string{"7", "73"} {
		file := filepath.Join(t.TempDir(), "loom.toml")
		if err := os.WriteFile(file, []byte("[auth]\nmin_password_length = "+n+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(config.Flags{Config: file}, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), "min_password_length") {
			t.Errorf("min_password_length = %s: err=%v, want a load error naming the key", n, err)
		}
	}
}

// X-Next-Cursor pages a query and a collection listing under the switch:
// every document once, the header absent on the last page; a missing limit
// is the maximum page (1000), where Loom's default is 100. Browsers can
// read the header (CORS Access-Control-Expose-Headers).
func TestSyntrixCompat_NextCursorPaging(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true, corsOrigins: []string{"http://app.example"}})
	token := env.sxToken(t, "pager")
	const n = 130
	var writes []string
	for i := range n {
		writes = append(writes, fmt.Sprintf(`{"type":"create","path":"items/i%03d","data":{"n":%d}}`, i, i))
	}
	env.MustDo(t, http.StatusOK, "POST", api+"/batch", `{"writes":[`+strings.Join(writes, ",")+`]}`)

	pageAll := func(t *testing.T, next func(cursor string) *response) {
		t.Helper()
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			r := next(cursor)
			sxWant(t, "page", r, http.StatusOK)
			pages++
			for _, d := range sxArray(t, r) {
				id, _ := d["id"].(string)
				if seen[id] {
					t.Fatalf("document %s came twice", id)
				}
				seen[id] = true
			}
			cursor = r.Header.Get("X-Next-Cursor")
			if cursor == "" {
				break
			}
			if pages > n {
				t.Fatal("paging does not end")
			}
		}
		if len(seen) != n || pages != 3 {
			t.Fatalf("saw %d documents in %d pages, want %d in 3", len(seen), pages, n)
		}
	}
	t.Run("query", func(t *testing.T) {
		pageAll(t, func(cursor string) *response {
			return env.sxDo(t, "POST", api+"/query", syntrixQuery{Collection: "items", Limit: 50, StartAfter: cursor}, token)
		})
	})
	t.Run("listing", func(t *testing.T) {
		pageAll(t, func(cursor string) *response {
			url := docs + "items?limit=50"
			if cursor != "" {
				url += "&startAfter=" + cursor
			}
			return env.sxDo(t, "GET", url, nil, token)
		})
	})
	t.Run("no limit is the maximum", func(t *testing.T) {
		for _, r := range []*response{
			env.sxDo(t, "POST", api+"/query", syntrixQuery{Collection: "items"}, token),
			env.sxDo(t, "GET", docs+"items", nil, token),
		} {
			sxWant(t, "unlimited", r, http.StatusOK)
			if got := len(sxArray(t, r)); got != n || r.Header.Get("X-Next-Cursor") != "" {
				t.Errorf("%d documents, X-Next-Cursor %q: want all %d in one page, no cursor", got, r.Header.Get("X-Next-Cursor"), n)
			}
		}
	})
	t.Run("CORS exposes the header", func(t *testing.T) {
		r := env.Do(t, "GET", docs+"items?limit=1", "", map[string]string{"Authorization": "Bearer " + token, "Origin": "http://app.example"})
		sxWant(t, "cors", r, http.StatusOK)
		if r.Header.Get("X-Next-Cursor") == "" || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "X-Next-Cursor") {
			t.Errorf("X-Next-Cursor %q, Access-Control-Expose-Headers %q", r.Header.Get("X-Next-Cursor"), r.Header.Get("Access-Control-Expose-Headers"))
		}
	})
}

// Without the switch nothing changes: {docs, nextCursor} with a default
// page of 100, 409 ALREADY_EXISTS, a PUT that creates answers 201 with
// Location, no X-Next-Cursor.
func TestSyntrixCompat_OffKeepsLoomFormats(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{})
	token := env.signup(t, "plain").Access
	var writes []string
	for i := range 120 {
		writes = append(writes, fmt.Sprintf(`{"type":"create","path":"items/i%03d","data":{"n":%d}}`, i, i))
	}
	env.MustDo(t, http.StatusOK, "POST", api+"/batch", `{"writes":[`+strings.Join(writes, ",")+`]}`)

	r := env.sxDo(t, "POST", api+"/query", syntrixQuery{Collection: "items"}, token)
	sxWant(t, "query", r, http.StatusOK)
	var page struct {
		Docs       []map[string]any `json:"docs"`
		NextCursor *string          `json:"nextCursor"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&page); err != nil || len(page.Docs) != 100 || page.NextCursor == nil || *page.NextCursor == "" {
		t.Fatalf("query answer: %d docs, nextCursor %v (%v); want {docs: 100, nextCursor}", len(page.Docs), page.NextCursor, err)
	}
	if r.Header.Get("X-Next-Cursor") != "" {
		t.Error("X-Next-Cursor without the switch")
	}
	var arr []map[string]any
	if json.Unmarshal(r.Body, &arr) == nil {
		t.Error("the answer decodes as an array without the switch")
	}

	r = env.sxDo(t, "PUT", docs+"fresh/1", map[string]any{"doc": map[string]any{"a": 1}}, token)
	sxWant(t, "PUT create", r, http.StatusCreated)
	if r.Header.Get("Location") == "" {
		t.Error("PUT create: no Location")
	}
	sxWant(t, "PUT replace", env.sxDo(t, "PUT", docs+"fresh/1", map[string]any{"doc": map[string]any{"a": 2}}, token), http.StatusOK)
	r = env.sxDo(t, "POST", docs+"fresh", map[string]any{"id": "1"}, token)
	sxWant(t, "duplicate", r, http.StatusConflict)
	if e := sxErr(t, r); e.Code != "ALREADY_EXISTS" || e.Details["code"] != nil {
		t.Errorf("duplicate: %s, want ALREADY_EXISTS without details.code", r.Body)
	}
	r = env.sxDo(t, "POST", "/auth/v1/signup", map[string]any{"tenant": "default", "username": "tenanted", "password": "password123456"}, "")
	sxWant(t, "signup with an unknown field", r, http.StatusBadRequest)
}

// Under the switch a PUT that creates answers 200 and still names the
// document (Location); replacing answers 200 as always.
func TestSyntrixCompat_PutCreateStatus(t *testing.T) {
	env := newSyntrixEnv(t, syntrixOpts{compat: true})
	token := env.sxToken(t, "putter")
	r := env.sxDo(t, "PUT", docs+"fresh/1", map[string]any{"doc": map[string]any{"a": 1}}, token)
	sxWant(t, "PUT create", r, http.StatusOK)
	if d := sxObject(t, r); d["id"] != "1" || d["a"] != float64(1) || r.Header.Get("Location") == "" {
		t.Errorf("PUT create: %s, Location %q", r.Body, r.Header.Get("Location"))
	}
	// The store holds it.
	d, err := env.Store.Get(context.Background(), "default", "fresh/1")
	if err != nil || d.Version != 1 {
		t.Fatalf("stored: %v %v", d, err)
	}
	sxWant(t, "PUT replace", env.sxDo(t, "PUT", docs+"fresh/1", map[string]any{"doc": map[string]any{"a": 2}}, token), http.StatusOK)
}
