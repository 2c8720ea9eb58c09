package server_test

import (
	"encoding/json"
	"fmt"
	"io"
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

// trySSE sends an SSE request (the admin key unless h sets Authorization;
// "" removes it). A refusal is read whole; a stream that opens is closed at
// once and returned without a body, so that a wrongly accepted request
// fails the caller's check instead of hanging on a body that never ends.
func (e *testEnv) trySSE(t *testing.T, path string, h map[string]string) *response {
	t.Helper()
	req, err := http.NewRequest("GET", e.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	setHeaders(req, h)
	res, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	r := &response{Status: res.StatusCode, Header: res.Header}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return r
	}
	if r.Body, err = io.ReadAll(res.Body); err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return r
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
		wantSSERefused(t, c.what, env.trySSE(t, c.path, c.h), c.status, c.code)
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
	r := e.trySSE(t, "/realtime/sse?"+notes, u.h())
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
		r := e.trySSE(t, "/realtime/sse?"+notes+"&lastEventId=abc", u.h())
		if r.Status == http.StatusBadRequest {
			break
		}
		if r.Status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after closing an SSE stream: status %d %s, want its place freed", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sseDelta decodes an SSE event's delta as "type path" and its document's
// owner field.
func sseDelta(t *testing.T, ev sseEvent) (typePath, owner string) {
	t.Helper()
	var m struct {
		Type    string `json:"type"`
		Payload struct {
			Delta struct {
				Type     string         `json:"type"`
				Path     string         `json:"path"`
				Document map[string]any `json:"document"`
			} `json:"delta"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(ev.data), &m); err != nil || m.Type != "event" {
		t.Fatalf("SSE data %s (%v), want an event", ev.data, err)
	}
	owner, _ = m.Payload.Delta.Document["owner"].(string)
	return m.Payload.Delta.Type + " " + m.Payload.Delta.Path, owner
}

// Security rules over SSE, under the default rules with two real users: a
// subscribe to a collection the rules do not open is refused with
// PERMISSION_DENIED before any stream; a collection-group subscription
// the rules open only document by document delivers each user their own
// changes — creates, updates, deletes — and never the other's, live and
// when resumed from the change log.
func TestRealtimeSSE_Rules(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	for _, c := range []struct{ what, path string }{
		{"bob's notes", "/realtime/sse?collection=users/" + bob.UID + "/notes"},
		{"bob's notes on the SDK path", "/realtime/v1/databases/default/sse?collection=users/" + bob.UID + "/notes"},
		{"a collection no rule opens", "/realtime/sse?collection=rooms"},
		{"a system collection", "/realtime/sse?collection=_users"},
	} {
		wantSSERefused(t, "alice subscribes to "+c.what, env.trySSE(t, c.path, alice.h()), http.StatusForbidden, "PERMISSION_DENIED")
	}

	const group = "collection=users/*/notes"
	streams := map[string]*sseStream{
		"alice": env.openSSE(t, group, alice.h()),
		"bob":   env.openSSE(t, group+"&access_token="+url.QueryEscape(bob.Access), map[string]string{"Authorization": ""}),
	}
	users := map[string]user{"alice": alice, "bob": bob}
	doc := func(u user, id string) string { return "users/" + u.UID + "/notes/" + id }
	type write struct {
		who, method, id, body, event string
	}
	// Interleaved, so that every change of one user lies between two of
	// the other's. Events come in commit order, so a stream that reaches
	// its own "end" has skipped every change of the other user committed
	// before it: all of alice's for bob, all of bob's but his "end" for
	// alice.
	var writes []write
	for i := range 3 {
		for _, who := range []string{"bob", "alice"} {
			writes = append(writes, write{who, "PUT", fmt.Sprintf("n%d", i), `{"doc":{"owner":"` + who + `"}}`, "create"})
		}
	}
	for _, who := range []string{"bob", "alice"} {
		writes = append(writes,
			write{who, "PATCH", "n0", `{"doc":{"edited":true}}`, "update"},
			write{who, "DELETE", "n1", "", "delete"})
	}
	writes = append(writes, write{"alice", "PUT", "end", `{"doc":{"owner":"alice"}}`, "create"},
		write{"bob", "PUT", "end", `{"doc":{"owner":"bob"}}`, "create"})
	want := map[string][]string{}
	for _, w := range writes {
		u := users[w.who]
		r := env.Do(t, w.method, api+"/documents/"+doc(u, w.id), w.body, u.h())
		if r.Status >= 300 {
			t.Fatalf("%s %s %s: status %d %s", w.who, w.method, w.id, r.Status, r.Body)
		}
		want[w.who] = append(want[w.who], w.event+" "+doc(u, w.id))
	}

	// Failure messages name the users instead of their uids.
	names := strings.NewReplacer(alice.UID, "alice", bob.UID, "bob")
	firstID := map[string]string{}
	for who, s := range streams {
		for i, w := range want[who] {
			ev := s.event()
			got, owner := sseDelta(t, ev)
			if got != w {
				t.Fatalf("%s's event %d: %s, want %s (only their own documents); data %s", who, i, names.Replace(got), names.Replace(w), ev.data)
			}
			if owner != "" && owner != who {
				t.Fatalf("%s's event %d carries %s's document: %s", who, i, owner, ev.data)
			}
			if i == 0 {
				firstID[who] = ev.id
			}
		}
	}
	// Resumed after their first event, the stream reads the same changes
	// from the change log (the catch-up path): the same answer.
	for who, u := range users {
		s := env.openSSE(t, group, map[string]string{"Authorization": "Bearer " + u.Access, "Last-Event-ID": firstID[who]})
		for i, w := range want[who][1:] {
			ev := s.event()
			if got, _ := sseDelta(t, ev); got != w {
				t.Fatalf("%s's resumed event %d: %s, want %s (only their own documents); data %s", who, i, names.Replace(got), names.Replace(w), ev.data)
			}
		}
	}
}
