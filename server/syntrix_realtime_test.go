package server_test

// Syntrix's own realtime clients against Loom (issue 16; docs/syntrix.md,
// "Realtime: WebSocket and SSE"). The requests are copied byte for byte
// from Syntrix's sources, and the checks are what those clients parse:
//
//   - the TypeScript SDK's WebSocket client, RealtimeClient:
//     sdk/syntrix-client-ts/src/replication/realtime.ts
//     @ 49c001be701b6f1dc5adaad7d99d44b5c4707794 (the version with the
//     "unauthor" refresh and the re-subscribe on every auth_ack);
//   - the SDK's SSE client, RealtimeSSEClient:
//     sdk/syntrix-client-ts/src/replication/realtime-sse.ts, the newest
//     version in the search index (index id 69344808432; the index gives
//     no commit for it; the older @ 28fa9a634fd20d81afa762b64d52f9abab6c3cac
//     used /realtime/sse);
//   - the SDK's token refresh, DefaultTokenProvider.refreshToken:
//     POST /auth/v1/refresh {"refresh_token"} (sdk/syntrix-client-ts/src/internal/auth/provider.ts
//     @ 0ecdf490, per /work/notes/issue16-research.md);
//   - Syntrix's Go integration tests: tests/integration/realtime_test.go
//     @ 12bf5081dbe5e7fcb1ca44dc246c8c30cc2c3d23 and
//     tests/integration/multidatabase_test.go
//     @ ae43ecf59ad0ddb7ee90a4e883250dd6fd72f33b, with the message structs
//     and the ConnectWebSocket / AuthenticateWebSocket helpers of
//     tests/integration/env_helper_test.go (newest indexed version, index
//     id 38777596745, no commit given).
//
// Two things of those Go tests cannot be copied: they create documents with
// POST /api/v1/{collection}, a route of an older Syntrix that its own
// current server does not serve either (the port uses Loom's and Syntrix's
// POST /api/v1/databases/default/documents/{collection}), and they sign up
// with {"tenant", ...}, an unknown field Loom accepts only under
// [compat] syntrix (the port signs up without it). Where they wait a fixed
// time to see that no event arrives, the port asks the server instead: the
// live subscription count (/metrics) and a ping answered after the write.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// sdkAuth is RealtimeClient's auth message: JSON.stringify of
// {id: 'auth-init' | 'auth-retry', type: 'auth', payload: {token}}.
func sdkAuth(id, token string) []byte {
	return []byte(`{"id":"` + id + `","type":"auth","payload":{"token":` + strconv.Quote(token) + `}}`)
}

// sdkSubscribe is RealtimeClient.sendSubscribe: {id: subId, type:
// 'subscribe', payload: {query: options.query, includeData:
// options.includeData ?? true, sendSnapshot: options.sendSnapshot ??
// false}}, query being the app's {collection, filters?}.
func sdkSubscribe(subID, query string, includeData, sendSnapshot bool) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"type":"subscribe","payload":{"query":%s,"includeData":%t,"sendSnapshot":%t}}`, subID, query, includeData, sendSnapshot))
}

// sdkUnsubscribe is RealtimeClient.unsubscribe: {id: `unsub-${subId}`,
// type: 'unsubscribe', payload: {id: subId}}.
func sdkUnsubscribe(subID string) []byte {
	return []byte(`{"id":"unsub-` + subID + `","type":"unsubscribe","payload":{"id":"` + subID + `"}}`)
}

// sdkQuery is a SubscribeQuery {collection, filters}.
func sdkQuery(collection, filters string) string {
	if filters == "" {
		return `{"collection":` + strconv.Quote(collection) + `}`
	}
	return `{"collection":` + strconv.Quote(collection) + `,"filters":` + filters + `}`
}

func (w *wsClient) sendText(b []byte) {
	w.t.Helper()
	w.sendRaw(websocket.TextMessage, b)
}

// sdkSeesRefresh is RealtimeClient.handleMessage's test for an error that
// starts a token refresh and an auth-retry.
func sdkSeesRefresh(m wsMsg) bool {
	msg := m.str("message")
	if msg == "" {
		msg = "Unknown realtime error"
	}
	return m.Type == "error" && strings.Contains(strings.ToLower(msg), "unauthor")
}

// readUntil reads messages (heartbeats skipped) up to and including the
// first one done accepts.
func (w *wsClient) readUntil(done func(wsMsg) bool) []wsMsg {
	w.t.Helper()
	var out []wsMsg
	for {
		m := w.read()
		out = append(out, m)
		if done(m) {
			return out
		}
	}
}

// eventOf reports whether m is an event of subscription subID whose
// document has field = value.
func eventOf(m wsMsg, subID, field, value string) bool {
	if m.Type != "event" || m.str("subId") != subID {
		return false
	}
	doc, _ := m.delta()["document"].(map[string]any)
	return doc[field] == value
}

// liveSubscriptions is the server's loom_realtime_subscriptions gauge: the
// subscriptions its realtime hub holds.
func (e *testEnv) liveSubscriptions(t testing.TB) int {
	t.Helper()
	r := e.Do(t, "GET", "/metrics", "", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.Status, r.Body)
	}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, "loom_realtime_subscriptions "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatalf("no loom_realtime_subscriptions in /metrics")
	return 0
}

// quiet checks, with a ping, that the connection has nothing more to say
// now: the next message is the pong.
func (w *wsClient) quiet(what string) {
	w.t.Helper()
	w.send("quiet", "ping", nil)
	if m := w.read(); m.Type != "pong" {
		w.t.Fatalf("%s: got %s, want nothing before the pong", what, m)
	}
}

// postDoc creates a document in collection as u (Loom's POST, which is
// Syntrix's POST /api/v1/databases/{db}/documents/{collection}).
func (e *testEnv) postDoc(t testing.TB, headers map[string]string, collection, body string) {
	t.Helper()
	if r := e.Do(t, "POST", api+"/documents/"+collection, body, headers); r.Status != http.StatusCreated {
		t.Fatalf("POST %s %s: %d %s", collection, body, r.Status, r.Body)
	}
}

// sdkDelta is the delta of a RealtimeEvent as the TS SDK declares it:
// {type, id, document?, timestamp: number}.
type sdkDelta struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`
	Document  map[string]any `json:"document"`
	Timestamp *float64       `json:"timestamp"`
}

