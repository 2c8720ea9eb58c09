package server_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/loomdb/loom/server"
)

func TestRateLimit(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{RateLimit: 0.001, RateBurst: 3})
	anon := map[string]string{"Authorization": ""}
	for i := 0; i < 3; i++ {
		if r := env.Do(t, "GET", api+"/documents/rooms/r1", "", anon); r.Status != http.StatusUnauthorized {
			t.Fatalf("request %d within the burst: status=%d, want 401 (anonymous, not yet limited)", i, r.Status)
		}
	}
	r := env.Do(t, "GET", api+"/documents/rooms/r1", "", anon)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("request over the burst: status=%d, want 429: %s", r.Status, r.Body)
	}
	if got := r.JSON(t)["code"]; got != "RATE_LIMITED" {
		t.Errorf("code=%v, want RATE_LIMITED", got)
	}
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After=%q, want a positive number of seconds", r.Header.Get("Retry-After"))
	}
	// The admin key is never limited.
	for i := 0; i < 10; i++ {
		if r := env.Do(t, "GET", api+"/documents/rooms/r1", "", nil); r.Status != http.StatusNotFound {
			t.Fatalf("admin request %d: status=%d, want 404", i, r.Status)
		}
	}
}

func TestRateLimit_Disabled(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{RateLimit: -1})
	for i := 0; i < 50; i++ {
		if r := env.Do(t, "GET", api+"/documents/rooms/r1", "", map[string]string{"Authorization": ""}); r.Status != http.StatusUnauthorized {
			t.Fatalf("request %d: status=%d, want 401", i, r.Status)
		}
	}
}

func TestCORS(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{CORSOrigins: []string{"https://app.example"}})
	preflight := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "PUT", "Authorization": ""}

	r := env.Do(t, "OPTIONS", api+"/documents/rooms/r1", "", preflight)
	if r.Status != http.StatusNoContent {
		t.Fatalf("allowed preflight: status=%d, want 204: %s", r.Status, r.Body)
	}
	if got := r.Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("Allow-Origin=%q", got)
	}
	if got := r.Header.Get("Access-Control-Allow-Headers"); got == "" {
		t.Error("no Access-Control-Allow-Headers on preflight")
	}
	if got := r.Header.Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("Allow-Credentials=%q, want none (tokens travel in headers)", got)
	}

	preflight["Origin"] = "https://evil.example"
	r = env.Do(t, "OPTIONS", api+"/documents/rooms/r1", "", preflight)
	if r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("disallowed preflight: status=%d allow-origin=%q, want 403 and none", r.Status, r.Header.Get("Access-Control-Allow-Origin"))
	}

	r = env.Do(t, "PUT", api+"/documents/rooms/r1", `{"doc":{"a":1}}`, map[string]string{"Origin": "https://app.example"})
	if r.Status != http.StatusCreated || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("allowed origin write: status=%d allow-origin=%q", r.Status, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if got := r.Header.Get("Access-Control-Expose-Headers"); got == "" {
		t.Error("no Access-Control-Expose-Headers (clients need ETag)")
	}
	r = env.Do(t, "GET", api+"/documents/rooms/r1", "", map[string]string{"Origin": "https://evil.example"})
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("disallowed origin got Allow-Origin %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	// Same origin is always allowed.
	r = env.Do(t, "OPTIONS", api+"/documents/rooms/r1", "", map[string]string{"Origin": env.URL, "Access-Control-Request-Method": "GET"})
	if r.Status != http.StatusNoContent {
		t.Errorf("same-origin preflight: status=%d, want 204", r.Status)
	}
}
