package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/server"
)

// newAuthEnv is a real server with user authentication on a real store and
// the given server config (default rules unless cfg.Rules is set).
func newAuthEnv(t *testing.T, cfg server.Config) *testEnv {
	t.Helper()
	return newAuthEnvWith(t, nil, cfg)
}

// newAuthEnvWith is newAuthEnv with an auth config to adjust.
func newAuthEnvWith(t testing.TB, edit func(*auth.Config), cfg server.Config) *testEnv {
	t.Helper()
	store := MustOpenStore(t)
	cfg.Auth = MustAuth(t, store, edit)
	return MustStartServer(t, store, cfg)
}

// MustAuth starts the auth service over store with the tests' signing
// secret and the cheapest bcrypt cost; edit (if not nil) adjusts the rest.
func MustAuth(t testing.TB, store collections.Store, edit func(*auth.Config)) *auth.Service {
	t.Helper()
	acfg := auth.Config{
		DB:         "default",
		Secret:     []byte("0123456789abcdef0123456789abcdef-test"),
		BcryptCost: bcrypt.MinCost,
	}
	if edit != nil {
		edit(&acfg)
	}
	svc, err := auth.New(context.Background(), store, acfg)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// user is one signed-up account.
type user struct {
	UID, Name       string
	Access, Refresh string
}

func (u user) h() map[string]string { return map[string]string{"Authorization": "Bearer " + u.Access} }

var anon = map[string]string{"Authorization": ""}

func (e *testEnv) signup(t *testing.T, name string) user {
	t.Helper()
	r := e.Do(t, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":%q,"password":"correct horse battery"}`, name), anon)
	if r.Status != http.StatusOK {
		t.Fatalf("signup %s: status=%d %s", name, r.Status, r.Body)
	}
	var tok struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
		Expires int    `json:"expires_in"`
	}
	if err := json.Unmarshal(r.Body, &tok); err != nil || tok.Access == "" || tok.Refresh == "" || tok.Expires <= 0 {
		t.Fatalf("signup %s: token pair %s (%v)", name, r.Body, err)
	}
	u := user{Name: name, Access: tok.Access, Refresh: tok.Refresh}
	me := e.Do(t, "GET", "/auth/v1/me", "", u.h())
	if me.Status != http.StatusOK {
		t.Fatalf("me: status=%d %s", me.Status, me.Body)
	}
	m := me.JSON(t)
	u.UID, _ = m["uid"].(string)
	if u.UID == "" || m["username"] != name {
		t.Fatalf("me=%s, want uid and username %q", me.Body, name)
	}
	return u
}

// wantStatus checks an answer's status and, for an error, the body README
// "Errors" promises: its shape, a code the status allows (wantError names
// the one code where a status allows several), Retry-After on 429 and 503,
// and WWW-Authenticate on 401.
func wantStatus(t *testing.T, what string, r *response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, want, r.Body)
	}
	if want < 400 {
		return
	}
	checkErrorShape(t, r)
	allowed, ok := errorCodes[want]
	if !ok {
		t.Fatalf("%s: status %d is not an error status of README \"Errors\"; body %s", what, want, r.Body)
	}
	if code := loomCode(r); !slices.Contains(allowed, code) {
		t.Fatalf("%s: %d with code %q, want %s; body %s", what, want, code, strings.Join(allowed, " or "), r.Body)
	}
	switch want {
	case http.StatusUnauthorized:
		if got := r.Header.Get("WWW-Authenticate"); got != `Bearer realm="loom"` {
			t.Errorf("%s: 401 with WWW-Authenticate %q, want Bearer realm=\"loom\"", what, got)
		}
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s: %d with Retry-After %q, want whole seconds ≥ 1", what, want, r.Header.Get("Retry-After"))
		}
	}
}

