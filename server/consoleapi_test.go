package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/server"
)

// testConsoleFS is a built console as Config.Console sees it.
func testConsoleFS() fstest.MapFS {
	return fstest.MapFS{
		"index.html":               {Data: []byte(`<!doctype html><script type="module" src="app.0123abcd.js"></script>`)},
		"app.0123abcd.js":          {Data: []byte(`console.log("loom")`)},
		"app.89abcdef01.css":       {Data: []byte(`body{margin:0}`)},
		"favicon.svg":              {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
		"assets/logo.png":          {Data: []byte("\x89PNG\r\n\x1a\n")},
		"app.notahash.js":          {Data: []byte(`1`)},
		"assets/fonts/inter.woff2": {Data: []byte("wOF2")},
	}
}

// newConsoleEnv is a server with auth and the console on.
func newConsoleEnv(t *testing.T, edit func(*auth.Config), cfg server.Config) *testEnv {
	t.Helper()
	if cfg.Console == nil {
		cfg.Console = testConsoleFS()
	}
	return newAuthEnvWith(t, edit, cfg)
}

// consoleAnswer is a sign-in or refresh answer: status, body, and the
// loom_console cookie it set (nil: none).
type consoleAnswer struct {
	*response
	Cookie *http.Cookie
	Body   map[string]any
}

// consoleCSRFHeaders are what the page sends on refresh and logout.
var consoleCSRFHeaders = map[string]string{"Authorization": "", "X-Loom-Console": "1"}

// consoleDo sends one request to the console session API without the
// admin key, with cookie (if not "") as loom_console and the headers.
func (e *testEnv) consoleDo(t *testing.T, path, body, cookie string, headers map[string]string) consoleAnswer {
	t.Helper()
	h := map[string]string{"Authorization": ""}
	for k, v := range headers {
		h[k] = v
	}
	if cookie != "" {
		h["Cookie"] = "loom_console=" + cookie
	}
	r := e.Do(t, "POST", "/admin/v1/console/"+path, body, h)
	a := consoleAnswer{response: r}
	for _, line := range r.Header.Values("Set-Cookie") {
		ck, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("Set-Cookie %q: %v", line, err)
		}
		if ck.Name == "loom_console" {
			if a.Cookie != nil {
				t.Fatalf("two loom_console cookies set: %q", r.Header.Values("Set-Cookie"))
			}
			a.Cookie = ck
		}
	}
	if len(r.Body) > 0 && r.Body[0] == '{' {
		a.Body = r.JSON(t)
	}
	return a
}

func (e *testEnv) consoleSignIn(t *testing.T, body string) consoleAnswer {
	t.Helper()
	return e.consoleDo(t, "session", body, "", nil)
}

// mustConsoleSession signs in and checks the answer's shape; it returns
// the access token and the cookie value.
func (e *testEnv) mustConsoleSession(t *testing.T, body string) (token, cookie string) {
	t.Helper()
	a := e.consoleSignIn(t, body)
	if a.Status != http.StatusOK {
		t.Fatalf("sign in %s: status=%d %s", body, a.Status, a.response.Body)
	}
	checkConsoleGrant(t, a)
	return a.Body["access_token"].(string), a.Cookie.Value
}

// checkConsoleGrant checks a 200 sign-in or rotating refresh.
func checkConsoleGrant(t *testing.T, a consoleAnswer) {
	t.Helper()
	if tok, _ := a.Body["access_token"].(string); tok == "" {
		t.Fatalf("no access_token: %s", a.response.Body)
	}
	if n, _ := a.Body["expires_in"].(json.Number).Int64(); n <= 0 {
		t.Errorf("expires_in=%v, want seconds", a.Body["expires_in"])
	}
	if _, ok := a.Body["roles"].([]any); !ok {
		t.Errorf("roles is not a list: %s", a.response.Body)
	}
	if got := a.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control=%q, want no-store", got)
	}
	ck := a.Cookie
	if ck == nil || !strings.HasPrefix(ck.Value, auth.ConsoleCookiePrefix) || len(ck.Value) != auth.ConsoleCookieLength {
		t.Fatalf("cookie %+v, want a loom_console session value", ck)
	}
	if ck.Path != "/admin/v1/console" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure {
		t.Errorf("cookie attributes %+v: want Path=/admin/v1/console HttpOnly SameSite=Strict, not Secure over plain HTTP", ck)
	}
	if ck.MaxAge < int((8*time.Hour-time.Minute)/time.Second) || ck.MaxAge > int(8*time.Hour/time.Second) {
		t.Errorf("cookie Max-Age=%d, want about 8h", ck.MaxAge)
	}
}

