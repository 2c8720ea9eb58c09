package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/server"
)

// FuzzConsoleSession sends arbitrary sign-in bodies and session cookies to
// the console session API: never a 5xx or a panic, every error in the JSON
// error shape, a sign-in succeeds only with exactly the admin key (and then
// sets a well-formed cookie), and no made-up cookie ever refreshes.
func FuzzConsoleSession(f *testing.F) {
	for _, seed := range []struct {
		path         uint8
		body, cookie string
	}{
		{0, `{"adminKey":"` + testAdminKey + `"}`, ""},
		{0, `{"adminKey":"x"}`, ""},
		{0, `{"username":"u","password":"p"}`, ""},
		{0, `{"adminKey":"` + testAdminKey + `","username":"u"}`, ""},
		{0, `{"adminKey":"\u0000"}`, ""},
		{1, "", auth.ConsoleCookiePrefix + strings.Repeat("A", 22) + "." + strings.Repeat("B", 43)},
		{1, "", "loom_console=x; loom_console=y"},
		{2, "", auth.ConsoleCookiePrefix + strings.Repeat("A", 22)},
		{1, "", "\"" + auth.ConsoleCookiePrefix + "\""},
	} {
		f.Add(seed.path, []byte(seed.body), seed.cookie)
	}
	st := MustOpenStore(f)
	srv, err := server.New(st, server.Config{
		AdminKey:  testAdminKey,
		Auth:      MustAuth(f, st, func(c *auth.Config) { c.LoginLimit.Failures = -1 }),
		Console:   testConsoleFS(),
		RateLimit: -1,
	})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	paths := []string{"session", "refresh", "logout"}

	f.Fuzz(func(t *testing.T, path uint8, body []byte, cookie string) {
		p := paths[int(path)%len(paths)]
		req := httptest.NewRequest("POST", "/admin/v1/console/"+p, strings.NewReader(string(body)))
		req.Header.Set("X-Loom-Console", "1")
		req.Header.Set("Cookie", "loom_console="+cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q %q: status %d %s", p, body, cookie, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e struct{ Code, Message string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("%s %q: error body %s is not the error shape", p, body, rec.Body.Bytes())
			}
			return
		}
		switch p {
		case "session":
			var in map[string]any
			if json.Unmarshal(body, &in) != nil || len(in) != 1 || in["adminKey"] != testAdminKey {
				t.Fatalf("sign-in %q answered %d", body, rec.Code)
			}
			var cks []*http.Cookie
			for _, line := range rec.Result().Header.Values("Set-Cookie") {
				if ck, err := http.ParseSetCookie(line); err == nil {
					cks = append(cks, ck)
				}
			}
			if len(cks) != 1 {
				t.Fatalf("sign-in set %d cookies", len(cks))
			}
			if _, _, ok := auth.ParseConsoleCookie(cks[0].Value); !ok {
				t.Fatalf("sign-in set a malformed cookie %q", cks[0].Value)
			}
		case "refresh":
			t.Fatalf("refresh with the made-up cookie %q answered %d", cookie, rec.Code)
		case "logout":
			if rec.Code != http.StatusNoContent {
				t.Fatalf("logout answered %d", rec.Code)
			}
		}
	})
}
