package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// newShortTokenEnv is a server whose access tokens live ttl.
func newShortTokenEnv(t *testing.T, ttl time.Duration) *testEnv {
	t.Helper()
	return newAuthEnvWith(t, func(c *auth.Config) { c.AccessTTL = ttl }, server.Config{})
}

// freshToken logs in again for a token with a new expiry.
func (e *testEnv) freshToken(t *testing.T, name string) string {
	t.Helper()
	r := e.Do(t, "POST", "/auth/v1/login", fmt.Sprintf(`{"username":%q,"password":"correct horse battery"}`, name), anon)
	if r.Status != http.StatusOK {
		t.Fatalf("login: %d %s", r.Status, r.Body)
	}
	var tok struct {
		Access string `json:"access_token"`
	}
	_ = json.Unmarshal(r.Body, &tok)
	return tok.Access
}

// A WebSocket opened with a user token ends when the token expires — with
// an UNAUTHENTICATED error and a policy-violation close — unless the
// client sends auth with a fresh token first.
func TestRealtime_WSEndsAtTokenExpiry(t *testing.T) {
	// Token expiry has one-second resolution: a 3 s token expires 2–3 s
	// after it is issued, and one issued 1.2 s later expires a second
	// after it at the earliest.
	e := newShortTokenEnv(t, 3*time.Second)
	u := e.signup(t, "expiring")
	expire := e.dialWS(t, "", map[string]string{"Authorization": "Bearer " + u.Access})
	renew := e.dialWS(t, "", map[string]string{"Authorization": "Bearer " + u.Access})
	for _, w := range []*wsClient{expire, renew} {
		w.send("s", "subscribe", map[string]any{"query": map[string]any{"collection": "users/" + u.UID + "/notes"}})
	}
	// renew re-authenticates with a token that expires later.
	time.Sleep(1200 * time.Millisecond)
	renew.send("a", "auth", map[string]any{"token": e.freshToken(t, "expiring")})

	start := time.Now()
	code, msgs := readUntilClose(t, expire.conn, 5*time.Second)
	if code != websocket.ClosePolicyViolation || !strings.Contains(msgs, "UNAUTHENTICATED") || !strings.Contains(msgs, "expired") {
		t.Fatalf("close %d after %s, messages %s", code, time.Since(start), msgs)
	}
	// The renewed connection still serves.
	renew.send("p", "ping", nil)
	_ = renew.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		_, m, err := renew.conn.ReadMessage()
		if err != nil {
			t.Fatalf("renewed connection: %v", err)
		}
		if strings.Contains(string(m), `"pong"`) {
			break
		}
	}
	code, _ = readUntilClose(t, renew.conn, 5*time.Second)
	if code != websocket.ClosePolicyViolation {
		t.Fatalf("renewed connection closed with %d", code)
	}
}

func readUntilClose(t *testing.T, c *websocket.Conn, d time.Duration) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var msgs []string
	for {
		_, m, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, strings.Join(msgs, "\n")
			}
			t.Fatalf("no close within %s: %v (messages %v)", d, err, msgs)
		}
		msgs = append(msgs, string(m))
	}
}

// An SSE stream ends with an UNAUTHENTICATED error event when its token
// expires.
func TestRealtime_SSEEndsAtTokenExpiry(t *testing.T) {
	e := newShortTokenEnv(t, time.Second)
	u := e.signup(t, "sseexp")
	s := e.openSSE(t, "collection=users/"+u.UID+"/notes&access_token="+u.Access, map[string]string{"Authorization": ""})
	ev := s.event()
	if !strings.Contains(ev.data, "UNAUTHENTICATED") || !strings.Contains(ev.data, "expired") {
		t.Fatalf("event %+v", ev)
	}
	if _, err := s.next(); err == nil {
		t.Fatal("the stream went on after the token expired")
	}
}