// wantCleared checks a refusal that clears the cookie.
func wantCleared(t *testing.T, what string, a consoleAnswer, status int) {
	t.Helper()
	wantStatus(t, what, a.response, status)
	if a.Cookie == nil || a.Cookie.MaxAge != -1 || a.Cookie.Value != "" || a.Cookie.Path != "/admin/v1/console" {
		t.Errorf("%s: cookie %+v, want it cleared (Max-Age=0)", what, a.Cookie)
	}
}

// setRoles gives the user the roles, with the admin key.
func (e *testEnv) setRoles(t *testing.T, uid string, roles ...string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"roles": roles})
	e.MustDo(t, http.StatusOK, "PUT", "/admin/v1/users/"+uid+"/roles", string(b))
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestConsole_AdminKeySession(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	a := env.consoleSignIn(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	wantStatus(t, "sign in", a.response, http.StatusOK)
	checkConsoleGrant(t, a)
	if a.Body["expires_in"] != json.Number("600") || a.Body["username"] != "admin" || fmt.Sprint(a.Body["roles"]) != "[admin]" {
		t.Errorf("sign-in answer %s, want expires_in 600, username admin, roles [admin]", a.response.Body)
	}
	tok, cookie := a.Body["access_token"].(string), a.Cookie.Value

	// The token is an admin token: the admin API, documents, /auth/v1/me.
	wantStatus(t, "users with the console token", env.Do(t, "GET", "/admin/v1/users", "", bearer(tok)), http.StatusOK)
	wantStatus(t, "write with the console token", env.Do(t, "PUT", api+"/documents/rooms/r1", `{"doc":{"name":"x"}}`, bearer(tok)), http.StatusCreated)
	me := env.Do(t, "GET", "/auth/v1/me", "", bearer(tok)).JSON(t)
	if me["uid"] != "" || me["username"] != "admin" {
		t.Errorf("me=%v, want the admin key's identity (no uid)", me)
	}

	// Refresh rotates the cookie and mints a token that works too.
	r := env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh", r.response, http.StatusOK)
	checkConsoleGrant(t, r)
	if r.Cookie.Value == cookie {
		t.Fatal("refresh kept the cookie value; it must rotate")
	}
	if r.Body["username"] != "admin" {
		t.Errorf("refresh answer %v", r.Body)
	}
	tok2 := r.Body["access_token"].(string)
	wantStatus(t, "users with the refreshed token", env.Do(t, "GET", "/admin/v1/users", "", bearer(tok2)), http.StatusOK)

	// Another tab refreshing with the replaced value at the same moment
	// gets a token and keeps the browser's (new) cookie.
	late := env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh with the replaced value within the grace", late.response, http.StatusOK)
	if late.Cookie != nil || late.Body["access_token"] == "" {
		t.Errorf("grace refresh: cookie %+v body %s, want a token and no Set-Cookie", late.Cookie, late.response.Body)
	}

	// Logout ends it; the next refresh is 401 and clears the cookie.
	l := env.consoleDo(t, "logout", "", r.Cookie.Value, consoleCSRFHeaders)
	wantCleared(t, "logout", l, http.StatusNoContent)
	wantCleared(t, "refresh after logout", env.consoleDo(t, "refresh", "", r.Cookie.Value, consoleCSRFHeaders), http.StatusUnauthorized)
}

func TestConsole_UserSession(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	alice := env.signup(t, "alice")
	body := `{"username":"alice","password":"correct horse battery"}`

	a := env.consoleSignIn(t, body)
	wantStatus(t, "a user without admin", a.response, http.StatusForbidden)
	if msg, _ := a.Body["message"].(string); !strings.Contains(msg, "admin role") || a.Cookie != nil {
		t.Errorf("refusal %s cookie %v", a.response.Body, a.Cookie)
	}

	env.setRoles(t, alice.UID, "user", "admin")
	tok, cookie := env.mustConsoleSession(t, body)
	me := env.Do(t, "GET", "/auth/v1/me", "", bearer(tok)).JSON(t)
	if me["uid"] != alice.UID || me["username"] != "alice" {
		t.Errorf("me=%v, want alice", me)
	}
	wantStatus(t, "admin API with alice's console token", env.Do(t, "GET", "/admin/v1/keys", "", bearer(tok)), http.StatusOK)

	r := env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh", r.response, http.StatusOK)
	cookie = r.Cookie.Value

	// Losing the admin role ends the session (the roles PUT revokes it).
	env.setRoles(t, alice.UID, "user")
	if rows := env.consoleRows(t); len(rows) != 0 {
		t.Errorf("the roles PUT left %d console sessions", len(rows))
	}
	wantCleared(t, "refresh after the role was taken", env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders), http.StatusUnauthorized)
}

