package server_test

// Syntrix's TypeScript SDK's REST side against Loom (issue 16,
// docs/syntrix.md). sdkClient below does what the SDK does, request for
// request, and parses what it parses:
//
//   - RestTransport: sdk/syntrix-client-ts/src/internal/transport/rest-transport.ts,
//     the newest version in the search index (index id 39532937272; the
//     index gives no commit for it; the older @ a394804df923df3bbc0034bf5f6af2a7432618d8
//     had no database in the path). buildPath: a document path becomes
//     /api/v1/databases/{db}/documents/{path}, '/api/v1/query' becomes
//     /api/v1/databases/{db}/query. get: GET, the body is the document.
//     create: POST the raw data to the collection. set: PUT {doc, ifMatch?}.
//     update: PATCH {doc, ifMatch?}. delete: DELETE, with the body
//     {ifMatch} only when there are conditions. query: POST the query,
//     Array.isArray(data.docs) ? data.docs : data.
//   - DocumentReferenceImpl, QueryImpl, CollectionReferenceImpl:
//     sdk/syntrix-client-ts/src/api/reference.ts @ 68e4eb0ed85f4a9da383801c7c49026baf34bf65
//     (QueryImpl.get sends {collection, filters, orderBy, limit} and
//     JSON.stringify drops an undefined limit; QueryImpl.update/delete
//     query, then one PATCH {doc} / DELETE per document, at
//     `${path}/${doc.id}`; add reads result.id; doc() without an id is
//     crypto.randomUUID(); ifMatch(field, op, value) chains conditions).
//     The ifMatch shape is that of reference-cas.test.ts and
//     rest-transport-cas.test.ts (@ a394804d / 49c001be):
//     [{field: 'version', op: '==', value: 1}].
//   - the interceptor: sdk/syntrix-client-ts/src/internal/auth/interceptor.ts
//     @ b91620bd8aa8ee1857858b1a71f02ff2179eb148: Authorization: Bearer on
//     every request; a 401 or 403 refreshes once and retries; any other
//     error body with code/message/errors becomes SyntrixError.fromResponse
//     (sdk/syntrix-client-ts/src/api/errors.ts @ b91620bd: code, message,
//     errors, status).
//   - DefaultTokenProvider: sdk/syntrix-client-ts/src/internal/auth/provider.ts
//     @ 0ecdf49064154704d3d1b2dd3e939d5a983fb724 (login sends {username,
//     password, database}) and @ 469b04126fd81382b01d824680df69b9f2c32a05
//     (login sends {username, password}); refresh POSTs {refresh_token}
//     with plain axios (no Authorization) and keeps the new refresh_token.

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// sdkError is SyntrixError: what fromResponse keeps of an error answer.
type sdkError struct {
	Status  int
	Code    string
	Message string
	Errors  []map[string]any
}