// Authenticating a connection as someone else ends the subscriptions it
// opened as the previous identity.
func TestRealtime_WSReauthAsAnotherUserEndsSubscriptions(t *testing.T) {
	e := newShortTokenEnv(t, time.Hour)
	a := e.signup(t, "first")
	b := e.signup(t, "second")
	w := e.dialWS(t, "", map[string]string{"Authorization": "Bearer " + a.Access})
	w.send("s", "subscribe", map[string]any{"query": map[string]any{"collection": "users/" + a.UID + "/notes"}})
	w.send("a", "auth", map[string]any{"token": b.Access})
	_ = w.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, m, err := w.conn.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.Contains(string(m), `"error"`) && strings.Contains(string(m), "someone else") {
			break
		}
	}
	// a's note no longer reaches the connection; b's, written after it, does.
	w.send("s2", "subscribe", map[string]any{"query": map[string]any{"collection": "users/" + b.UID + "/notes"}})
	for {
		_, m, err := w.conn.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.Contains(string(m), `"subscribe_ack"`) {
			break
		}
	}
	e.MustDo(t, 201, "PUT", api+"/documents/users/"+a.UID+"/notes/n1", `{"doc":{"x":1}}`)
	e.MustDo(t, 201, "PUT", api+"/documents/users/"+b.UID+"/notes/n1", `{"doc":{"x":2}}`)
	sawB := false
	_ = w.conn.SetReadDeadline(time.Now().Add(time.Second))
	for {
		_, m, err := w.conn.ReadMessage()
		if err != nil {
			break // the quiet second after b's event is over
		}
		if strings.Contains(string(m), `"event"`) {
			if strings.Contains(string(m), "users/"+a.UID) {
				t.Fatalf("event of the previous identity after the switch: %s", m)
			}
			sawB = true
			_ = w.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		}
	}
	if !sawB {
		t.Fatal("the new identity's subscription got no event")
	}
}

// One address may hold at most MaxStreamsPerIP open streams (WebSocket,
// SSE, pullStream together); the admin key is not limited.
func TestRealtime_StreamsPerAddressAreLimited(t *testing.T) {
	e := newAuthEnv(t, server.Config{Realtime: server.RealtimeConfig{MaxStreamsPerIP: 2}})
	u := e.signup(t, "streamer")
	h := map[string]string{"Authorization": "Bearer " + u.Access}
	a := e.dialWS(t, "", h)
	e.openSSE(t, "collection=users/"+u.UID+"/notes", h)
	if _, res, err := e.tryDialWS("", h); err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("third stream: err %v status %d, want 429", err, status)
	}
	// The admin key is not counted.
	e.dialWS(t, "", nil)
	// Closing one frees its place.
	a.conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _, err := e.tryDialWS("", h)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the place of a closed stream was not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Re-authenticating as the same user with other roles ends the
// subscriptions the old roles opened: the subscribe Syntrix's SDK repeats
// on every auth_ack then opens a new one under the current roles, instead
// of being acknowledged on a stream that still reads with the old ones.
func TestRealtime_WSReauthWithOtherRolesEndsSubscriptions(t *testing.T) {
	set, err := rules.Parse([]byte(rules.DefaultSource()+`
[[rule]]
match = "secret/{id}"
allow = ["read"]
if    = "request.auth != null && ('reader' in request.auth.roles || resource.data.public == true)"
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	e := newAuthEnvWith(t, func(c *auth.Config) { c.AccessTTL = time.Hour }, server.Config{Rules: set})
	u := e.signup(t, "demoted")
	setRoles := func(roles ...any) {
		t.Helper()
		// An operator editing the user's roles in the store (Loom has no
		// API for it).
		w := collections.Write{Type: collections.WriteUpdate, Path: "_users/" + u.UID, Data: map[string]any{"roles": roles}}
		if _, err := e.Store.Commit(context.Background(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setRoles("user", "reader")
	sub := sdkSubscribe("sub-1", sdkQuery("secret", ""), true, false)
	w := e.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", e.freshToken(t, "demoted")))
	w.expect("auth_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")

	// The role is taken away; the SDK authenticates with a fresh token and
	// repeats its subscribe.
	setRoles("user")
	w.sendText(sdkAuth("auth-retry", e.freshToken(t, "demoted")))
	if m := w.expect("error"); m.str("subId") != "sub-1" || !sdkSeesRefresh(m) {
		t.Fatalf("after re-authenticating with other roles: %s, want sub-1 ended", m)
	}
	w.expect("auth_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")

	// The hidden document, then a public one: only the public one arrives.
	e.MustDo(t, http.StatusCreated, "PUT", api+"/documents/secret/hidden", `{"doc":{"public":false}}`)
	e.MustDo(t, http.StatusCreated, "PUT", api+"/documents/secret/open", `{"doc":{"public":true}}`)
	for _, m := range w.readUntil(func(m wsMsg) bool { return eventOf(m, "sub-1", "id", "open") }) {
		if m.Type == "event" && !eventOf(m, "sub-1", "id", "open") {
			t.Fatalf("event the current roles may not read: %s", m)
		}
	}
}