// The SDK's WebSocket session as it happens on every connection: auth-init,
// the app's subscribe at once (connect() resolves on open), then on
// auth_ack the same subscribe again with the same id. Both are acknowledged,
// one subscription exists, events arrive once; another query under a live
// id is still an error; unsubscribe is acknowledged to unsub-<id>.
func TestSyntrixRealtime_SDKResubscribesOnAuthAck(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	notes := "users/" + alice.UID + "/notes"
	open := sdkQuery(notes, `[{"field":"status","op":"==","value":"open"}]`)

	// A browser WebSocket: no Authorization header on the upgrade.
	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", alice.Access))
	w.sendText(sdkSubscribe("sub-1", open, true, false))
	if m := w.expect("auth_ack"); m.ID != "auth-init" {
		t.Fatalf("auth_ack=%s", m)
	}
	first := w.expect("subscribe_ack")
	// handleMessage(auth_ack): "Resubscribe after successful auth".
	w.sendText(sdkSubscribe("sub-1", open, true, false))
	again := w.expect("subscribe_ack")
	for _, a := range []wsMsg{first, again} {
		if a.ID != "sub-1" || a.str("subId") != "sub-1" || a.str("resumeToken") == "" {
			t.Fatalf("ack=%s", a)
		}
	}
	if first.str("resumeToken") != again.str("resumeToken") {
		t.Fatalf("the repeated ack has another start token: %s vs %s", first, again)
	}
	if n := env.liveSubscriptions(t); n != 1 {
		t.Fatalf("%d live subscriptions after the same subscribe twice, want 1", n)
	}

	env.postDoc(t, alice.h(), notes, `{"id":"n1","status":"open","title":"n1"}`)
	env.postDoc(t, alice.h(), notes, `{"id":"n2","status":"closed","title":"n2"}`)
	env.postDoc(t, alice.h(), notes, `{"id":"n3","status":"open","title":"n3"}`)
	got := w.readUntil(func(m wsMsg) bool { return eventOf(m, "sub-1", "title", "n3") })
	if len(got) != 2 || !eventOf(got[0], "sub-1", "title", "n1") {
		t.Fatalf("events %v, want n1 and n3 once each", got)
	}
	// What RealtimeEvent declares: subId, delta {type, id, document?,
	// timestamp: number}.
	var ev struct {
		Type    string `json:"type"`
		Payload struct {
			SubID string   `json:"subId"`
			Delta sdkDelta `json:"delta"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(got[0].raw, &ev); err != nil || ev.Type != "event" || ev.Payload.SubID != "sub-1" ||
		ev.Payload.Delta.Type != "create" || ev.Payload.Delta.ID != "n1" || ev.Payload.Delta.Document["status"] != "open" ||
		ev.Payload.Delta.Timestamp == nil || *ev.Payload.Delta.Timestamp <= 0 {
		t.Fatalf("event %s as RealtimeEvent: %+v (%v)", got[0], ev, err)
	}

	// Another query under the live id: an error (onError), and the live
	// subscription goes on as it was.
	w.sendText(sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false))
	if m := w.expect("error"); m.ID != "sub-1" || m.str("code") != "BAD_REQUEST" || !strings.Contains(m.str("message"), "exists") || sdkSeesRefresh(m) {
		t.Fatalf("other query under a live id: %s", m)
	}
	// includeData and sendSnapshot are part of what must be the same.
	w.sendText(sdkSubscribe("sub-1", open, false, false))
	w.expect("error")
	w.sendText(sdkSubscribe("sub-1", open, true, true))
	w.expect("error")
	env.postDoc(t, alice.h(), notes, `{"id":"n4","status":"closed","title":"n4"}`)
	env.postDoc(t, alice.h(), notes, `{"id":"n5","status":"open","title":"n5"}`)
	if m := w.read(); !eventOf(m, "sub-1", "title", "n5") {
		t.Fatalf("after the refused subscribes: %s, want the n5 event", m)
	}
	if n := env.liveSubscriptions(t); n != 1 {
		t.Fatalf("%d live subscriptions, want 1", n)
	}

	w.sendText(sdkUnsubscribe("sub-1"))
	if m := w.expect("unsubscribe_ack"); m.ID != "unsub-sub-1" || m.str("subId") != "sub-1" {
		t.Fatalf("unsubscribe_ack=%s", m)
	}
	if n := env.liveSubscriptions(t); n != 0 {
		t.Fatalf("%d live subscriptions after unsubscribe, want 0", n)
	}
	// The id is free again, for any query.
	w.sendText(sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false))
	w.expect("subscribe_ack")
}

// A repeated subscribe of a subscription that asked for a snapshot sends no
// second snapshot.
func TestSyntrixRealtime_ResubscribeSendsNoSecondSnapshot(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	notes := "users/" + alice.UID + "/notes"
	env.postDoc(t, alice.h(), notes, `{"id":"a","title":"a"}`)
	env.postDoc(t, alice.h(), notes, `{"id":"b","title":"b"}`)

	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", alice.Access))
	w.expect("auth_ack")
	sub := sdkSubscribe("sub-1", sdkQuery(notes, ""), true, true)
	w.sendText(sub)
	w.expect("subscribe_ack")
	snap := w.expect("snapshot")
	if docs, _ := snap.Payload["documents"].([]any); snap.ID != "sub-1" || snap.str("subId") != "sub-1" || len(docs) != 2 {
		t.Fatalf("snapshot=%s", snap)
	}
	w.sendText(sub)
	w.expect("subscribe_ack")
	env.postDoc(t, alice.h(), notes, `{"id":"c","title":"c"}`)
	got := w.readUntil(func(m wsMsg) bool { return eventOf(m, "sub-1", "title", "c") })
	if len(got) != 1 {
		t.Fatalf("messages %v, want only the event (no second snapshot)", got)
	}
	w.quiet("after the event")
	if n := env.liveSubscriptions(t); n != 1 {
		t.Fatalf("%d live subscriptions, want 1", n)
	}
}

// tamper breaks a token's signature.
func tamper(tok string) string {
	last := tok[len(tok)-1]
	if last == 'A' {
		return tok[:len(tok)-1] + "B"
	}
	return tok[:len(tok)-1] + "A"
}

// The SDK's refresh-and-retry: an auth-init with a bad token gets an error
// whose message contains "unauthor", so the SDK refreshes its token (POST
// /auth/v1/refresh) and sends auth-retry; the auth_ack makes it re-send its
// subscription, which now opens, and events arrive once.
func TestSyntrixRealtime_SDKRefreshAndRetry(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	notes := "users/" + alice.UID + "/notes"
	sub := sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false)

	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", tamper(alice.Access)))
	w.sendText(sub) // the app's subscribe, sent while still anonymous
	bad := w.expect("error")
	if bad.ID != "auth-init" || bad.str("code") != "UNAUTHENTICATED" || !sdkSeesRefresh(bad) || !strings.HasPrefix(bad.str("message"), "Unauthorized: ") {
		t.Fatalf("bad token: %s, want an error the SDK refreshes on", bad)
	}
	// The anonymous subscribe is refused too (the SDK has already started
	// its one refresh for this connection, so it only reports it).
	if m := w.expect("error"); m.ID != "sub-1" || m.str("subId") != "sub-1" || m.str("code") != "UNAUTHENTICATED" || !sdkSeesRefresh(m) {
		t.Fatalf("anonymous subscribe: %s", m)
	}

	// tokenProvider.refreshToken()
	r := env.Do(t, "POST", "/auth/v1/refresh", `{"refresh_token":`+strconv.Quote(alice.Refresh)+`}`, anon)
	if r.Status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.Status, r.Body)
	}
	fresh, _ := r.JSON(t)["access_token"].(string)
	w.sendText(sdkAuth("auth-retry", fresh))
	if m := w.expect("auth_ack"); m.ID != "auth-retry" {
		t.Fatalf("auth_ack=%s", m)
	}
	w.sendText(sub)
	w.expect("subscribe_ack")

	// A later auth (another refresh) re-sends the subscription once more.
	w.sendText(sdkAuth("auth-retry", fresh))
	w.expect("auth_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")

	env.postDoc(t, alice.h(), notes, `{"id":"n1","title":"n1"}`)
	if m := w.read(); !eventOf(m, "sub-1", "title", "n1") {
		t.Fatalf("got %s, want the n1 event", m)
	}
	w.quiet("after the one event")
}

// A connection whose token expires gets an error the SDK refreshes on,
// then a policy-violation close; the SDK reconnects with the refreshed
// token, re-sends its subscription and gets events.
func TestSyntrixRealtime_SDKReconnectsAfterExpiry(t *testing.T) {
	// Expiry has one-second resolution: a 3 s token lives 2–3 s.
	env := newShortTokenEnv(t, 3*time.Second)
	u := env.signup(t, "expiring")
	notes := "users/" + u.UID + "/notes"
	sub := sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false)

	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", u.Access))
	w.sendText(sub)
	w.expect("auth_ack")
	w.expect("subscribe_ack")
	code, msgs := readUntilClose(t, w.conn, 10*time.Second)
	if code != websocket.ClosePolicyViolation {
		t.Fatalf("close %d, messages %s", code, msgs)
	}
	var expired wsMsg
	for _, line := range strings.Split(msgs, "\n") {
		var m struct {
			Type    string `json:"type"`
			Payload struct {
				Code, Message string
			} `json:"payload"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Type == "error" {
			expired = wsMsg{Type: m.Type, Payload: map[string]any{"code": m.Payload.Code, "message": m.Payload.Message}}
		}
	}
	if !sdkSeesRefresh(expired) || expired.str("code") != "UNAUTHENTICATED" {
		t.Fatalf("messages before the close: %s, want an error the SDK refreshes on", msgs)
	}

	// The token has expired: auth with it is refused in the same words.
	w2 := env.dialWS(t, "", anon)
	w2.sendText(sdkAuth("auth-init", u.Access))
	if m := w2.expect("error"); !sdkSeesRefresh(m) {
		t.Fatalf("expired token: %s", m)
	}

	r := env.Do(t, "POST", "/auth/v1/refresh", `{"refresh_token":`+strconv.Quote(u.Refresh)+`}`, anon)
	if r.Status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.Status, r.Body)
	}
	fresh, _ := r.JSON(t)["access_token"].(string)
	w3 := env.dialWS(t, "", anon)
	w3.sendText(sdkAuth("auth-init", fresh))
	w3.expect("auth_ack")
	w3.sendText(sub)
	w3.expect("subscribe_ack")
	env.postDoc(t, map[string]string{"Authorization": "Bearer " + fresh}, notes, `{"id":"n1","title":"n1"}`)
	if m := w3.read(); !eventOf(m, "sub-1", "title", "n1") {
		t.Fatalf("got %s, want the n1 event", m)
	}
}