func TestConsole_WrongCredentials(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	for _, body := range []string{`{"adminKey":"nope"}`, `{"username":"nobody","password":"correct horse battery"}`} {
		a := env.consoleSignIn(t, body)
		wantStatus(t, body, a.response, http.StatusUnauthorized)
		if a.Cookie != nil {
			t.Errorf("%s: a cookie was set: %+v", body, a.Cookie)
		}
	}
}

func TestConsole_CSRF(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	_, cookie := env.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	for name, h := range map[string]map[string]string{
		"no header":    {},
		"header 0":     {"X-Loom-Console": "0"},
		"cross origin": {"X-Loom-Console": "1", "Origin": "https://evil.example"},
		"null origin":  {"X-Loom-Console": "1", "Origin": "null"},
	} {
		for _, path := range []string{"refresh", "logout"} {
			a := env.consoleDo(t, path, "", cookie, h)
			wantStatus(t, name+" "+path, a.response, http.StatusForbidden)
			if a.Cookie != nil {
				t.Errorf("%s %s touched the cookie: %+v", name, path, a.Cookie)
			}
		}
	}
	// The refused requests left the session as it was: the same value
	// still refreshes, from the server's own origin.
	same := map[string]string{"X-Loom-Console": "1", "Origin": env.URL}
	wantStatus(t, "same-origin refresh", env.consoleDo(t, "refresh", "", cookie, same).response, http.StatusOK)
}

// consoleRows are the stored console sessions: path → version.
func (e *testEnv) consoleRows(t *testing.T) map[string]int64 {
	t.Helper()
	q := collections.Query{Collection: "_console_sessions", Limit: collections.MaxLimit}
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	res, err := e.Store.Query(context.Background(), "default", q)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64, len(res.Docs))
	for _, d := range res.Docs {
		out[d.Path] = d.Version
	}
	return out
}

