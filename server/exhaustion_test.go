package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/server"
)

// rawRequest writes raw bytes to a fresh connection to env and returns the
// status line's code and the connection (the caller closes it).
func rawRequest(t *testing.T, env *testEnv, raw string) (int, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(raw)); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		t.Fatalf("read response: %v", err)
	}
	res.Body.Close()
	return res.StatusCode, conn
}

var methodLabelRE = regexp.MustCompile(`loom_http_requests_total\{[^}]*method="([^"]*)"`)

// TestMetrics_LabelsFromFixedSets sends anonymous requests with huge,
// random methods to matched and unmatched routes: /metrics stays small and
// its method labels stay in the fixed set.
func TestMetrics_LabelsFromFixedSets(t *testing.T) {
	env := newEnv(t, server.Config{})
	before := len(env.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body)
	for i := range 40 {
		method := randomMethod(10 << 10)
		path := api + "/documents/notes/n1"
		if i%2 == 1 {
			path = fmt.Sprintf("/no/such/route/%d", i)
		}
		code, conn := rawRequest(t, env, method+" "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		conn.Close()
		if code < 400 {
			t.Fatalf("method %.10s...: status %d", method, code)
		}
	}
	body := env.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body
	// The new series are one "other" method per route and code, not 40
	// labels of 10 KiB.
	if len(body) > before+64<<10 {
		t.Fatalf("/metrics grew from %d to %d bytes", before, len(body))
	}
	allowed := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "OPTIONS": true, "CONNECT": true, "TRACE": true, "other": true}
	seen := map[string]bool{}
	for _, m := range methodLabelRE.FindAllStringSubmatch(string(body), -1) {
		if !allowed[m[1]] {
			t.Fatalf("method label %.40q is not from the fixed set", m[1])
		}
		seen[m[1]] = true
	}
	if !seen["other"] {
		t.Fatalf("no method=\"other\" series after unknown methods; labels %v", seen)
	}
	if strings.Contains(string(body), "/no/such/route") {
		t.Fatal("an unmatched path became a route label")
	}
	// A request head past 64 KiB is refused before any handler runs.
	code, conn := rawRequest(t, env, randomMethod(100<<10)+" /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	conn.Close()
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KB method: status %d, want 431", code)
	}
}

// TestMetrics_RequireKey: with MetricsRequireKey, /metrics needs the admin
// key or a key with the "metrics" role.
func TestMetrics_RequireKey(t *testing.T) {
	env := newAuthEnv(t, server.Config{MetricsRequireKey: true})
	alice := env.signup(t, "alice")
	wantStatus(t, "anonymous", env.Do(t, "GET", "/metrics", "", anon), http.StatusUnauthorized)
	wantStatus(t, "wrong key", env.Do(t, "GET", "/metrics", "", map[string]string{"X-API-Key": "nope"}), http.StatusUnauthorized)
	wantStatus(t, "user", env.Do(t, "GET", "/metrics", "", alice.h()), http.StatusForbidden)
	r := env.Do(t, "GET", "/metrics", "", nil)
	wantStatus(t, "admin key", r, http.StatusOK)
	if !strings.Contains(string(r.Body), "loom_http_requests_total") {
		t.Fatalf("admin scrape has no request metrics:\n%.400s", r.Body)
	}
	k := env.Do(t, "POST", "/admin/v1/keys", `{"name":"scraper","roles":["metrics"]}`, nil)
	wantStatus(t, "create scraper key", k, http.StatusCreated)
	key, _ := k.JSON(t)["key"].(string)
	wantStatus(t, "metrics-role key", env.Do(t, "GET", "/metrics", "", map[string]string{"X-API-Key": key}), http.StatusOK)

	open := newEnv(t, server.Config{})
	wantStatus(t, "default: public", open.Do(t, "GET", "/metrics", "", anon), http.StatusOK)
}

// partialRequest sends a request's head and the first bytes of its body
// on a fresh connection and reads the response the server gives without
// the rest. ok is false when no response came within wait (the server is
// waiting for the body).
func partialRequest(t *testing.T, env *testEnv, head, body string, wait time.Duration) (res *http.Response, ok bool) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(head + "\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	res, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, false
		}
		t.Fatalf("read response: %v", err)
	}
	return res, true
}