// Every 401 answer and realtime UNAUTHENTICATED error says "Unauthorized: "
// first (so the SDK's includes('unauthor') matches); the code stays
// UNAUTHENTICATED.
func TestSyntrixRealtime_UnauthenticatedMessagesSayUnauthorized(t *testing.T) {
	env := newAuthEnv(t, server.Config{MetricsRequireKey: true})
	alice := env.signup(t, "alice")
	notes := api + "/documents/users/" + alice.UID + "/notes"
	cases := []struct {
		what         string
		method, path string
		headers      map[string]string
		reqBody      string
	}{
		{what: "bad bearer", method: "GET", path: notes, headers: map[string]string{"Authorization": "Bearer " + tamper(alice.Access)}},
		{what: "unknown key", method: "GET", path: notes, headers: map[string]string{"Authorization": "Bearer nope"}},
		{what: "anonymous read", method: "GET", path: notes, headers: anon},
		{what: "wrong password", method: "POST", path: "/auth/v1/login", headers: anon, reqBody: `{"username":"alice","password":"wrong password!"}`},
		{what: "bad refresh token", method: "POST", path: "/auth/v1/refresh", headers: anon, reqBody: `{"refresh_token":"nope"}`},
		{what: "anonymous metrics", method: "GET", path: "/metrics", headers: anon},
		{what: "anonymous replication", method: "GET", path: "/replication/rxdb/default/users/" + alice.UID + "/todos/0/pull", headers: anon},
		{what: "SSE with a bad token", method: "GET", path: "/realtime/v1/databases/default/sse?collection=c", headers: map[string]string{"Authorization": "Bearer nope"}},
	}
	for _, c := range cases {
		r := env.Do(t, c.method, c.path, c.reqBody, c.headers)
		var body struct{ Code, Message string }
		_ = json.Unmarshal(r.Body, &body)
		if r.Status != http.StatusUnauthorized || body.Code != "UNAUTHENTICATED" || !strings.HasPrefix(body.Message, "Unauthorized: ") {
			t.Errorf("%s: %d %s, want 401 UNAUTHENTICATED with \"Unauthorized: ...\"", c.what, r.Status, r.Body)
		}
	}
}

