package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The rules admin API of loom agents admits a bearer only when the remote
// Loom answers 200 to it on an admin endpoint; it remembers that for a
// while, never a refusal, and fails closed when the remote cannot tell.
func TestRemoteAdmin(t *testing.T) {
	var probes atomic.Int32
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if r.URL.Path != "/admin/v1/deliveries" {
			t.Errorf("probe of %s, want /admin/v1/deliveries", r.URL.Path)
		}
		switch r.Header.Get("Authorization") {
		case "Bearer admin":
			w.WriteHeader(http.StatusOK)
		case "Bearer user":
			w.WriteHeader(http.StatusForbidden)
		case "Bearer broken":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer remote.Close()
	g := newRemoteAdmin(remote.URL + "/")
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	h := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	call := func(auth string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "/admin/v1/agents/rules", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, tt := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Basic admin", http.StatusUnauthorized},
		{"Bearer nobody", http.StatusUnauthorized},
		{"Bearer user", http.StatusForbidden},
		{"Bearer broken", http.StatusBadGateway},
		{"Bearer admin", http.StatusTeapot},
	} {
		code, body := call(tt.auth)
		if code != tt.want {
			t.Errorf("%q: status %d, want %d", tt.auth, code, tt.want)
		}
		if code != http.StatusTeapot && !strings.Contains(body, `"code"`) {
			t.Errorf("%q: body %s, want the error shape", tt.auth, body)
		}
		// Every UNAUTHENTICATED message starts "Unauthorized: ", as the
		// server's do (docs/syntrix.md: Syntrix's SDK refreshes on it).
		if code == http.StatusUnauthorized && !strings.Contains(body, `"message":"Unauthorized: `) {
			t.Errorf("%q: body %s, want a message starting \"Unauthorized: \"", tt.auth, body)
		}
	}
	before := probes.Load()
	if code, _ := call("Bearer admin"); code != http.StatusTeapot || probes.Load() != before {
		t.Errorf("a remembered admin: status %d, probes %d→%d, want served without asking", code, before, probes.Load())
	}
	if _, _ = call("Bearer user"); probes.Load() != before+1 {
		t.Error("a refusal was remembered")
	}
	now = now.Add(remoteAdminTTL)
	if _, _ = call("Bearer admin"); probes.Load() != before+2 {
		t.Error("an expired admin answer was not asked again")
	}
	for i := range 3 * remoteAdminCache {
		g.remember([32]byte{byte(i), byte(i >> 8)}, now)
	}
	if n := len(g.ok); n > remoteAdminCache {
		t.Errorf("cache holds %d, want at most %d", n, remoteAdminCache)
	}

	remote.Close()
	if code, _ := call("Bearer other"); code != http.StatusBadGateway {
		t.Errorf("remote down: status %d, want 502 (closed)", code)
	}
}

// A redirect from the remote (a proxy sending unauthenticated callers to a
// sign-in page that answers 200) is not followed: it admits nobody.
func TestRemoteAdmin_RedirectIsNotAnAnswer(t *testing.T) {
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sign-in" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Redirect(w, r, "/sign-in", http.StatusFound)
	}))
	defer remote.Close()
	h := newRemoteAdmin(remote.URL).wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	r := httptest.NewRequest(http.MethodGet, "/admin/v1/agents/rules", nil)
	r.Header.Set("Authorization", "Bearer anything")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadGateway {
		t.Errorf("remote redirecting: status %d, want 502 (not admitted)", w.Code)
	}
}

// Checks in flight to the remote Loom are bounded: a flood of unknown
// bearers holds at most remoteAdminProbes requests there.
func TestRemoteAdmin_ProbesBounded(t *testing.T) {
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer remote.Close()
	g := newRemoteAdmin(remote.URL)
	const callers = 3 * remoteAdminProbes
	done := make(chan int, callers)
	for i := range callers {
		go func() { done <- g.check(context.Background(), fmt.Sprint("guess-", i)) }()
	}
	// Wait until the remote holds as many as it will get, then a little
	// more for any check that would wrongly go past the bound.
	deadline := time.Now().Add(5 * time.Second)
	for inFlight.Load() < remoteAdminProbes && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range callers {
		if code := <-done; code != http.StatusUnauthorized {
			t.Errorf("check: %d, want 401", code)
		}
	}
	if m := most.Load(); m != remoteAdminProbes {
		t.Errorf("at most %d checks in flight at the remote, want %d", m, remoteAdminProbes)
	}
}