// errorCodes are the codes README "Errors" allows for each status.
var errorCodes = map[int][]string{
	http.StatusBadRequest:            {"BAD_REQUEST", "INVALID_PATH", "INVALID_QUERY", "INVALID_JSON"},
	http.StatusUnauthorized:          {"UNAUTHENTICATED"},
	http.StatusForbidden:             {"PERMISSION_DENIED"},
	http.StatusNotFound:              {"NOT_FOUND"},
	http.StatusMethodNotAllowed:      {"METHOD_NOT_ALLOWED"},
	http.StatusConflict:              {"ALREADY_EXISTS", "CONFLICT"},
	http.StatusPreconditionFailed:    {"PRECONDITION_FAILED"},
	http.StatusRequestEntityTooLarge: {"DOCUMENT_TOO_LARGE", "REQUEST_TOO_LARGE"},
	http.StatusTooManyRequests:       {"RATE_LIMITED"},
	http.StatusInternalServerError:   {"INTERNAL"},
	http.StatusNotImplemented:        {"NOT_IMPLEMENTED"},
	http.StatusServiceUnavailable:    {"UNAVAILABLE"},
}

// syntrixNames are the codes [compat] syntrix renames; Loom's own code is
// then in details.code (README "Errors").
var syntrixNames = map[string]bool{"UNAUTHORIZED": true, "FORBIDDEN": true, "CONFLICT": true, "BAD_REQUEST": true, "REQUEST_TOO_LARGE": true, "INTERNAL_ERROR": true}