func head(method, path, auth string, length int) string {
	h := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: loom\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, length)
	if auth != "" {
		h += "Authorization: Bearer " + auth + "\r\n"
	}
	return h
}

func wantRawStatus(t *testing.T, what string, res *http.Response, ok bool, want int) {
	t.Helper()
	if !ok {
		t.Fatalf("%s: no response while the body is incomplete (the server waits for it), want %d", what, want)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	wantStatus(t, what, &response{Status: res.StatusCode, Header: res.Header, Body: b}, want)
}

// TestBodies_RefusedBeforeRead: under the default rules, a write that no
// rule could allow is refused while the client has sent a few bytes of a
// body announced as 10 MiB: the server neither waits for nor buffers it.
func TestBodies_RefusedBeforeRead(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	const tenMiB = 10 << 20
	own := api + "/documents/users/" + alice.UID + "/notes"
	tests := []struct {
		what, method, path, auth string
		want                     int
	}{
		{"anonymous PUT", "PUT", own + "/n1", "", http.StatusUnauthorized},
		{"anonymous PATCH", "PATCH", own + "/n1", "", http.StatusUnauthorized},
		{"anonymous POST", "POST", own, "", http.StatusUnauthorized},
		{"anonymous DELETE", "DELETE", own + "/n1", "", http.StatusUnauthorized},
		{"anonymous batch", "POST", api + "/batch", "", http.StatusUnauthorized},
		{"anonymous query", "POST", api + "/query", "", http.StatusUnauthorized},
		{"anonymous RxDB push", "POST", rxBase("users/"+alice.UID+"/notes") + "/push", "", http.StatusUnauthorized},
		{"bob PUT into alice's", "PUT", own + "/n1", bob.Access, http.StatusForbidden},
		{"bob POST into alice's", "POST", own, bob.Access, http.StatusForbidden},
		{"bob pushes into alice's", "POST", rxBase("users/"+alice.UID+"/notes") + "/push", bob.Access, http.StatusForbidden},
		{"alice writes a system collection", "PUT", api + "/documents/_x/y", alice.Access, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			res, ok := partialRequest(t, env, head(tt.method, tt.path, tt.auth, tenMiB), `{"doc":{"x":"`, 10*time.Second)
			wantRawStatus(t, tt.what, res, ok, tt.want)
		})
	}
	// The owner's own write is read and decided as before.
	wantStatus(t, "alice's own write", env.Do(t, "PUT", own+"/n1", `{"doc":{"x":1}}`, alice.h()), http.StatusCreated)
}

// TestBodies_TricklingBodyCutByReadTimeout: under rules that let anyone
// write, a body that stops arriving is cut by the read timeout; WebSocket,
// SSE and RxDB pullStream streams outlive it.
func TestBodies_TricklingBodyCutByReadTimeout(t *testing.T) {
	const readTimeout = time.Second
	env := newAuthEnv(t, server.Config{Rules: openRules(t), ReadTimeout: readTimeout})
	alice := env.signup(t, "alice")

	ws := env.dialWS(t, "", nil)
	ws.subscribe("s1", map[string]any{"query": q("open")})
	sse := env.openSSE(t, "collection=open", nil)
	coll := "users/" + alice.UID + "/todos"
	st := openStream(t, env, alice.h(), coll)

	res, ok := partialRequest(t, env, head("PUT", api+"/documents/open/d1", "", 1000), `{"doc":{"x":"`, 20*readTimeout)
	wantRawStatus(t, "trickled PUT", res, ok, http.StatusBadRequest)
	wantStatus(t, "nothing was written", env.Do(t, "GET", api+"/documents/open/d1", "", nil), http.StatusNotFound)

	// Well past the read timeout, every stream still delivers.
	time.Sleep(2 * readTimeout)
	wantStatus(t, "write", env.Do(t, "PUT", api+"/documents/open/d2", `{"doc":{"x":1}}`, anon), http.StatusCreated)
	if m := ws.expect("event"); m.delta()["id"] != "d2" {
		t.Fatalf("ws event %s, want d2", m)
	}
	if ev := sse.event(); !strings.Contains(ev.data, `"d2"`) {
		t.Fatalf("sse event %q, want d2", ev.data)
	}
	wantStatus(t, "put", env.Do(t, "PUT", api+"/documents/"+coll+"/live", `{"doc":{}}`, alice.h()), http.StatusCreated)
	if ev := st.next(t, 10*time.Second); len(ev.Documents) != 1 || ev.Documents[0]["id"] != "live" {
		t.Fatalf("pullStream event %+v, want live", ev)
	}
}