// The admin-key session's token is the admin wherever the admin key is:
// query cursors sealed for it keep working across refreshes (and with the
// key itself), realtime over WebSocket and SSE, /metrics behind the key.
func TestConsole_AdminTokenEverywhere(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{MetricsRequireKey: true})
	for _, id := range []string{"r1", "r2", "r3"} {
		env.MustDo(t, http.StatusCreated, "PUT", api+"/documents/rooms/"+id, `{"doc":{"n":1}}`)
	}
	tok, cookie := env.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))

	page1 := env.Do(t, "GET", api+"/documents/rooms?limit=1", "", bearer(tok))
	wantStatus(t, "page 1", page1, http.StatusOK)
	next := cursor(t, page1)
	if next == "" {
		t.Fatal("no nextCursor")
	}
	r := env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh", r.response, http.StatusOK)
	tok2 := r.Body["access_token"].(string)
	page2 := env.Do(t, "GET", api+"/documents/rooms?limit=1&startAfter="+url.QueryEscape(next), "", bearer(tok2))
	wantStatus(t, "page 2 with the refreshed token", page2, http.StatusOK)
	if ids := ids(t, page2); len(ids) != 1 || ids[0] != "r2" {
		t.Errorf("page 2 = %v, want r2", ids)
	}
	wantStatus(t, "page 2 with the admin key", env.Do(t, "GET", api+"/documents/rooms?limit=1&startAfter="+url.QueryEscape(next), "", nil), http.StatusOK)

	// WebSocket: auth with the token, subscribe, re-auth with the
	// refreshed one: the subscription lives on.
	w := env.dialWS(t, "", map[string]string{"Authorization": ""})
	w.send("a1", "auth", map[string]any{"token": tok})
	w.expect("auth_ack")
	w.subscribe("s1", map[string]any{"query": q("rooms")})
	w.send("a2", "auth", map[string]any{"token": tok2})
	w.expect("auth_ack")
	env.MustDo(t, http.StatusCreated, "PUT", api+"/documents/rooms/r4", `{"doc":{"n":4}}`)
	wantEventAfterReauth(w, "r4")

	// SSE with ?access_token= (openSSE fails unless it is 200).
	env.openSSE(t, "collection=rooms&access_token="+url.QueryEscape(tok2), map[string]string{"Authorization": ""})

	wantStatus(t, "metrics with the console token", env.Do(t, "GET", "/metrics", "", bearer(tok2)), http.StatusOK)
	wantStatus(t, "metrics without", env.Do(t, "GET", "/metrics", "", anon), http.StatusUnauthorized)
}

// A stream opened with the admin-key session's token ends when the token
// expires: it is the admin, but not forever.
func TestConsole_AdminTokenStreamEndsAtExpiry(t *testing.T) {
	env := newConsoleEnv(t, func(c *auth.Config) { c.Console.TokenTTL = 2 * time.Second }, server.Config{})
	tok, _ := env.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	w := env.dialWS(t, "", bearer(tok))
	w.subscribe("s", map[string]any{"query": q("rooms")})
	code, msgs := readUntilClose(t, w.conn, 6*time.Second)
	if code != websocket.ClosePolicyViolation || !strings.Contains(msgs, "expired") {
		t.Fatalf("close %d, messages %s; want the expiry close", code, msgs)
	}
}

func TestConsole_SignInRateLimited(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	for i := range auth.DefaultLoginFailures {
		wantStatus(t, fmt.Sprintf("guess %d", i), env.consoleSignIn(t, `{"adminKey":"guess"}`).response, http.StatusUnauthorized)
	}
	a := env.consoleSignIn(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	wantStatus(t, "the right key after 10 guesses", a.response, http.StatusTooManyRequests)
	if a.Header.Get("Retry-After") == "" || a.Cookie != nil {
		t.Errorf("429 without Retry-After or with a cookie: %v", a.Header)
	}
	if rows := env.consoleRows(t); len(rows) != 0 {
		t.Errorf("%d sessions stored", len(rows))
	}
}

// A per-address request rate limit applies before any credential is
// looked at.
func TestConsole_SessionRoutesPerAddressRate(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{RateLimit: 1, RateBurst: 2})
	var last int
	for range 4 {
		last = env.consoleDo(t, "refresh", "", "", consoleCSRFHeaders).Status
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("4 refreshes at 1/s burst 2: last status %d, want 429", last)
	}
}