// loomCode is an error body's code in Loom's names: under [compat]
// syntrix a renamed code carries Loom's in details.code.
func loomCode(r *response) string {
	var body struct {
		Code    string `json:"code"`
		Details struct {
			Code string `json:"code"`
		} `json:"details"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if syntrixNames[body.Code] && body.Details.Code != "" {
		return body.Details.Code
	}
	return body.Code
}

// wantError is wantStatus that also names the one code the answer must
// carry (in Loom's names).
func wantError(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	wantStatus(t, what, r, status)
	if got := loomCode(r); got != code {
		t.Fatalf("%s: code %q, want %s; body %s", what, got, code, r.Body)
	}
}

func TestSecurity_DefaultRules(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	own := api + "/documents/users/" + alice.UID + "/notes/n1"

	wantStatus(t, "owner create", env.Do(t, "PUT", own, `{"doc":{"text":"mine"}}`, alice.h()), http.StatusCreated)
	wantStatus(t, "owner get", env.Do(t, "GET", own, "", alice.h()), http.StatusOK)
	wantStatus(t, "owner patch", env.Do(t, "PATCH", own, `{"doc":{"n":1}}`, alice.h()), http.StatusOK)
	wantStatus(t, "owner get missing", env.Do(t, "GET", own+"x", "", alice.h()), http.StatusNotFound)

	head := env.Head(t)
	wantStatus(t, "other get", env.Do(t, "GET", own, "", bob.h()), http.StatusForbidden)
	wantStatus(t, "other get missing", env.Do(t, "GET", own+"x", "", bob.h()), http.StatusForbidden)
	wantStatus(t, "other replace", env.Do(t, "PUT", own, `{"doc":{"text":"theirs"}}`, bob.h()), http.StatusForbidden)
	wantStatus(t, "other patch", env.Do(t, "PATCH", own, `{"doc":{"text":"theirs"}}`, bob.h()), http.StatusForbidden)
	wantStatus(t, "other delete", env.Do(t, "DELETE", own, "", bob.h()), http.StatusForbidden)
	wantStatus(t, "other create", env.Do(t, "POST", api+"/documents/users/"+alice.UID+"/notes", `{"x":1}`, bob.h()), http.StatusForbidden)
	wantStatus(t, "anonymous get", env.Do(t, "GET", own, "", anon), http.StatusUnauthorized)
	wantStatus(t, "anonymous write", env.Do(t, "PUT", own, `{"doc":{}}`, anon), http.StatusUnauthorized)
	wantStatus(t, "outside users/", env.Do(t, "PUT", api+"/documents/rooms/r1", `{"doc":{}}`, alice.h()), http.StatusForbidden)
	wantStatus(t, "system collection", env.Do(t, "GET", api+"/documents/_users/"+alice.UID, "", alice.h()), http.StatusForbidden)
	if got := env.Head(t); got != head {
		t.Fatalf("denied writes changed the change log: head %d → %d", head, got)
	}
	if body := env.Do(t, "GET", own, "", alice.h()).JSON(t); body["text"] != "mine" || body["version"] != json.Number("2") {
		t.Fatalf("after denied writes: %v", body)
	}
	wantStatus(t, "admin bypass", env.Do(t, "GET", own, "", nil), http.StatusOK)

	wantStatus(t, "owner delete", env.Do(t, "DELETE", own, "", alice.h()), http.StatusNoContent)
	wantStatus(t, "bad token", env.Do(t, "GET", own, "", map[string]string{"Authorization": "Bearer " + alice.Access + "x"}), http.StatusUnauthorized)
	wantStatus(t, "refresh token as access token", env.Do(t, "GET", own, "", map[string]string{"Authorization": "Bearer " + alice.Refresh}), http.StatusUnauthorized)
}

func TestSecurity_QueriesAndLists(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	for i := 0; i < 5; i++ {
		for _, u := range []user{alice, bob} {
			wantStatus(t, "seed", env.Do(t, "PUT", fmt.Sprintf("%s/documents/users/%s/notes/n%d", api, u.UID, i), fmt.Sprintf(`{"doc":{"i":%d,"owner":%q}}`, i, u.Name), u.h()), http.StatusCreated)
		}
	}
	owners := func(r *response) []string {
		t.Helper()
		var out []string
		docs, _ := r.JSON(t)["docs"].([]any)
		for _, d := range docs {
			out = append(out, d.(map[string]any)["owner"].(string))
		}
		return out
	}

	r := env.Do(t, "POST", api+"/query", `{"collection":"users/*/notes","limit":3}`, alice.h())
	wantStatus(t, "collection-group query", r, http.StatusOK)
	if got := owners(r); len(got) != 3 || strings.Count(strings.Join(got, ","), "alice") != 3 {
		t.Fatalf("alice's group query returned owners %v, want 3 × alice (pages refilled past bob's documents)", got)
	}
	seen := 0
	cursor := ""
	for page := 0; page < 10; page++ {
		body := `{"collection":"users/*/notes","limit":2}`
		if cursor != "" {
			body = fmt.Sprintf(`{"collection":"users/*/notes","limit":2,"startAfter":%q}`, cursor)
		}
		r := env.Do(t, "POST", api+"/query", body, alice.h())
		wantStatus(t, "paged group query", r, http.StatusOK)
		for _, o := range owners(r) {
			if o != "alice" {
				t.Fatalf("alice saw a document of %s", o)
			}
			seen++
		}
		next, _ := r.JSON(t)["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if seen != 5 {
		t.Fatalf("paging alice's group query saw %d documents, want 5", seen)
	}

	wantStatus(t, "list someone else's collection", env.Do(t, "GET", api+"/documents/users/"+alice.UID+"/notes", "", bob.h()), http.StatusForbidden)
	wantStatus(t, "query where no rule could allow", env.Do(t, "POST", api+"/query", `{"collection":"rooms"}`, alice.h()), http.StatusForbidden)
	wantStatus(t, "anonymous query", env.Do(t, "POST", api+"/query", `{"collection":"users/*/notes"}`, anon), http.StatusUnauthorized)
	wantStatus(t, "anonymous query where no rule could allow", env.Do(t, "POST", api+"/query", `{"collection":"rooms"}`, anon), http.StatusUnauthorized)
	r = env.Do(t, "POST", api+"/query", `{"collection":"users/*/notes"}`, nil)
	wantStatus(t, "admin query", r, http.StatusOK)
	if got := owners(r); len(got) != 10 {
		t.Fatalf("admin saw %d documents, want 10", len(got))
	}
}

func TestSecurity_BatchChecksEveryWriteFirst(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	head := env.Head(t)
	body := fmt.Sprintf(`{"writes":[
		{"type":"create","path":"users/%s/a/1","data":{"x":1}},
		{"type":"create","path":"users/%s/a/1","data":{"x":1}}]}`, alice.UID, bob.UID)
	r := env.Do(t, "POST", api+"/batch", body, alice.h())
	wantStatus(t, "batch with one forbidden write", r, http.StatusForbidden)
	if d, _ := r.JSON(t)["details"].(map[string]any); d["index"] != json.Number("1") {
		t.Fatalf("details=%v, want index 1", d)
	}
	if got := env.Head(t); got != head {
		t.Fatalf("a denied batch changed the change log: head %d → %d", head, got)
	}
	wantStatus(t, "first write not applied", env.Do(t, "GET", api+"/documents/users/"+alice.UID+"/a/1", "", nil), http.StatusNotFound)

	body = fmt.Sprintf(`{"writes":[
		{"type":"create","path":"users/%s/a/1","data":{"x":1}},
		{"type":"update","path":"users/%s/a/1","data":{"y":2}}]}`, alice.UID, alice.UID)
	wantStatus(t, "allowed batch", env.Do(t, "POST", api+"/batch", body, alice.h()), http.StatusOK)
}

// TestSecurity_RulesSeeDocuments: conditions on resource.data and
// request.resource.data, and reload without restart.
func TestSecurity_RulesFileAndReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "security.toml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
[[rule]]
match = "boards/{board}/posts/{post}"
allow = ["read", "create"]
if    = "request.auth != null && (request.op != 'create' || request.resource.data.author == request.auth.uid)"

[[rule]]
match = "boards/{board}/posts/{post}"
allow = ["update"]
if    = "request.auth != null && resource.data.author == request.auth.uid && request.resource.data.author == resource.data.author && !('locked' in resource.data && resource.data.locked)"
`)
	env := newAuthEnv(t, server.Config{RulesFile: file})
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	post := api + "/documents/boards/b1/posts/p1"

	wantStatus(t, "create as someone else", env.Do(t, "PUT", post, fmt.Sprintf(`{"doc":{"author":%q}}`, bob.UID), alice.h()), http.StatusForbidden)
	wantStatus(t, "create as self", env.Do(t, "PUT", post, fmt.Sprintf(`{"doc":{"author":%q,"text":"hi"}}`, alice.UID), alice.h()), http.StatusCreated)
	wantStatus(t, "read by another user", env.Do(t, "GET", post, "", bob.h()), http.StatusOK)
	wantStatus(t, "update by another user", env.Do(t, "PATCH", post, `{"doc":{"text":"x"}}`, bob.h()), http.StatusForbidden)
	wantStatus(t, "update that changes the author", env.Do(t, "PATCH", post, fmt.Sprintf(`{"doc":{"author":%q}}`, bob.UID), alice.h()), http.StatusForbidden)
	wantStatus(t, "owner update", env.Do(t, "PATCH", post, `{"doc":{"text":"edited"}}`, alice.h()), http.StatusOK)
	wantStatus(t, "delete (not allowed by any rule)", env.Do(t, "DELETE", post, "", alice.h()), http.StatusForbidden)
	env.MustDo(t, http.StatusOK, "PATCH", post, `{"doc":{"locked":true}}`)
	wantStatus(t, "update of a locked post", env.Do(t, "PATCH", post, `{"doc":{"text":"again"}}`, alice.h()), http.StatusForbidden)

	write(`[[rule]]
match = "boards/{board}/posts/{post}"
allow = ["read"]
if    = "request.auth.uid ==="
`)
	r := env.Do(t, "POST", "/admin/v1/rules/reload", "", nil)
	wantError(t, "reload of a bad file", r, http.StatusBadRequest, "BAD_REQUEST")
	if msg, _ := r.JSON(t)["message"].(string); !strings.Contains(msg, "rule 1") {
		t.Errorf("bad-file message %q does not name the rule", msg)
	}
	wantStatus(t, "old rules stay after a bad reload", env.Do(t, "GET", post, "", bob.h()), http.StatusOK)
	wantStatus(t, "reload by a non-admin", env.Do(t, "POST", "/admin/v1/rules/reload", "", alice.h()), http.StatusForbidden)

	write(`[[rule]]
match = "boards/{board}/posts/{post}"
allow = ["read"]
if    = "false"
`)
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	wantStatus(t, "read after reload", env.Do(t, "GET", post, "", bob.h()), http.StatusForbidden)
}

