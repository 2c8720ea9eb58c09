package app_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/config"
)

// loom serve serves the embedded console and its session API, with the
// [console] lifetimes; [console] enabled = false turns both off.
func TestConsole_Wiring(t *testing.T) {
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.Console.TokenTTL = config.Duration{Duration: 5 * time.Minute} }})
	index := s.Do(t, "GET", "/", "", map[string]string{"Authorization": ""}) // follows the redirect
	if index.Status != http.StatusOK || !strings.Contains(string(index.Body), "<title>Loom console</title>") {
		t.Fatalf("GET / → %d %.200s, want the console's index.html", index.Status, index.Body)
	}
	if index.Header.Get("Cache-Control") != "no-store" || !strings.Contains(index.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("index headers %v", index.Header)
	}
	asset := regexp.MustCompile(`src="(app\.[A-Z0-9]{8}\.js)"`).FindSubmatch(index.Body)
	if asset == nil {
		t.Fatalf("index.html names no hashed script: %s", index.Body)
	}
	js := s.Do(t, "GET", "/console/"+string(asset[1]), "", nil)
	if js.Status != http.StatusOK || js.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || js.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("GET %s → %d %v", asset[1], js.Status, js.Header)
	}

	r := s.Do(t, "POST", "/admin/v1/console/session", fmt.Sprintf(`{"adminKey":%q}`, apptest.AdminKey), map[string]string{"Authorization": ""})
	if r.Status != http.StatusOK {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	if m := r.JSON(t); fmt.Sprint(m["expires_in"]) != "300" {
		t.Errorf("expires_in=%v, want 300 ([console] token_ttl = 5m)", m["expires_in"])
	}

	off := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.Console.Enabled = false }})
	for _, p := range []string{"/", "/console/", "/console/index.html"} {
		if r := off.Do(t, "GET", p, "", nil); r.Status != http.StatusNotFound {
			t.Errorf("console off: GET %s → %d, want 404", p, r.Status)
		}
	}
	if r := off.Do(t, "POST", "/admin/v1/console/session", fmt.Sprintf(`{"adminKey":%q}`, apptest.AdminKey), nil); r.Status != http.StatusNotFound {
		t.Errorf("console off: sign in → %d, want 404", r.Status)
	}
}