var bodyGaugeRE = regexp.MustCompile(`(?m)^loom_http_request_body_bytes_in_flight (\S+)$`)

// bodyBytesInFlight reads the body gauge from /metrics.
func bodyBytesInFlight(t *testing.T, env *testEnv) float64 {
	t.Helper()
	m := bodyGaugeRE.FindSubmatch(env.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body)
	if m == nil {
		t.Fatal("no loom_http_request_body_bytes_in_flight in /metrics")
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitBodyBytes waits until the server holds at least n body bytes (it
// reads a body as its bytes arrive, at its own pace).
func waitBodyBytes(t *testing.T, env *testEnv, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for v := bodyBytesInFlight(t, env); v < n; v = bodyBytesInFlight(t, env) {
		if time.Now().After(deadline) {
			t.Fatalf("body bytes in flight stuck at %v, want %v", v, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatus repeats a request (with a fresh document id each time) until
// it gets want: the server reads a stalled body as its bytes arrive, at
// its own pace.
func waitStatus(t *testing.T, env *testEnv, what, body string, want int) *response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		r := env.Do(t, "PUT", fmt.Sprintf("%s/documents/open/%s%d", api, what, i), body, anon)
		if r.Status == want {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %d, want %d; body %.200s", what, r.Status, want, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBodies_BytesInFlightBounded: bodies that are still arriving hold the
// server's budget; a body beyond it is refused with 503 and Retry-After
// rather than buffered, and the budget comes back when they end.
func TestBodies_BytesInFlightBounded(t *testing.T) {
	const budget = 64 << 10
	env := newAuthEnv(t, server.Config{Rules: openRules(t), MaxRequestBytes: budget, MaxBodyBytesInFlight: budget})

	// An anonymous client sends 50 KiB of a 60 KiB body, then stalls.
	filler := `{"doc":{"x":"` + strings.Repeat("a", 50<<10)
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(head("PUT", api+"/documents/open/big", "", 60<<10) + "\r\n" + filler)); err != nil {
		t.Fatal(err)
	}

	body := `{"doc":{"x":"` + strings.Repeat("b", 20<<10) + `"}}`
	// Wait until the server holds the stalled body's bytes (before that, a
	// concurrent body could take the budget first and the stalled one be
	// the one refused).
	waitBodyBytes(t, env, 50<<10)
	r := env.Do(t, "PUT", api+"/documents/open/refused", body, anon)
	checkErrorShape(t, r)
	if code := r.JSON(t)["code"]; code != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("code=%v Retry-After=%q, want UNAVAILABLE with Retry-After", code, r.Header.Get("Retry-After"))
	}
	if v := bodyBytesInFlight(t, env); v < 50<<10 || v > budget {
		t.Fatalf("body bytes in flight=%v, want the stalled body's (50 KiB..budget)", v)
	}
	wantStatus(t, "a small body still fits", env.Do(t, "PUT", api+"/documents/open/small", `{"doc":{"x":1}}`, anon), http.StatusCreated)
	// A WebSocket message is buffered like a body and draws on the same
	// budget.
	ws := env.dialWS(t, "", anon)
	ws.send(strings.Repeat("p", 20<<10), "ping", nil)
	if m := ws.expect("error"); m.str("code") != "UNAVAILABLE" {
		t.Fatalf("a WebSocket message beyond the budget: %s, want UNAVAILABLE", m)
	}
	ws.send("small", "ping", nil)
	if m := ws.expect("pong"); m.ID != "small" {
		t.Fatalf("pong=%s", m)
	}

	conn.Close()
	waitStatus(t, env, "accepted", body, http.StatusCreated)
	// A handler gives its bytes back when it returns, which may be just
	// after its client has the response.
	deadline := time.Now().Add(10 * time.Second)
	for v := bodyBytesInFlight(t, env); v != 0; v = bodyBytesInFlight(t, env) {
		if time.Now().After(deadline) {
			t.Fatalf("body bytes in flight=%v after every request ended, want 0", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantSubRefused sends a subscribe and expects the subscription-limit
// error for it.
func wantSubRefused(t *testing.T, w *wsClient, id, coll string) {
	t.Helper()
	w.send(id, "subscribe", map[string]any{"query": q(coll)})
	m := w.expect("error")
	if m.str("code") != "RATE_LIMITED" || m.str("subId") != id || !strings.Contains(m.str("message"), "subscriptions") {
		t.Fatalf("subscribe %s over the limit: %s, want RATE_LIMITED naming the subscription limit", id, m)
	}
}

// subscribeSoon subscribes, retrying while the limit still counts a
// subscription whose connection the client has closed (the server ends it
// when it notices).
func subscribeSoon(t *testing.T, w *wsClient, id, coll string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		sid := fmt.Sprintf("%s-%d", id, i)
		w.send(sid, "subscribe", map[string]any{"query": q(coll)})
		m := w.read()
		if m.Type == "subscribe_ack" {
			return
		}
		if m.str("code") != "RATE_LIMITED" || time.Now().After(deadline) {
			t.Fatalf("subscribe %s: %s, want an ack once the closed connection's subscriptions are gone", sid, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRealtime_SubscriptionLimits: live subscriptions are bounded per
// user over all connections and transports, and in total; slots come
// back on unsubscribe, on a failed subscribe and when a connection closes.
func TestRealtime_SubscriptionLimits(t *testing.T) {
	env := newAuthEnv(t, server.Config{Realtime: server.RealtimeConfig{MaxSubscriptionsPerUser: 3, MaxSubscriptionsTotal: 5}})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	aliceNotes, bobNotes := "users/"+alice.UID+"/notes", "users/"+bob.UID+"/notes"

	a1 := env.dialWS(t, "", alice.h())
	a2 := env.dialWS(t, "", alice.h())
	a1.subscribe("s1", map[string]any{"query": q(aliceNotes)})
	a1.subscribe("s2", map[string]any{"query": q(aliceNotes)})
	a2.subscribe("s3", map[string]any{"query": q(aliceNotes)})
	wantSubRefused(t, a2, "s4", aliceNotes) // a second connection does not get fresh slots
	r := env.Do(t, "GET", "/realtime/sse?collection="+aliceNotes, "", alice.h())
	wantStatus(t, "SSE over the per-user limit", r, http.StatusTooManyRequests)
	if r.JSON(t)["code"] != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("SSE refusal %s (Retry-After %q), want RATE_LIMITED with Retry-After", r.Body, r.Header.Get("Retry-After"))
	}

	// Unsubscribing frees a slot; a subscribe that fails after the checks
	// (a resume token ahead of the log) does not keep one.
	a1.send("u1", "unsubscribe", map[string]any{"id": "s1"})
	a1.expect("unsubscribe_ack")
	a2.send("ahead", "subscribe", map[string]any{"query": q(aliceNotes), "resumeToken": "999999"})
	if m := a2.expect("error"); m.str("code") != "BAD_REQUEST" {
		t.Fatalf("token ahead: %s", m)
	}
	a2.subscribe("s4", map[string]any{"query": q(aliceNotes)})
	wantSubRefused(t, a2, "s5", aliceNotes)

	// Bob has his own slots, until the server's total is reached.
	b := env.dialWS(t, "", bob.h())
	b.subscribe("b1", map[string]any{"query": q(bobNotes)})
	b.subscribe("b2", map[string]any{"query": q(bobNotes)})
	wantSubRefused(t, b, "b3", bobNotes)

	// Closing a connection frees its subscriptions.
	a1.conn.Close()
	subscribeSoon(t, b, "b3", bobNotes)
	wantSubRefused(t, b, "b4", bobNotes)

	// An SSE subscription counts too, and its end frees the slot.
	b.send("u", "unsubscribe", map[string]any{"id": "b1"})
	b.expect("unsubscribe_ack")
	sse := env.openSSE(t, "collection="+bobNotes, bob.h())
	wantSubRefused(t, b, "b5", bobNotes)
	sse.res.Body.Close()
	subscribeSoon(t, b, "b5", bobNotes)
}

// TestRealtime_SubscriptionLimitPerAddress: anonymous subscribers (under
// rules that let anyone read open/*) share one limit per client address.
func TestRealtime_SubscriptionLimitPerAddress(t *testing.T) {
	env := newAuthEnv(t, server.Config{Rules: openRules(t), Realtime: server.RealtimeConfig{MaxSubscriptionsPerUser: 2}})
	w1 := env.dialWS(t, "", anon)
	w2 := env.dialWS(t, "", anon)
	w1.subscribe("x1", map[string]any{"query": q("open")})
	w2.subscribe("x2", map[string]any{"query": q("open")})
	wantSubRefused(t, w1, "x3", "open")
	wantSubRefused(t, w2, "x3", "open")
	// The admin key is not bound by the per-user limit.
	admin := env.dialWS(t, "", nil)
	for i := range 4 {
		admin.subscribe(fmt.Sprintf("a%d", i), map[string]any{"query": q("open")})
	}
}

// TestBodies_ReadTimeoutSparesSlowHandlers: the read timeout bounds the
// body's arrival, not the handler: a handler that has its whole body and
// then works longer than the timeout keeps a live request context (the
// agent runtime's webhook handlers wait on an LLM that long).
func TestBodies_ReadTimeoutSparesSlowHandlers(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(3 * readTimeout):
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
			// The client never sees this when the connection is gone;
			// the status below is for the case where it is not.
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	env := newEnv(t, server.Config{ReadTimeout: readTimeout, Webhooks: slow})
	r := env.Do(t, "POST", "/webhooks/slow", `{"a":1}`, anon)
	if r.Status != http.StatusOK {
		t.Fatalf("slow handler: status %d, want 200 (its context was cancelled)", r.Status)
	}
}

// One client address may hold only its share of the body budget (a
// quarter, at least one largest request): its stalled uploads make its own
// next body 503, while another client's writes go through.
func TestBodies_OneClientHoldsOnlyItsShare(t *testing.T) {
	const budget = 256 << 10
	env := newAuthEnv(t, server.Config{Rules: openRules(t), MaxRequestBytes: 64 << 10, MaxBodyBytesInFlight: budget,
		TrustedProxies: []string{"127.0.0.1"}})
	fromA := map[string]string{"Authorization": "", "X-Forwarded-For": "198.51.100.7"}
	fromB := map[string]string{"Authorization": "", "X-Forwarded-For": "203.0.113.9"}

	// Client A sends 50 KiB of a 60 KiB body, then stalls: most of its
	// 64 KiB share.
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := head("PUT", api+"/documents/open/stalled", "", 60<<10) + "X-Forwarded-For: 198.51.100.7\r\n\r\n" + `{"doc":{"x":"` + strings.Repeat("a", 50<<10)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	waitBodyBytes(t, env, 50<<10)

	body := `{"doc":{"x":"` + strings.Repeat("b", 20<<10) + `"}}`
	r := env.Do(t, "PUT", api+"/documents/open/a2", body, fromA)
	checkErrorShape(t, r)
	if code := r.JSON(t)["code"]; code != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("A's second body: code=%v Retry-After=%q, want UNAVAILABLE with Retry-After", code, r.Header.Get("Retry-After"))
	}
	wantStatus(t, "B's body while A holds its share", env.Do(t, "PUT", api+"/documents/open/b1", body, fromB), http.StatusCreated)
}