func TestConsole_SecureCookie(t *testing.T) {
	key := fmt.Sprintf(`{"adminKey":%q}`, testAdminKey)
	proxied := newConsoleEnv(t, nil, server.Config{TrustedProxies: []string{"127.0.0.1"}})
	for _, tc := range []struct {
		proto  string
		secure bool
	}{{"https", true}, {"https, http", true}, {"http", false}, {"", false}} {
		a := proxied.consoleDo(t, "session", key, "", map[string]string{"X-Forwarded-Proto": tc.proto})
		wantStatus(t, "sign in", a.response, http.StatusOK)
		if a.Cookie.Secure != tc.secure {
			t.Errorf("X-Forwarded-Proto %q from a trusted proxy: Secure=%v, want %v", tc.proto, a.Cookie.Secure, tc.secure)
		}
	}
	// From a peer that is not a trusted proxy the header means nothing.
	direct := newConsoleEnv(t, nil, server.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	a := direct.consoleDo(t, "session", key, "", map[string]string{"X-Forwarded-Proto": "https"})
	wantStatus(t, "sign in", a.response, http.StatusOK)
	if a.Cookie.Secure {
		t.Error("an untrusted peer's X-Forwarded-Proto made the cookie Secure")
	}

	// Over TLS it is always Secure.
	store := MustOpenStore(t)
	srv, err := server.New(store, server.Config{AdminKey: testAdminKey, Auth: MustAuth(t, store, nil), Console: testConsoleFS()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(srv.Handler())
	defer ts.Close()
	res, err := ts.Client().Post(ts.URL+"/admin/v1/console/session", "application/json", strings.NewReader(key))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	cks := res.Cookies()
	if res.StatusCode != http.StatusOK || len(cks) != 1 || !cks[0].Secure {
		t.Fatalf("TLS sign in: %d cookies %+v, want one Secure cookie", res.StatusCode, cks)
	}
}

func TestConsole_SignInBodies(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	for _, body := range []string{
		``,
		`[]`,
		`{}`,
		`{"adminKey":""}`,
		`{"adminKey":1}`,
		`{"adminKey":null}`,
		`{"adminKey":"k","username":"u"}`,
		`{"adminKey":"k","password":"p"}`,
		`{"username":"u"}`,
		`{"password":"p"}`,
		`{"username":"","password":"p"}`,
		`{"username":"u","password":""}`,
		`{"username":"u","password":"p","extra":1}`,
		`{"username":["u"],"password":"p"}`,
		`{"adminKey":"` + testAdminKey + `"`,
		`{"adminKey":"` + testAdminKey + `"} {}`,
	} {
		a := env.consoleSignIn(t, body)
		if a.Status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400; %s", body, a.Status, a.response.Body)
		}
		if a.Cookie != nil {
			t.Errorf("%s: cookie set", body)
		}
	}
	big := `{"adminKey":"` + strings.Repeat("k", 16<<10) + `"}`
	wantError(t, "a 16 KiB key", env.consoleSignIn(t, big).response, http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE")
	if rows := env.consoleRows(t); len(rows) != 0 {
		t.Errorf("%d sessions stored by refused sign-ins", len(rows))
	}
	// A sign-in from another origin is refused before the body is read.
	cross := env.consoleDo(t, "session", fmt.Sprintf(`{"adminKey":%q}`, testAdminKey), "", map[string]string{"Origin": "https://evil.example"})
	wantStatus(t, "cross-origin sign in", cross.response, http.StatusForbidden)
	same := env.consoleDo(t, "session", fmt.Sprintf(`{"adminKey":%q}`, testAdminKey), "", map[string]string{"Origin": env.URL})
	wantStatus(t, "same-origin sign in", same.response, http.StatusOK)
}

// Refusals of refresh and logout: what they answer, and that the stored
// session is exactly as it was unless the refusal is meant to end it.
func TestConsole_RefreshRefusals(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	_, cookie := env.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	before := env.consoleRows(t)
	id := cookie[:len(auth.ConsoleCookiePrefix)+22]
	for _, tc := range []struct {
		name, path, cookie string
		headers            map[string]string
		status             int
		cleared            bool
	}{
		{"refresh without the header", "refresh", cookie, map[string]string{}, http.StatusForbidden, false},
		{"logout without the header", "logout", cookie, map[string]string{}, http.StatusForbidden, false},
		{"refresh cross-origin", "refresh", cookie, map[string]string{"X-Loom-Console": "1", "Origin": "http://evil.example"}, http.StatusForbidden, false},
		{"refresh without a cookie", "refresh", "", consoleCSRFHeaders, http.StatusUnauthorized, true},
		{"refresh with garbage", "refresh", "garbage", consoleCSRFHeaders, http.StatusUnauthorized, true},
		{"refresh with an oversized cookie", "refresh", cookie + strings.Repeat("A", 8<<10), consoleCSRFHeaders, http.StatusUnauthorized, true},
		{"refresh with an unknown session", "refresh", auth.ConsoleCookiePrefix + strings.Repeat("B", 22) + cookie[len(id):], consoleCSRFHeaders, http.StatusUnauthorized, true},
		{"logout of another session", "logout", auth.ConsoleCookiePrefix + strings.Repeat("B", 22) + cookie[len(id):], consoleCSRFHeaders, http.StatusNoContent, true},
		{"logout without a cookie", "logout", "", consoleCSRFHeaders, http.StatusNoContent, true},
	} {
		a := env.consoleDo(t, tc.path, "", tc.cookie, tc.headers)
		if tc.cleared {
			wantCleared(t, tc.name, a, tc.status)
		} else {
			wantStatus(t, tc.name, a.response, tc.status)
			if a.Cookie != nil {
				t.Errorf("%s: cookie touched: %+v", tc.name, a.Cookie)
			}
		}
		if after := env.consoleRows(t); !maps.Equal(after, before) {
			t.Fatalf("%s changed the stored sessions: %v -> %v", tc.name, before, after)
		}
	}
	// A value with the right id and a wrong secret is a copied, replaced
	// value: the session ends.
	forged := id + "." + strings.Repeat("C", 43)
	wantCleared(t, "a wrong secret", env.consoleDo(t, "refresh", "", forged, consoleCSRFHeaders), http.StatusUnauthorized)
	if rows := env.consoleRows(t); len(rows) != 0 {
		t.Fatalf("rows %v after a wrong secret, want the session ended", rows)
	}
}

func TestConsole_RevokeAll(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	key := fmt.Sprintf(`{"adminKey":%q}`, testAdminKey)
	_, c1 := env.mustConsoleSession(t, key)
	tok, c2 := env.mustConsoleSession(t, key)
	bob := env.signup(t, "bob")
	wantStatus(t, "revoke-all anonymous", env.Do(t, "POST", "/admin/v1/console/sessions/revoke-all", "", anon), http.StatusUnauthorized)
	wantStatus(t, "revoke-all as a user", env.Do(t, "POST", "/admin/v1/console/sessions/revoke-all", "", bob.h()), http.StatusForbidden)
	if rows := env.consoleRows(t); len(rows) != 2 {
		t.Fatalf("refused revoke-all: %d rows, want 2", len(rows))
	}
	r := env.Do(t, "POST", "/admin/v1/console/sessions/revoke-all", "", bearer(tok))
	wantStatus(t, "revoke-all with a console token", r, http.StatusOK)
	if n, _ := r.JSON(t)["revoked"].(json.Number).Int64(); n != 2 {
		t.Errorf("revoked %s, want 2", r.Body)
	}
	for _, c := range []string{c1, c2} {
		wantCleared(t, "refresh after revoke-all", env.consoleDo(t, "refresh", "", c, consoleCSRFHeaders), http.StatusUnauthorized)
	}
}

// A node restarted with another admin key refuses the sessions the old key
// opened (nodes sharing the store and the signing secret agree on it).
func TestConsole_AdminKeyChange(t *testing.T) {
	store := MustOpenStore(t)
	svc := MustAuth(t, store, nil)
	old := MustStartServer(t, store, server.Config{Auth: svc, Console: testConsoleFS()})
	_, cookie := old.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))
	same := MustStartServer(t, store, server.Config{Auth: svc, Console: testConsoleFS()})
	r := same.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh on another node with the same key", r.response, http.StatusOK)
	rotated := MustStartServer(t, store, server.Config{AdminKey: "a rotated admin key", Auth: svc, Console: testConsoleFS()})
	wantCleared(t, "refresh after the key changed", rotated.consoleDo(t, "refresh", "", r.Cookie.Value, consoleCSRFHeaders), http.StatusUnauthorized)
}

// Signing in again with the cookie of a session ends that session.
func TestConsole_SignInReplacesSession(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	key := fmt.Sprintf(`{"adminKey":%q}`, testAdminKey)
	_, old := env.mustConsoleSession(t, key)
	a := env.consoleDo(t, "session", key, old, nil)
	wantStatus(t, "sign in again", a.response, http.StatusOK)
	if rows := env.consoleRows(t); len(rows) != 1 {
		t.Fatalf("%d sessions after signing in again, want 1", len(rows))
	}
	wantCleared(t, "the replaced session", env.consoleDo(t, "refresh", "", old, consoleCSRFHeaders), http.StatusUnauthorized)
	wantStatus(t, "the new session", env.consoleDo(t, "refresh", "", a.Cookie.Value, consoleCSRFHeaders).response, http.StatusOK)
}

// An admin-key session's caller is the admin key's: the kinds must agree.
func TestConsole_AdminKeyKind(t *testing.T) {
	if auth.KindConsoleAdminKey != access.KindAdminKey {
		t.Fatalf("auth.KindConsoleAdminKey=%q, access.KindAdminKey=%q", auth.KindConsoleAdminKey, access.KindAdminKey)
	}
}

// A user's console token on the WebSocket: re-authenticating with the
// refreshed token keeps the subscriptions (the grant is the same), and the
// connection ends when the last token expires.
func TestConsole_UserTokenOnWebSocket(t *testing.T) {
	env := newConsoleEnv(t, func(c *auth.Config) { c.Console.TokenTTL = 3 * time.Second }, server.Config{})
	alice := env.signup(t, "alice")
	env.setRoles(t, alice.UID, "user", "admin")
	tok, cookie := env.mustConsoleSession(t, `{"username":"alice","password":"correct horse battery"}`)

	w := env.dialWS(t, "", map[string]string{"Authorization": ""})
	w.send("a1", "auth", map[string]any{"token": tok})
	w.expect("auth_ack")
	w.subscribe("s1", map[string]any{"query": q("rooms")})
	r := env.consoleDo(t, "refresh", "", cookie, consoleCSRFHeaders)
	wantStatus(t, "refresh", r.response, http.StatusOK)
	w.send("a2", "auth", map[string]any{"token": r.Body["access_token"].(string)})
	w.expect("auth_ack")
	env.MustDo(t, http.StatusCreated, "PUT", api+"/documents/rooms/u1", `{"doc":{"n":1}}`)
	wantEventAfterReauth(w, "u1")
	code, msgs := readUntilClose(t, w.conn, 8*time.Second)
	if code != websocket.ClosePolicyViolation || !strings.Contains(msgs, "expired") {
		t.Fatalf("close %d, messages %s; want the expiry close", code, msgs)
	}
}

// wantEventAfterReauth reads w up to an event naming id (the document just
// written), failing on an error first: a re-auth with a refreshed console
// token must leave the subscription live.
func wantEventAfterReauth(w *wsClient, id string) {
	w.t.Helper()
	w.readUntil(func(m wsMsg) bool {
		if m.Type == "error" {
			w.t.Fatalf("the re-auth ended the subscription: %s", m)
		}
		return m.Type == "event" && strings.Contains(m.String(), id)
	})
}