// syntrixITRules open the Go integration tests' collections to signed-in
// users (their rules file allows everything: read, write: "true").
func syntrixITRules(t testing.TB) *rules.Set {
	t.Helper()
	src := rules.DefaultSource()
	for _, c := range []string{"realtime_test_col", "sse_test_col", "stream_test_col", "realtime_filter_test", "live_updates"} {
		src += fmt.Sprintf("\n[[rule]]\nmatch = %q\nallow = [\"read\", \"write\"]\nif = \"request.auth != null\"\n", c+"/{id}")
	}
	rs, err := rules.Parse([]byte(src), "syntrix-it.toml")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The message structs of tests/integration/env_helper_test.go.
type (
	sxBaseMessage struct {
		ID      string          `json:"id,omitempty"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	sxAuthPayload struct {
		Token string `json:"token"`
	}
	sxSubscribePayload struct {
		Query        sxQuery `json:"query"`
		IncludeData  bool    `json:"includeData"`
		SendSnapshot bool    `json:"sendSnapshot"`
	}
	sxQuery struct {
		Collection string     `json:"collection"`
		Filters    []sxFilter `json:"filters,omitempty"`
	}
	sxFilter struct {
		Field string `json:"field"`
		Op    string `json:"op"`
		Value any    `json:"value"`
	}
	sxUnsubscribePayload struct {
		ID string `json:"id"`
	}
	sxEventPayload struct {
		SubID string        `json:"subId"`
		Delta sxPublicEvent `json:"delta"`
	}
	sxPublicEvent struct {
		Type     string         `json:"type"`
		Document map[string]any `json:"document,omitempty"`
		Path     string         `json:"path"`
	}
	sxSnapshotPayload struct {
		Documents []map[string]any `json:"documents"`
	}
)

func sxMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// sxConn is a connection as ConnectWebSocket dials it (no header).
type sxConn struct {
	t  *testing.T
	ws *websocket.Conn
}

func (e *testEnv) sxConnect(t *testing.T) *sxConn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(e.URL, "http")+"/realtime/ws", nil)
	if err != nil {
		t.Fatalf("Failed to connect to websocket: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	return &sxConn{t: t, ws: ws}
}

func (c *sxConn) write(m sxBaseMessage) {
	c.t.Helper()
	if err := c.ws.WriteJSON(m); err != nil {
		c.t.Fatal(err)
	}
}

// read is ws.ReadJSON under the tests' 5 s read deadline (a hang guard
// here: nothing below waits for it to pass).
func (c *sxConn) read() sxBaseMessage {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(rtGuard))
	var m sxBaseMessage
	if err := c.ws.ReadJSON(&m); err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return m
}

// authenticate is AuthenticateWebSocket.
func (c *sxConn) authenticate(id, token string) {
	c.t.Helper()
	c.write(sxBaseMessage{ID: id, Type: "auth", Payload: sxMarshal(sxAuthPayload{Token: token})})
	if m := c.read(); m.Type != "auth_ack" {
		c.t.Fatalf("Expected auth_ack, got %+v", m)
	}
}

func (c *sxConn) event() sxEventPayload {
	c.t.Helper()
	m := c.read()
	if m.Type != "event" {
		c.t.Fatalf("got %s %s, want an event", m.Type, m.Payload)
	}
	var p sxEventPayload
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// TestRealtime_FullFlow of realtime_test.go.
func TestSyntrixIT_RealtimeFullFlow(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: syntrixITRules(t)})
	u := env.signup(t, "realtime-user")
	ws := env.sxConnect(t)
	ws.authenticate("auth-"+t.Name(), u.Access)

	collectionName := "realtime_test_col"
	subID := "sub-1"
	ws.write(sxBaseMessage{ID: subID, Type: "subscribe", Payload: sxMarshal(sxSubscribePayload{
		Query: sxQuery{Collection: collectionName}, IncludeData: true,
	})})
	if ack := ws.read(); ack.Type != "subscribe_ack" || ack.ID != subID {
		t.Fatalf("Should receive subscribe ack: %+v", ack)
	}
	env.postDoc(t, u.h(), collectionName, `{"msg":"hello realtime"}`)
	ev := ws.event()
	if ev.SubID != subID || ev.Delta.Type != "create" || ev.Delta.Document["msg"] != "hello realtime" || !strings.HasPrefix(ev.Delta.Path, collectionName+"/") {
		t.Fatalf("event %+v", ev)
	}

	ws.write(sxBaseMessage{ID: "unsub-1", Type: "unsubscribe", Payload: sxMarshal(sxUnsubscribePayload{ID: subID})})
	if ack := ws.read(); ack.Type != "unsubscribe_ack" || ack.ID != "unsub-1" {
		t.Fatalf("unsubscribe ack: %+v", ack)
	}
	// "Should timeout and not receive event": the subscription is gone,
	// and nothing comes before the pong.
	env.postDoc(t, u.h(), collectionName, string(sxMarshal(map[string]any{"data": map[string]any{"msg": "should not receive"}})))
	if n := env.liveSubscriptions(t); n != 0 {
		t.Fatalf("%d live subscriptions after unsubscribe", n)
	}
	ws.write(sxBaseMessage{ID: "p", Type: "ping"})
	if m := ws.read(); m.Type != "pong" {
		t.Fatalf("got %+v after unsubscribe, want the pong", m)
	}
}

// readSSELine reads one line under a hang guard (the tests' readLine).
func readSSELine(t *testing.T, res *http.Response, rd *bufio.Reader) string {
	t.Helper()
	timer := time.AfterFunc(rtGuard, func() { res.Body.Close() })
	defer timer.Stop()
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("Timeout reading SSE stream: %v", err)
	}
	return line
}

// TestRealtime_SSE of realtime_test.go.
func TestSyntrixIT_RealtimeSSE(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: syntrixITRules(t)})
	u := env.signup(t, "realtime-sse-user")
	collectionName := "sse_test_col"
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/realtime/sse?collection=%s", env.URL, collectionName), nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+u.Access)
	req.Header.Set("Origin", env.URL)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(resp.Body)
	if line := readSSELine(t, resp, rd); line != ": connected\n" {
		t.Fatalf("first line %q", line)
	}
	if line := readSSELine(t, resp, rd); line != "\n" {
		t.Fatalf("second line %q", line)
	}
	env.postDoc(t, u.h(), collectionName, `{"msg":"hello sse"}`)
	for {
		line := readSSELine(t, resp, rd)
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var msg sxBaseMessage
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &msg); err == nil && msg.Type == "event" {
			var p sxEventPayload
			if err := json.Unmarshal(msg.Payload, &p); err == nil && p.Delta.Document["msg"] == "hello sse" {
				return
			}
		}
		t.Fatalf("unexpected data line %q", line)
	}
}

// TestRealtime_Stream of realtime_test.go.
func TestSyntrixIT_RealtimeStream(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: syntrixITRules(t)})
	u := env.signup(t, "realtime-stream-user")
	collectionName := "stream_test_col"
	env.postDoc(t, u.h(), collectionName, `{"msg":"existing doc"}`)

	ws := env.sxConnect(t)
	ws.authenticate("auth-stream", u.Access)
	streamID := "stream-1"
	ws.write(sxBaseMessage{ID: streamID, Type: "subscribe", Payload: sxMarshal(sxSubscribePayload{
		Query: sxQuery{Collection: collectionName}, IncludeData: true, SendSnapshot: true,
	})})
	receivedSnapshot := false
	for range 5 {
		msg := ws.read()
		if msg.Type == "snapshot" && msg.ID == streamID {
			var p sxSnapshotPayload
			if err := json.Unmarshal(msg.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Documents) > 0 && p.Documents[0]["msg"] == "existing doc" {
				receivedSnapshot = true
				break
			}
		}
	}
	if !receivedSnapshot {
		t.Fatal("Should receive Snapshot with existing document")
	}
	env.postDoc(t, u.h(), collectionName, `{"msg":"new doc"}`)
	receivedEvent := false
	for range 5 {
		msg := ws.read()
		if msg.Type == "event" {
			var p sxEventPayload
			if err := json.Unmarshal(msg.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.SubID == streamID && p.Delta.Document["msg"] == "new doc" {
				receivedEvent = true
				break
			}
		}
	}
	if !receivedEvent {
		t.Fatal("Should receive Event for new document")
	}
}

// TestRealtime_Filtering of realtime_test.go. The first connection stays
// open until the matching document is written: its first event must be
// that one, which shows the non-matching one was filtered out.
func TestSyntrixIT_RealtimeFiltering(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: syntrixITRules(t)})
	u := env.signup(t, "realtime-filter-user")
	ws := env.sxConnect(t)
	ws.authenticate("auth-1", u.Access)
	collectionName := "realtime_filter_test"
	filter := []sxFilter{{Field: "age", Op: ">", Value: 20}}
	ws.write(sxBaseMessage{ID: "sub-filter", Type: "subscribe", Payload: sxMarshal(sxSubscribePayload{
		Query: sxQuery{Collection: collectionName, Filters: filter}, IncludeData: true,
	})})
	if m := ws.read(); m.Type != "subscribe_ack" {
		t.Fatalf("subscribe ack: %+v", m)
	}
	env.postDoc(t, u.h(), collectionName, string(sxMarshal(map[string]any{"name": "Young Bob", "age": 18})))

	// "Reconnect to ensure clean state", auth with a plain map.
	ws2 := env.sxConnect(t)
	ws2.write(sxBaseMessage{Type: "auth", ID: "auth-2", Payload: sxMarshal(map[string]string{"token": u.Access})})
	ws2.read()
	ws2.write(sxBaseMessage{ID: "sub-filter-2", Type: "subscribe", Payload: sxMarshal(sxSubscribePayload{
		Query: sxQuery{Collection: collectionName, Filters: filter}, IncludeData: true,
	})})
	ws2.read()
	env.postDoc(t, u.h(), collectionName, string(sxMarshal(map[string]any{"name": "Adult Alice", "age": 25})))
	if ev := ws2.event(); ev.SubID != "sub-filter-2" || ev.Delta.Document["name"] != "Adult Alice" {
		t.Fatalf("Should receive matching event: %+v", ev)
	}
	if ev := ws.event(); ev.SubID != "sub-filter" || ev.Delta.Document["name"] != "Adult Alice" {
		t.Fatalf("first event of the first connection: %+v, want Adult Alice (Young Bob filtered out)", ev)
	}
}

// sdkSSE is RealtimeSSEClient.connect: fetch(buildUrl(collection), {method:
// 'GET', headers: token ? {Authorization: `Bearer ${token}`} : undefined})
// — no Accept header — against `${base}/realtime/v1/databases/${db}/sse`
// plus `?collection=${encodeURIComponent(collection)}` when there is one.
func sdkSSE(t *testing.T, env *testEnv, db, collection, token, extraQuery string) *http.Response {
	t.Helper()
	u := env.URL + "/realtime/v1/databases/" + db + "/sse"
	if collection != "" {
		// encodeURIComponent escapes "/" too.
		u += "?collection=" + strings.ReplaceAll(url.QueryEscape(collection), "+", "%20")
	}
	if extraQuery != "" {
		sep := "?"
		if collection != "" {
			sep = "&"
		}
		u += sep + extraQuery
	}
	req, _ := http.NewRequest("GET", u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// sdkSSEReader is RealtimeSSEClient's read loop: the body split on "\n\n";
// of each chunk the first line starting with "data:", sliced after
// "data:" and trimmed, is a JSON {type, payload}; chunks without one
// (comments) are skipped.
type sdkSSEReader struct {
	t        *testing.T
	res      *http.Response
	buf      string
	comments []string
}

type sdkSSEMessage struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func (r *sdkSSEReader) next() sdkSSEMessage {
	r.t.Helper()
	for {
		chunk := r.chunk()
		var data string
		found := false
		for _, l := range strings.Split(chunk, "\n") {
			if strings.HasPrefix(l, "data:") {
				data, found = strings.TrimSpace(l[5:]), true
				break
			}
		}
		if !found || data == "" {
			r.comments = append(r.comments, chunk)
			continue
		}
		var m sdkSSEMessage
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			r.t.Fatalf("JSON.parse(%q): %v", data, err)
		}
		return m
	}
}

// chunk is the next "\n\n"-terminated chunk of the body.
func (r *sdkSSEReader) chunk() string {
	r.t.Helper()
	timer := time.AfterFunc(rtGuard, func() { r.res.Body.Close() })
	defer timer.Stop()
	for {
		if i := strings.Index(r.buf, "\n\n"); i >= 0 {
			chunk := r.buf[:i]
			r.buf = r.buf[i+2:]
			return chunk
		}
		b := make([]byte, 4096)
		n, err := r.res.Body.Read(b)
		r.buf += string(b[:n])
		if err != nil && n == 0 {
			r.t.Fatalf("SSE read: %v", err)
		}
	}
}

// The SDK's SSE client: the path with the database, a Bearer header and no
// Accept header; ": connected" first; events as the {type, payload}
// envelopes it parses; heartbeats as comments it skips; security rules
// apply (one user never sees another's documents).
func TestSyntrixRealtime_SDKSSE(t *testing.T) {
	env := newAuthEnv(t, server.Config{Realtime: server.RealtimeConfig{SSEHeartbeat: 20 * time.Millisecond}})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")

	res := sdkSSE(t, env, "default", "users/*/notes", alice.Access, "")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	first := make([]byte, len(": connected\n\n"))
	if _, err := readFullGuarded(res, first); err != nil || string(first) != ": connected\n\n" {
		t.Fatalf("first bytes %q (%v)", first, err)
	}
	rd := &sdkSSEReader{t: t, res: res}
	// bob's note first, then alice's: the first event alice's stream
	// carries must be her own.
	env.postDoc(t, bob.h(), "users/"+bob.UID+"/notes", `{"id":"b1","owner":"bob"}`)
	env.postDoc(t, alice.h(), "users/"+alice.UID+"/notes", `{"id":"a1","owner":"alice"}`)
	m := rd.next()
	var ev struct {
		SubID string   `json:"subId"`
		Delta sdkDelta `json:"delta"`
	}
	if m.Type != "event" || json.Unmarshal(m.Payload, &ev) != nil || ev.Delta.Type != "create" || ev.Delta.ID != "a1" ||
		ev.Delta.Document["owner"] != "alice" || ev.Delta.Timestamp == nil || ev.SubID == "" {
		t.Fatalf("first event %s %s, want alice's a1", m.Type, m.Payload)
	}
	// Heartbeats are comment chunks, which the SDK skips; nothing else
	// comes while nothing of alice's is written.
	for range 3 {
		if c := rd.chunk(); c != ": heartbeat" {
			t.Fatalf("chunk %q, want a heartbeat comment", c)
		}
	}
}

func readFullGuarded(res *http.Response, b []byte) (int, error) {
	timer := time.AfterFunc(rtGuard, func() { res.Body.Close() })
	defer timer.Stop()
	n := 0
	for n < len(b) {
		m, err := res.Body.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// The database comes from the path: events of another database do not
// reach the stream; a ?database= that disagrees is refused; the SDK
// without a collection (no query string) gets 400, which it reports as
// "SSE connection failed: 400".
func TestSyntrixRealtime_SSEPathDatabase(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	res := sdkSSE(t, env, "other", "c", testAdminKey, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	rd := &sdkSSEReader{t: t, res: res}
	env.MustDo(t, http.StatusCreated, "PUT", api+"/documents/c/in-default", `{"doc":{"db":"default"}}`)
	env.MustDo(t, http.StatusCreated, "PUT", "/api/v1/databases/other/documents/c/in-other", `{"doc":{"db":"other"}}`)
	m := rd.next()
	if m.Type != "event" || !bytes.Contains(m.Payload, []byte(`"id":"in-other"`)) {
		t.Fatalf("first event %s %s, want in-other", m.Type, m.Payload)
	}

	for _, c := range []struct {
		what, db, collection, query string
		want                        int
	}{
		{"same ?database=", "default", "c", "database=default", http.StatusOK},
		{"other ?database=", "default", "c", "database=other", http.StatusBadRequest},
		{"invalid database", "bad.name", "c", "", http.StatusBadRequest},
		{"no collection", "default", "", "", http.StatusBadRequest},
	} {
		r := sdkSSE(t, env, c.db, c.collection, testAdminKey, c.query)
		if r.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.what, r.StatusCode, c.want)
		}
		if c.want != http.StatusOK {
			var body struct{ Code, Message string }
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Code == "" || body.Message == "" {
				t.Errorf("%s: error body %+v (%v)", c.what, body, err)
			}
		}
		r.Body.Close()
	}
}

// An SSE stream on the SDK's path whose token expires ends with an error
// envelope whose payload.message (what the SDK reports) says Unauthorized.
func TestSyntrixRealtime_SDKSSEExpiry(t *testing.T) {
	// Expiry has one-second resolution: a 3 s token lives 2–3 s, enough
	// to open the stream with it.
	env := newShortTokenEnv(t, 3*time.Second)
	u := env.signup(t, "sseexp")
	res := sdkSSE(t, env, "default", "users/"+u.UID+"/notes", u.Access, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	m := (&sdkSSEReader{t: t, res: res}).next()
	var p struct{ Code, Message string }
	if m.Type != "error" || json.Unmarshal(m.Payload, &p) != nil || p.Code != "UNAUTHENTICATED" || !strings.Contains(strings.ToLower(p.Message), "unauthor") {
		t.Fatalf("got %s %s", m.Type, m.Payload)
	}
}

// readUntilType of multidatabase_test.go: the first message of that type;
// an error message fails.
func (c *sxConn) readUntilType(typ string) sxBaseMessage {
	c.t.Helper()
	for {
		m := c.read()
		if m.Type == typ {
			return m
		}
		if m.Type == "error" {
			c.t.Fatalf("Received error from server: %s", m.Payload)
		}
	}
}

// TestMultiDatabase_RealtimeIsolation of multidatabase_test.go. A Syntrix
// token names its database; a Loom token does not, so each client names
// its database in the auth payload ({token, database}, as newer SDKs send
// it). Where the test waits 500 ms for silence on A, the port writes one
// more document to A's database: A's next event must be that one.
func TestSyntrixIT_MultiDatabaseRealtimeIsolation(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: syntrixITRules(t)})
	a, b := env.signup(t, "user-a"), env.signup(t, "user-b")
	collection := "live_updates"
	subscribe := func(c *sxConn, subID string) {
		c.write(sxBaseMessage{ID: subID, Type: "subscribe", Payload: sxMarshal(sxSubscribePayload{
			Query: sxQuery{Collection: collection}, IncludeData: true,
		})})
		c.readUntilType("subscribe_ack")
	}
	wsA := env.sxConnect(t)
	wsA.write(sxBaseMessage{ID: "auth-" + t.Name(), Type: "auth", Payload: sxMarshal(map[string]string{"token": a.Access, "database": "database-a"})})
	wsA.readUntilType("auth_ack")
	subscribe(wsA, "sub-a")
	wsB := env.sxConnect(t)
	wsB.write(sxBaseMessage{ID: "auth-" + t.Name(), Type: "auth", Payload: sxMarshal(map[string]string{"token": b.Access, "database": "database-b"})})
	wsB.readUntilType("auth_ack")
	subscribe(wsB, "sub-b")

	post := func(u user, db, msg string) {
		t.Helper()
		if r := env.Do(t, "POST", "/api/v1/databases/"+db+"/documents/"+collection, `{"msg":"`+msg+`"}`, u.h()); r.Status != http.StatusCreated {
			t.Fatalf("create in %s: %d %s", db, r.Status, r.Body)
		}
	}
	eventMsg := func(c *sxConn) any {
		t.Helper()
		var p sxEventPayload
		if err := json.Unmarshal(c.readUntilType("event").Payload, &p); err != nil {
			t.Fatal(err)
		}
		return p.Delta.Document["msg"]
	}
	post(a, "database-a", "Hello Database A")
	if got := eventMsg(wsA); got != "Hello Database A" {
		t.Fatalf("A got %v", got)
	}
	post(b, "database-b", "Hello Database B")
	if got := eventMsg(wsB); got != "Hello Database B" {
		t.Fatalf("B got %v", got)
	}
	post(a, "database-a", "marker")
	if got := eventMsg(wsA); got != "marker" {
		t.Fatalf("A got %v, want the marker (nothing of database B)", got)
	}
}

// A repeated subscribe is checked against the rules of now: once they no
// longer let the user list the collection, the repeat ends the live
// subscription with the error instead of confirming it.
func TestSyntrixRealtime_ResubscribeRechecksRules(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.toml")
	write := func(match string) {
		t.Helper()
		src := fmt.Sprintf("[[rule]]\nmatch = %q\nallow = [\"read\", \"write\"]\nif = \"request.auth != null\"\n", match)
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("boards/{board}/posts/{post}")
	env := newAuthEnv(t, server.Config{RulesFile: file})
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	alice := env.signup(t, "alice")
	sub := sdkSubscribe("sub-1", sdkQuery("boards/b1/posts", ""), true, false)

	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", alice.Access))
	w.expect("auth_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")

	write("other/{id}")
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	w.sendText(sub)
	if m := w.expect("error"); m.ID != "sub-1" || m.str("subId") != "sub-1" || m.str("code") != "PERMISSION_DENIED" {
		t.Fatalf("repeat after the rules closed the collection: %s", m)
	}
	if n := env.liveSubscriptions(t); n != 0 {
		t.Fatalf("%d live subscriptions, want 0: the repeat ends the subscription", n)
	}
}

// Under [compat] syntrix the realtime error codes take Syntrix's names
// (Loom's in details.code) while the messages, and so the SDK's refresh,
// stay the same; the SDK's session works the same way.
func TestSyntrixRealtime_CompatSDKSession(t *testing.T) {
	env := newAuthEnv(t, server.Config{SyntrixCompat: true})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	notes := "users/" + alice.UID + "/notes"
	sub := sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false)

	w := env.dialWS(t, "", anon)
	w.sendText(sdkAuth("auth-init", tamper(alice.Access)))
	bad := w.expect("error")
	d, _ := bad.Payload["details"].(map[string]any)
	if bad.str("code") != "unauthorized" || d["code"] != "UNAUTHENTICATED" || !sdkSeesRefresh(bad) {
		t.Fatalf("bad token under compat: %s", bad)
	}
	w.sendText(sdkAuth("auth-retry", alice.Access))
	w.expect("auth_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")
	w.sendText(sub)
	w.expect("subscribe_ack")
	w.sendText(sdkSubscribe("sub-1", sdkQuery(notes, `[{"field":"x","op":"==","value":1}]`), true, false))
	if m := w.expect("error"); m.str("code") != "BAD_REQUEST" || m.ID != "sub-1" {
		t.Fatalf("other query under a live id: %s", m)
	}
	// Another user's notes: FORBIDDEN, Loom's PERMISSION_DENIED in details.
	w.sendText(sdkSubscribe("sub-2", sdkQuery("users/"+bob.UID+"/notes", ""), true, false))
	m := w.expect("error")
	d, _ = m.Payload["details"].(map[string]any)
	if m.str("code") != "FORBIDDEN" || d["code"] != "PERMISSION_DENIED" || m.str("subId") != "sub-2" {
		t.Fatalf("subscribe to another user's notes: %s", m)
	}
	env.postDoc(t, alice.h(), notes, `{"id":"n1","title":"n1"}`)
	if m := w.read(); !eventOf(m, "sub-1", "title", "n1") {
		t.Fatalf("got %s, want the n1 event", m)
	}
	w.quiet("after the one event")

	// The SDK's SSE path: refusals are answered before the stream opens.
	for _, c := range []struct {
		what, collection, token, code, detail string
		status                                int
	}{
		{"bad token", notes, tamper(alice.Access), "UNAUTHORIZED", "UNAUTHENTICATED", http.StatusUnauthorized},
		{"another user's notes", "users/" + bob.UID + "/notes", alice.Access, "FORBIDDEN", "PERMISSION_DENIED", http.StatusForbidden},
	} {
		r := sdkSSE(t, env, "default", c.collection, c.token, "")
		var body struct {
			Code, Message string
			Details       map[string]any
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != c.status || body.Code != c.code || body.Details["code"] != c.detail {
			t.Errorf("SSE %s: %d %+v (%v)", c.what, r.StatusCode, body, err)
		}
		if c.status == http.StatusUnauthorized && !strings.HasPrefix(body.Message, "Unauthorized: ") {
			t.Errorf("SSE %s: message %q", c.what, body.Message)
		}
	}
}

// The newest RealtimeClient in the search index
// (sdk/syntrix-client-ts/src/replication/realtime.ts, index id 69360185822,
// no commit given) sends auth {token, database}, sends its subscribes only
// after the auth_ack that answers its own auth id, and refreshes its token
// (then auth-retry) only when the error answering that auth has
// payload.code === 'unauthorized', the code Syntrix's realtime server
// sends (docs: error {code: "unauthorized", message: "invalid token"}).
// Under [compat] syntrix Loom's realtime authentication errors carry that
// code (Loom's UNAUTHENTICATED in details.code); without the switch the
// code is Loom's and that SDK reports the error instead of refreshing.
func TestSyntrixRealtime_NewestSDKRefreshesOnCode(t *testing.T) {
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			env := newAuthEnv(t, server.Config{SyntrixCompat: compat})
			alice := env.signup(t, "alice")
			notes := "users/" + alice.UID + "/notes"
			auth := func(id, tok string) []byte {
				return []byte(`{"id":"` + id + `","type":"auth","payload":{"token":` + strconv.Quote(tok) + `,"database":"default"}}`)
			}
			w := env.dialWS(t, "", anon)
			w.sendText(auth("auth-init", tamper(alice.Access)))
			bad := w.expect("error")
			d, _ := bad.Payload["details"].(map[string]any)
			if !compat {
				if bad.ID != "auth-init" || bad.str("code") != "UNAUTHENTICATED" || d != nil {
					t.Fatalf("bad token: %s", bad)
				}
				return
			}
			// msg.id === attempt.authId && msg.payload.code === 'unauthorized'
			if bad.ID != "auth-init" || bad.str("code") != "unauthorized" || d["code"] != "UNAUTHENTICATED" || !strings.HasPrefix(bad.str("message"), "Unauthorized: ") {
				t.Fatalf("bad token under compat: %s, want id auth-init, code unauthorized", bad)
			}
			// tokenProvider.refreshToken(), then auth-retry with it.
			r := env.Do(t, "POST", "/auth/v1/refresh", `{"refresh_token":`+strconv.Quote(alice.Refresh)+`}`, anon)
			wantStatus(t, "refresh", r, http.StatusOK)
			fresh, _ := r.JSON(t)["access_token"].(string)
			w.sendText(auth("auth-retry", fresh))
			if m := w.expect("auth_ack"); m.ID != "auth-retry" {
				t.Fatalf("auth_ack %s, want id auth-retry", m)
			}
			// Subscribes go out after the ack, once each.
			w.sendText(sdkSubscribe("sub-1", sdkQuery(notes, ""), true, false))
			if m := w.expect("subscribe_ack"); m.ID != "sub-1" {
				t.Fatalf("subscribe_ack %s", m)
			}
			env.postDoc(t, alice.h(), notes, `{"id":"n1","title":"n1"}`)
			if m := w.read(); !eventOf(m, "sub-1", "title", "n1") {
				t.Fatalf("got %s, want the n1 event for payload.subId sub-1", m)
			}
			// Other realtime errors keep the names of the REST table.
			w.sendText(sdkSubscribe("sub-2", sdkQuery("users/someone-else/notes", ""), true, false))
			if m := w.expect("error"); m.ID != "sub-2" || m.str("code") != "FORBIDDEN" {
				t.Fatalf("forbidden subscribe: %s", m)
			}
		})
	}
}
