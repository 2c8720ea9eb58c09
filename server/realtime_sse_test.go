package server_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/server"
)

// wantSSERefused checks that an SSE request was refused before any stream
// started: the status, the JSON error body with its code (the contract a
// client branches on, not the status alone), and no event stream.
func wantSSERefused(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: Content-Type %q, want a JSON error and no event stream; body %s", what, ct, r.Body)
	}
	checkErrorShape(t, r)
	if got := r.JSON(t)["code"]; got != code {
		t.Fatalf("%s: code %v, want %s; body %s", what, got, code, r.Body)
	}
	if status == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("%s: WWW-Authenticate %q, want a Bearer challenge", what, r.Header.Get("WWW-Authenticate"))
	}
}

// A request the server cannot stream is refused with the error of the REST
// API before the stream starts: a missing or bad credential → 401
// UNAUTHENTICATED, bad parameters → 400 with the code of the fault.
func TestRealtimeSSE_RefusedRequests(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	own := "users/" + alice.UID + "/notes"
	bad := map[string]string{"Authorization": "Bearer nope"}
	for _, c := range []struct {
		what, path string
		h          map[string]string
		status     int
		code       string
	}{
		{"no credential", "/realtime/sse?collection=" + own, anon, http.StatusUnauthorized, "UNAUTHENTICATED"},
		{"bad access_token", "/realtime/sse?collection=" + own + "&access_token=nope", anon, http.StatusUnauthorized, "UNAUTHENTICATED"},
		{"bad Authorization header", "/realtime/sse?collection=" + own, bad, http.StatusUnauthorized, "UNAUTHENTICATED"},
		{"bad token on the SDK path", "/realtime/v1/databases/default/sse?collection=" + own, bad, http.StatusUnauthorized, "UNAUTHENTICATED"},
		{"filters not JSON", "/realtime/sse?collection=" + own + "&filters=%5B1", alice.h(), http.StatusBadRequest, "INVALID_QUERY"},
		{"unknown operator", "/realtime/sse?collection=" + own + "&filters=" + url.QueryEscape(`[{"field":"x","op":"~","value":1}]`), alice.h(), http.StatusBadRequest, "INVALID_QUERY"},
		{"no collection", "/realtime/sse", alice.h(), http.StatusBadRequest, "INVALID_PATH"},
		{"a document path", "/realtime/sse?collection=" + own + "/n1", alice.h(), http.StatusBadRequest, "INVALID_PATH"},
		{"bad Last-Event-ID", "/realtime/sse?collection=" + own + "&lastEventId=abc", alice.h(), http.StatusBadRequest, "BAD_REQUEST"},
		{"Last-Event-ID ahead of the log", "/realtime/sse?collection=" + own + "&lastEventId=999999999", alice.h(), http.StatusBadRequest, "BAD_REQUEST"},
		{"bad database", "/realtime/sse?collection=" + own + "&database=B%20d", alice.h(), http.StatusBadRequest, "BAD_REQUEST"},
		{"conflicting ?database=", "/realtime/v1/databases/default/sse?collection=" + own + "&database=other", alice.h(), http.StatusBadRequest, "BAD_REQUEST"},
	} {
		wantSSERefused(t, c.what, env.Do(t, "GET", c.path, "", c.h), c.status, c.code)
	}
	// The same requests with their fault removed stream.
	env.openSSE(t, "collection="+own+"&filters="+url.QueryEscape(`[{"field":"x","op":"==","value":1}]`), alice.h())
}

// max_streams_per_ip counts SSE streams with WebSockets; one more from the
// address is 429 RATE_LIMITED with Retry-After, as every 429 of the API.
func TestRealtimeSSE_StreamsPerAddressLimit(t *testing.T) {
	e := newAuthEnv(t, server.Config{Realtime: server.RealtimeConfig{MaxStreamsPerIP: 2}})
	u := e.signup(t, "streamer")
	notes := "collection=users/" + u.UID + "/notes"
	e.dialWS(t, "", u.h())
	first := e.openSSE(t, notes, u.h())
	r := e.Do(t, "GET", "/realtime/sse?"+notes, "", u.h())
	wantSSERefused(t, "third stream over SSE", r, http.StatusTooManyRequests, "RATE_LIMITED")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("third stream over SSE: Retry-After %q, want whole seconds >= 1", r.Header.Get("Retry-After"))
	}
	// The refusal held nothing: closing a stream frees its place for SSE.
	first.res.Body.Close()
	// A request with a bad resume token takes a place, then is refused
	// for the token (400) and frees it again: it probes for a place
	// without holding one.
	deadline := time.Now().Add(rtGuard)
	for {
		r := e.Do(t, "GET", "/realtime/sse?"+notes+"&lastEventId=abc", "", u.h())
		if r.Status == http.StatusBadRequest {
			break
		}
		if r.Status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after closing an SSE stream: status %d %s, want its place freed", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
