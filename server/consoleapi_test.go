package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

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
	if n, _ := a.Body["expires_in"].(json.Number).Int64(); n != 600 {
		t.Errorf("expires_in=%v, want 600", a.Body["expires_in"])
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

// makeAdmin gives the user the roles with the admin key.
func (e *testEnv) setRoles(t *testing.T, uid string, roles ...string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"roles": roles})
	e.MustDo(t, http.StatusOK, "PUT", "/admin/v1/users/"+uid+"/roles", string(b))
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestConsole_AdminKeySession(t *testing.T) {
	env := newConsoleEnv(t, nil, server.Config{})
	tok, cookie := env.mustConsoleSession(t, fmt.Sprintf(`{"adminKey":%q}`, testAdminKey))

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