func (e *sdkError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// isNotFoundError, isPermissionError, isAuthError of errors.ts.
func (e *sdkError) isNotFoundError() bool {
	return e.Code == "NOT_FOUND" || e.Code == "DATABASE_NOT_FOUND"
}

// sdkClient is SyntrixClient's REST side: an axios instance with the
// auth interceptor, the token provider and RestTransport.
type sdkClient struct {
	t         *testing.T
	env       *testEnv
	database  string
	token     string
	refresh   string
	refreshes int       // refreshToken() calls
	sent      []string  // "METHOD path" of every request, retries included
	last      *response // the last answer
}

func newSDK(t *testing.T, env *testEnv, database string) *sdkClient {
	return &sdkClient{t: t, env: env, database: database}
}

// raw is one axios request: JSON.stringify(data) with Content-Type when
// there is data, axios's default Accept, the Bearer token when there is one.
func (c *sdkClient) raw(method, path string, data any, token string) *response {
	c.t.Helper()
	var body io.Reader
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			c.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.env.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json, text/plain, */*")
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.env.Client.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sent = append(c.sent, method+" "+path)
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// fromResponse is SyntrixError.fromResponse.
func fromResponse(t *testing.T, r *response) *sdkError {
	t.Helper()
	var data struct {
		Code    string           `json:"code"`
		Message string           `json:"message"`
		Errors  []map[string]any `json:"errors"`
	}
	if err := json.Unmarshal(r.Body, &data); err != nil || (data.Code == "" && data.Message == "") {
		t.Fatalf("error answer %d %s: the SDK finds no code or message (%v)", r.Status, r.Body, err)
	}
	e := &sdkError{Status: r.Status, Code: data.Code, Message: data.Message, Errors: data.Errors}
	if e.Code == "" {
		e.Code = "UNKNOWN_ERROR"
	}
	return e
}

// do is a request through the interceptor: 2xx is the data; 401/403 are
// refreshed once and retried; any other error answer is a SyntrixError.
func (c *sdkClient) do(method, path string, data any) (*response, *sdkError) {
	c.t.Helper()
	r := c.raw(method, path, data, c.token)
	if r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden {
		tok, err := c.refreshToken()
		if err != nil {
			// "return Promise.reject(SyntrixError.fromResponse(401, {code:
			// 'UNAUTHORIZED', message: 'Authentication failed'}))"
			c.last = r
			return nil, &sdkError{Status: 401, Code: "UNAUTHORIZED", Message: "Authentication failed"}
		}
		r = c.raw(method, path, data, tok)
	}
	c.last = r
	if r.Status >= 200 && r.Status < 300 {
		return r, nil
	}
	return nil, fromResponse(c.t, r)
}

// refreshToken is DefaultTokenProvider.performRefresh.
func (c *sdkClient) refreshToken() (string, error) {
	c.t.Helper()
	c.refreshes++
	if c.refresh == "" {
		return "", fmt.Errorf("No refresh token available")
	}
	r := c.raw("POST", "/auth/v1/refresh", map[string]any{"refresh_token": c.refresh}, "")
	if r.Status != http.StatusOK {
		return "", fmt.Errorf("refresh: %d %s", r.Status, r.Body)
	}
	var pair struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	if err := json.Unmarshal(r.Body, &pair); err != nil || pair.Access == "" {
		// "Invalid refresh response: missing token"
		return "", fmt.Errorf("refresh answer %s", r.Body)
	}
	c.token = pair.Access
	if pair.Refresh != "" {
		c.refresh = pair.Refresh
	}
	return pair.Access, nil
}

// login is DefaultTokenProvider.login (plain axios). database "" is the
// provider @ 469b0412, or one built without a database (JSON.stringify
// drops the undefined field).
func (c *sdkClient) login(username, password, database string) *sdkError {
	c.t.Helper()
	body := map[string]any{"username": username, "password": password}
	if database != "" {
		body["database"] = database
	}
	r := c.raw("POST", "/auth/v1/login", body, "")
	if r.Status != http.StatusOK {
		return fromResponse(c.t, r)
	}
	var pair struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	if err := json.Unmarshal(r.Body, &pair); err != nil || pair.Access == "" || pair.Refresh == "" {
		c.t.Fatalf("login answer %s: no access_token/refresh_token", r.Body)
	}
	c.token, c.refresh = pair.Access, pair.Refresh
	return nil
}

// buildPath of RestTransport.
func (c *sdkClient) buildPath(path string) string {
	if path == "/api/v1/query" {
		return "/api/v1/databases/" + c.database + "/query"
	}
	return "/api/v1/databases/" + c.database + "/documents/" + strings.TrimPrefix(path, "/")
}

func (c *sdkClient) doc(r *response) map[string]any {
	c.t.Helper()
	var d map[string]any
	if err := json.Unmarshal(r.Body, &d); err != nil {
		c.t.Fatalf("document answer %s: %v", r.Body, err)
	}
	return d
}

// get is RestTransport.get (behind the interceptor).
func (c *sdkClient) get(path string) (map[string]any, *sdkError) {
	c.t.Helper()
	r, err := c.do("GET", c.buildPath(path), nil)
	if err != nil {
		return nil, err
	}
	return c.doc(r), nil
}

// add is CollectionReferenceImpl.add: create, then result.id.
func (c *sdkClient) add(collection string, data map[string]any) (string, *sdkError) {
	c.t.Helper()
	r, err := c.do("POST", c.buildPath(collection), data)
	if err != nil {
		return "", err
	}
	id, _ := c.doc(r)["id"].(string)
	if id == "" {
		c.t.Fatalf("add: %s: 'Server did not return an ID for the created document'", r.Body)
	}
	return id, nil
}

func wrapDoc(data any, ifMatch []map[string]any) map[string]any {
	payload := map[string]any{"doc": data}
	if len(ifMatch) > 0 {
		payload["ifMatch"] = ifMatch
	}
	return payload
}

// set is DocumentReferenceImpl.set → RestTransport.set.
func (c *sdkClient) set(path string, data map[string]any, ifMatch ...map[string]any) (map[string]any, *sdkError) {
	c.t.Helper()
	r, err := c.do("PUT", c.buildPath(path), wrapDoc(data, ifMatch))
	if err != nil {
		return nil, err
	}
	return c.doc(r), nil
}

// update is DocumentReferenceImpl.update → RestTransport.update.
func (c *sdkClient) update(path string, data map[string]any, ifMatch ...map[string]any) (map[string]any, *sdkError) {
	c.t.Helper()
	r, err := c.do("PATCH", c.buildPath(path), wrapDoc(data, ifMatch))
	if err != nil {
		return nil, err
	}
	return c.doc(r), nil
}

// del is DocumentReferenceImpl.delete → RestTransport.delete: axios sends
// config.data, {ifMatch}, only when there are conditions.
func (c *sdkClient) del(path string, ifMatch ...map[string]any) *sdkError {
	c.t.Helper()
	var body any
	if len(ifMatch) > 0 {
		body = map[string]any{"ifMatch": ifMatch}
	}
	_, err := c.do("DELETE", c.buildPath(path), body)
	return err
}

// sdkRefQuery is QueryImpl's state; limit 0 is "never called limit()".
type sdkRefQuery struct {
	path    string
	filters []map[string]any
	sort    []map[string]any
	limit   int
}

func (q sdkRefQuery) where(field, op string, value any) sdkRefQuery {
	q.filters = append(append([]map[string]any{}, q.filters...), map[string]any{"field": field, "op": op, "value": value})
	return q
}

func (q sdkRefQuery) orderBy(field, direction string) sdkRefQuery {
	q.sort = append(append([]map[string]any{}, q.sort...), map[string]any{"field": field, "direction": direction})
	return q
}

// get is QueryImpl.get → RestTransport.query('/api/v1/query', query).
func (c *sdkClient) query(q sdkRefQuery) ([]map[string]any, *sdkError) {
	c.t.Helper()
	body := map[string]any{"collection": q.path, "filters": q.filters, "orderBy": q.sort}
	if body["filters"] == nil {
		body["filters"] = []any{}
	}
	if body["orderBy"] == nil {
		body["orderBy"] = []any{}
	}
	if q.limit != 0 {
		body["limit"] = q.limit
	}
	r, err := c.do("POST", c.buildPath("/api/v1/query"), body)
	if err != nil {
		return nil, err
	}
	// if (response.data && Array.isArray(response.data.docs)) return
	// response.data.docs; return response.data;
	var data any
	if err := json.Unmarshal(r.Body, &data); err != nil {
		c.t.Fatalf("query answer %s: %v", r.Body, err)
	}
	if m, ok := data.(map[string]any); ok {
		if docs, ok := m["docs"].([]any); ok {
			data = docs
		}
	}
	list, ok := data.([]any)
	if !ok {
		c.t.Fatalf("query answer %s: the SDK returns it as is, not an array of documents", r.Body)
	}
	out := make([]map[string]any, 0, len(list))
	for _, d := range list {
		m, ok := d.(map[string]any)
		if !ok {
			c.t.Fatalf("query answer %s: not a document: %v", r.Body, d)
		}
		out = append(out, m)
	}
	return out, nil
}

// queryUpdate and queryDelete are QueryImpl.update / QueryImpl.delete:
// the query, then one request per document that has an id (the SDK sends
// them at once with Promise.all; one after the other here, which the
// server cannot tell apart for distinct documents).
func (c *sdkClient) queryUpdate(q sdkRefQuery, data map[string]any) *sdkError {
	c.t.Helper()
	docs, err := c.query(q)
	if err != nil {
		return err
	}
	for _, d := range docs {
		if id, _ := d["id"].(string); id != "" {
			if _, err := c.update(q.path+"/"+id, data); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *sdkClient) queryDelete(q sdkRefQuery) *sdkError {
	c.t.Helper()
	docs, err := c.query(q)
	if err != nil {
		return err
	}
	for _, d := range docs {
		if id, _ := d["id"].(string); id != "" {
			if err := c.del(q.path + "/" + id); err != nil {
				return err
			}
		}
	}
	return nil
}

// randomUUID is crypto.randomUUID(): a version 4 UUID, 36 characters.
func randomUUID(t *testing.T) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func versionIs(v int) map[string]any {
	return map[string]any{"field": "version", "op": "==", "value": v}
}

// TestSyntrixSDK_RestFlow is a typical app on the SDK, with and without
// [compat] syntrix: login, add, get, set and update with ifMatch (a failing
// one parsed by SyntrixError.fromResponse), queries with and without a
// limit, QueryImpl.update/delete, delete with an ifMatch body, a missing
// document, a document with a client-made UUID, and the interceptor's
// refresh on 401 and 403.
func TestSyntrixSDK_RestFlow(t *testing.T) {
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			t.Parallel()
			env := newSyntrixEnv(t, syntrixOpts{compat: compat})
			env.signup(t, "alice")
			sdk := newSDK(t, env, "default")

			// Login. The newer provider sends the client's database; Loom
			// accepts the extra field only under the switch. The older
			// provider (@ 469b0412) sends {username, password}: both modes.
			if compat {
				if err := sdk.login("alice", "correct horse battery", "default"); err != nil {
					t.Fatalf("SDK login with database: %v", err)
				}
			} else {
				if err := sdk.login("alice", "correct horse battery", "default"); err == nil || err.Status != http.StatusBadRequest || err.Code != "BAD_REQUEST" {
					t.Fatalf("SDK login with database without the switch: %v, want 400 BAD_REQUEST", err)
				}
				if err := sdk.login("alice", "correct horse battery", ""); err != nil {
					t.Fatalf("SDK login: %v", err)
				}
			}

			// client.doc('rooms/r1').collection('messages').add(...)
			messages := "rooms/r1" + "/" + "messages"
			id, err := sdk.add(messages, map[string]any{"text": "hello", "n": 1})
			if err != nil || sdk.last.Status != http.StatusCreated {
				t.Fatalf("add: %v (%d %s)", err, sdk.last.Status, sdk.last.Body)
			}
			ref := messages + "/" + id
			d, err := sdk.get(ref)
			if err != nil || d["id"] != id || d["text"] != "hello" || d["version"] != float64(1) || d["collection"] != messages {
				t.Fatalf("get: %v %v", d, err)
			}

			// set with ifMatch on the version (reference-cas.test.ts).
			d, err = sdk.set(ref, map[string]any{"text": "replaced", "n": 1}, versionIs(1))
			if err != nil || d["text"] != "replaced" || d["version"] != float64(2) {
				t.Fatalf("set with ifMatch version==1: %v %v", d, err)
			}
			// update with a stale condition: 412, parsed by fromResponse.
			_, err = sdk.update(ref, map[string]any{"text": "lost"}, versionIs(1))
			if err == nil || err.Status != http.StatusPreconditionFailed || err.Code != "PRECONDITION_FAILED" || err.Message == "" || err.isNotFoundError() {
				t.Fatalf("update with ifMatch version==1 at version 2: %v, want 412 PRECONDITION_FAILED", err)
			}
			// doc.ifMatch('version','==',2).ifMatch('text','==','replaced').update(...)
			d, err = sdk.update(ref, map[string]any{"seen": true}, versionIs(2), map[string]any{"field": "text", "op": "==", "value": "replaced"})
			if err != nil || d["version"] != float64(3) || d["seen"] != true || d["text"] != "replaced" {
				t.Fatalf("chained ifMatch update: %v %v", d, err)
			}

			for n := 2; n <= 4; n++ {
				if _, err := sdk.add(messages, map[string]any{"text": fmt.Sprintf("m%d", n), "n": n}); err != nil {
					t.Fatalf("add %d: %v", n, err)
				}
			}
			coll := sdkRefQuery{path: messages}
			// where + orderBy + limit.
			docs, err := sdk.query(coll.where("n", ">=", 2).orderBy("n", "desc").withLimit(2))
			if err != nil || len(docs) != 2 || docs[0]["n"] != float64(4) || docs[1]["n"] != float64(3) {
				t.Fatalf("query with limit 2: %v %v", docs, err)
			}
			if compat != (sdk.last.Body[0] == '[') {
				t.Errorf("query answer %s: bare array=%v, want %v", sdk.last.Body, sdk.last.Body[0] == '[', compat)
			}
			// No limit(): the body has no "limit" key.
			docs, err = sdk.query(coll)
			if err != nil || len(docs) != 4 {
				t.Fatalf("query without a limit: %d documents (%v), want 4", len(docs), err)
			}

			// QueryImpl.update: the query, then PATCH {doc} per document.
			before := len(sdk.sent)
			if err := sdk.queryUpdate(coll.where("n", ">=", 3), map[string]any{"flag": true}); err != nil {
				t.Fatalf("QueryImpl.update: %v", err)
			}
			if got := sdk.sent[before:]; len(got) != 3 || !strings.HasPrefix(got[1], "PATCH ") || !strings.HasPrefix(got[2], "PATCH ") {
				t.Fatalf("QueryImpl.update sent %v, want the query and two PATCHes", got)
			}
			if docs, _ := sdk.query(coll.where("flag", "==", true)); len(docs) != 2 {
				t.Fatalf("flagged: %v, want 2", docs)
			}

			// delete with an ifMatch body: a stale one 412, the current one 204.
			if err := sdk.del(ref, versionIs(1)); err == nil || err.Status != http.StatusPreconditionFailed || err.Code != "PRECONDITION_FAILED" {
				t.Fatalf("delete with a stale ifMatch: %v, want 412", err)
			}
			if err := sdk.del(ref, versionIs(3)); err != nil || sdk.last.Status != http.StatusNoContent {
				t.Fatalf("delete with ifMatch version==3: %v (%d)", err, sdk.last.Status)
			}
			// get of a missing document: 404. The interceptor turns the
			// answer into a SyntrixError before RestTransport.get sees it
			// (so get() throws a NOT_FOUND SyntrixError rather than
			// returning null, against Syntrix as against Loom).
			if d, err := sdk.get(ref); err == nil || err.Status != http.StatusNotFound || !err.isNotFoundError() {
				t.Fatalf("get of a deleted document: %v %v, want 404 NOT_FOUND", d, err)
			}
			if _, err := sdk.get(messages + "/never"); err == nil || !err.isNotFoundError() {
				t.Fatalf("get of a missing document: %v, want 404 NOT_FOUND", err)
			}

			// QueryImpl.delete: the query, then DELETE (no body) per document.
			if err := sdk.queryDelete(coll.where("flag", "==", true)); err != nil {
				t.Fatalf("QueryImpl.delete: %v", err)
			}
			if docs, err := sdk.query(coll); err != nil || len(docs) != 1 || docs[0]["n"] != float64(2) {
				t.Fatalf("after QueryImpl.delete: %v %v, want only m2", docs, err)
			}

			// collection('rooms').doc() with no id: a client-made UUID, then
			// set() creates it (PUT; 201 without the switch, 200 with it).
			uuid := randomUUID(t)
			d, err = sdk.set("rooms/"+uuid, map[string]any{"name": "lobby"})
			if err != nil || d["id"] != uuid || d["version"] != float64(1) {
				t.Fatalf("set of a new UUID document: %v %v", d, err)
			}
			if want := map[bool]int{false: http.StatusCreated, true: http.StatusOK}[compat]; sdk.last.Status != want {
				t.Errorf("PUT that creates: %d, want %d", sdk.last.Status, want)
			}
			if d, err := sdk.get("rooms/" + uuid); err != nil || d["name"] != "lobby" {
				t.Fatalf("get the UUID document: %v %v", d, err)
			}

			// The interceptor: a 401 refreshes once (POST /auth/v1/refresh
			// {refresh_token}) and the retry with the new token succeeds.
			sdk.token = tamper(sdk.token)
			before, refreshes := len(sdk.sent), sdk.refreshes
			if d, err := sdk.get("rooms/" + uuid); err != nil || d["name"] != "lobby" {
				t.Fatalf("get with a bad access token: %v %v, want refreshed and retried", d, err)
			}
			if got := sdk.sent[before:]; sdk.refreshes != refreshes+1 || len(got) != 3 || got[1] != "POST /auth/v1/refresh" {
				t.Fatalf("requests %v, %d refreshes: want GET, refresh, GET", got, sdk.refreshes-refreshes)
			}
			// A 403 refreshes too (the SDK cannot tell); the retry is
			// refused again and that answer is the SyntrixError.
			_, err = sdk.set("locked/x", map[string]any{"a": 1})
			wantCode := map[bool]string{false: "PERMISSION_DENIED", true: "FORBIDDEN"}[compat]
			if err == nil || err.Status != http.StatusForbidden || err.Code != wantCode || sdk.refreshes != refreshes+2 {
				t.Fatalf("403: %v after %d refreshes, want 403 %s after one more refresh", err, sdk.refreshes-refreshes, wantCode)
			}
			// The access token from the refresh works on its own.
			if r := sdk.raw("GET", sdk.buildPath("rooms/"+uuid), nil, sdk.token); r.Status != http.StatusOK {
				t.Fatalf("the refreshed access token: %d %s", r.Status, r.Body)
			}
			// A failed refresh ends in the interceptor's own 401 SyntrixError.
			sdk.token, sdk.refresh = tamper(sdk.token), "not-a-refresh-token"
			if _, err := sdk.get("rooms/" + uuid); err == nil || err.Status != http.StatusUnauthorized || err.Code != "UNAUTHORIZED" {
				t.Fatalf("bad token and bad refresh token: %v", err)
			}
		})
	}
}

func (q sdkRefQuery) withLimit(n int) sdkRefQuery { q.limit = n; return q }