// TestSecurity_ConcurrentWritesCannotSlipPastRules: a rule that depends on
// the stored document holds even when the document changes between the
// rules check and the commit (access pins each write to the version its
// rules saw).
//
// The rule allows only +1 steps below 20. In every round all writers read
// the same n and send n+1 at once; half of them also send If-Match with
// the version they read, half rely on the rules alone. Exactly one write
// per round may be accepted: once it commits, every other write of the
// round either fails its pin and is re-evaluated (denied: n moved) or is
// checked after it (denied). Without the pin, two writers of a round that
// both passed the check before either committed are both accepted: the
// final n is still 20, but more than 20 writes went through and the
// version counts them.
func TestSecurity_ConcurrentWritesCannotSlipPastRules(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "security.toml")
	if err := os.WriteFile(file, []byte(`
[[rule]]
match = "counters/{c}"
allow = ["read"]
if    = "request.auth != null"

[[rule]]
match = "counters/{c}"
allow = ["update"]
if    = "request.auth != null && resource.data.n < 20 && request.resource.data.n == resource.data.n + 1"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RulesFile: file})
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	u := env.signup(t, "carol")
	const doc = api + "/documents/counters/c1"
	env.MustDo(t, http.StatusCreated, "PUT", doc, `{"doc":{"n":0}}`)

	const writers = 8
	type answer struct {
		ifMatch bool
		status  int
		body    map[string]any
		err     error
	}
	accepted := 0
	for round := 0; ; round++ {
		if round > 25 {
			t.Fatalf("%d rounds without reaching n=20 (%d writes accepted)", round, accepted)
		}
		cur := env.Do(t, "GET", doc, "", u.h())
		wantStatus(t, "read the counter", cur, http.StatusOK)
		m := cur.JSON(t)
		n, _ := m["n"].(json.Number).Int64()
		version, _ := m["version"].(json.Number).Int64()
		if version != n+1 {
			t.Fatalf("round %d: n=%d at version %d, want version n+1: a write that did not step n by one was accepted", round, n, version)
		}
		if n > 20 {
			t.Fatalf("round %d: n=%d, past the rules' bound 20", round, n)
		}

		start := make(chan struct{})
		answers := make(chan answer, writers)
		for w := 0; w < writers; w++ {
			go func(ifMatch bool) {
				h := u.h()
				if ifMatch {
					h = map[string]string{"Authorization": h["Authorization"], "If-Match": fmt.Sprintf(`"%d"`, version)}
				}
				<-start
				r, err := trySend(env, "PATCH", doc, fmt.Sprintf(`{"doc":{"n":%d}}`, n+1), h)
				a := answer{ifMatch: ifMatch, err: err}
				if err == nil {
					a.status = r.Status
					a.body, a.err = collections.DecodeObject(r.Body)
				}
				answers <- a
			}(w%2 == 0)
		}
		close(start)
		won := 0
		for w := 0; w < writers; w++ {
			a := <-answers
			switch {
			case a.err != nil:
				t.Fatalf("round %d: PATCH: %v", round, a.err)
			case a.status == http.StatusOK:
				won++
				if a.body["n"] != json.Number(fmt.Sprint(n+1)) || a.body["version"] != json.Number(fmt.Sprint(version+1)) {
					t.Errorf("round %d: accepted write answered %v, want n=%d at version %d", round, a.body, n+1, version+1)
				}
			case a.status == http.StatusForbidden && a.body["code"] == "PERMISSION_DENIED":
			case a.status == http.StatusPreconditionFailed && a.ifMatch && a.body["code"] == "PRECONDITION_FAILED":
				// The caller's own If-Match (not the pin) failed: the
				// rules allowed it, so its current document is shown.
				if d, _ := a.body["details"].(map[string]any); d == nil || d["current"] == nil {
					t.Errorf("round %d: 412 without details.current: %v", round, a.body)
				}
			default:
				t.Errorf("round %d: PATCH (If-Match: %v) answered %d %v, want 200, 403 PERMISSION_DENIED or (with If-Match) 412 PRECONDITION_FAILED", round, a.ifMatch, a.status, a.body)
			}
		}
		accepted += won
		if n == 20 {
			if won != 0 {
				t.Fatalf("round %d: %d writes accepted at n=20, want none", round, won)
			}
			break
		}
		if won != 1 {
			t.Fatalf("round %d: %d of %d concurrent writes of n=%d→%d accepted, want exactly 1: a write slipped past the rules between their check and its commit", round, won, writers, n, n+1)
		}
	}
	final := env.Do(t, "GET", doc, "", nil).JSON(t)
	if accepted != 20 || final["n"] != json.Number("20") || final["version"] != json.Number("21") {
		t.Fatalf("accepted %d writes, counter %v: want exactly 20 accepted, n=20 at version 21", accepted, final)
	}
}

// setHeaders sets each of h on req; an empty value removes the header (as
// the Authorization a test request carries by default).
func setHeaders(req *http.Request, h map[string]string) {
	for k, v := range h {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
}

// trySend is env.Do for goroutines other than the test's: it returns the
// error instead of failing the test.
func trySend(env *testEnv, method, url, body string, headers map[string]string) (*response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, env.URL+url, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	setHeaders(req, headers)
	res, err := env.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

func TestAuthAPI(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")

	wantError(t, "duplicate signup", env.Do(t, "POST", "/auth/v1/signup", `{"username":"ALICE","password":"another long one"}`, anon), http.StatusConflict, "ALREADY_EXISTS")
	wantError(t, "weak password", env.Do(t, "POST", "/auth/v1/signup", `{"username":"dave","password":"short"}`, anon), http.StatusBadRequest, "BAD_REQUEST")
	wantError(t, "bad username", env.Do(t, "POST", "/auth/v1/signup", `{"username":"a b","password":"long enough pw"}`, anon), http.StatusBadRequest, "BAD_REQUEST")
	wantError(t, "unknown field", env.Do(t, "POST", "/auth/v1/signup", `{"username":"dave","password":"long enough pw","admin":true}`, anon), http.StatusBadRequest, "BAD_REQUEST")
	wantError(t, "not JSON", env.Do(t, "POST", "/auth/v1/login", `{"username":`, anon), http.StatusBadRequest, "INVALID_JSON")
	wrong := env.Do(t, "POST", "/auth/v1/login", `{"username":"alice","password":"wrong password!"}`, anon)
	unknown := env.Do(t, "POST", "/auth/v1/login", `{"username":"nobody","password":"wrong password!"}`, anon)
	wantStatus(t, "wrong password", wrong, http.StatusUnauthorized)
	wantStatus(t, "unknown user", unknown, http.StatusUnauthorized)
	if wrong.JSON(t)["message"] != unknown.JSON(t)["message"] {
		t.Errorf("login errors differ for unknown user and wrong password: %s vs %s", wrong.Body, unknown.Body)
	}
	wantStatus(t, "login", env.Do(t, "POST", "/auth/v1/login", `{"username":"alice","password":"correct horse battery"}`, anon), http.StatusOK)

	r := env.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, alice.Refresh), anon)
	wantStatus(t, "refresh", r, http.StatusOK)
	next, _ := r.JSON(t)["refresh_token"].(string)
	wantStatus(t, "second use of a refresh token", env.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, alice.Refresh), anon), http.StatusUnauthorized)
	wantStatus(t, "access token as refresh token", env.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, alice.Access), anon), http.StatusUnauthorized)
	wantStatus(t, "logout", env.Do(t, "POST", "/auth/v1/logout", fmt.Sprintf(`{"refresh_token":%q}`, next), anon), http.StatusOK)
	wantStatus(t, "refresh after logout", env.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, next), anon), http.StatusUnauthorized)

	wantStatus(t, "me anonymous", env.Do(t, "GET", "/auth/v1/me", "", anon), http.StatusUnauthorized)
	if me := env.Do(t, "GET", "/auth/v1/me", "", nil).JSON(t); me["username"] != "admin" {
		t.Errorf("me with the admin key=%v", me)
	}
}

func TestAuthAPI_ConcurrentRefreshOneWinner(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	u := env.signup(t, "erin")
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := env.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, u.Refresh), anon)
			if r.Status == http.StatusOK {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent refreshes of one token succeeded, want exactly 1", wins)
	}
}

func TestAuthAPI_Disabled(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	wantStatus(t, "signup without auth", env.Do(t, "POST", "/auth/v1/signup", `{"username":"alice","password":"correct horse battery"}`, anon), http.StatusNotFound)
}

func TestServiceKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "security.toml")
	if err := os.WriteFile(file, []byte(`
[[rule]]
match = "{path=**}"
allow = ["read", "write"]
if    = "request.auth != null && 'service' in request.auth.roles"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RulesFile: file})
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	alice := env.signup(t, "alice")

	wantStatus(t, "create key as a user", env.Do(t, "POST", "/admin/v1/keys", `{"name":"hooks"}`, alice.h()), http.StatusForbidden)
	wantError(t, "create key with a bad field", env.Do(t, "POST", "/admin/v1/keys", `{"name":"hooks","admin":true}`, nil), http.StatusBadRequest, "BAD_REQUEST")
	r := env.Do(t, "POST", "/admin/v1/keys", `{"name":"hooks"}`, nil)
	wantStatus(t, "create key", r, http.StatusCreated)
	key, _ := r.JSON(t)["key"].(string)
	if key == "" {
		t.Fatalf("no key in %s", r.Body)
	}
	wantError(t, "duplicate key name", env.Do(t, "POST", "/admin/v1/keys", `{"name":"hooks"}`, nil), http.StatusConflict, "ALREADY_EXISTS")

	svc := map[string]string{"X-API-Key": key}
	wantStatus(t, "service write", env.Do(t, "PUT", api+"/documents/jobs/j1", `{"doc":{"n":1}}`, svc), http.StatusCreated)
	me := env.Do(t, "GET", "/auth/v1/me", "", svc).JSON(t)
	if roles, _ := me["roles"].([]any); len(roles) != 1 || roles[0] != "service" {
		t.Errorf("me for a service key=%v, want roles [service]", me)
	}
	wantStatus(t, "user write under the service-only rules", env.Do(t, "PUT", api+"/documents/jobs/j2", `{"doc":{}}`, alice.h()), http.StatusForbidden)

	wantStatus(t, "revoke", env.Do(t, "DELETE", "/admin/v1/keys/hooks", "", nil), http.StatusNoContent)
	wantStatus(t, "revoked key", env.Do(t, "GET", api+"/documents/jobs/j1", "", svc), http.StatusUnauthorized)
	wantStatus(t, "revoke unknown", env.Do(t, "DELETE", "/admin/v1/keys/hooks", "", nil), http.StatusNotFound)
}

func TestAuthAPI_LoginBruteForceLimited(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	env.signup(t, "frank")
	var last *response
	for i := 0; i < 30; i++ {
		last = env.Do(t, "POST", "/auth/v1/login", `{"username":"frank","password":"not the password"}`, anon)
		if last.Status == http.StatusTooManyRequests {
			break
		}
		wantStatus(t, "failed login", last, http.StatusUnauthorized)
	}
	wantStatus(t, "login after many failures", last, http.StatusTooManyRequests)
	if last.JSON(t)["code"] != "RATE_LIMITED" || last.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without RATE_LIMITED code or Retry-After: %v %s", last.Header, last.Body)
	}
	// Even the right password is refused while limited: guessing gains nothing.
	wantStatus(t, "right password while limited", env.Do(t, "POST", "/auth/v1/login", `{"username":"frank","password":"correct horse battery"}`, anon), http.StatusTooManyRequests)
}
