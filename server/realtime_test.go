package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/server"
)

// rtGuard bounds every realtime wait; it is a hang guard, never an
// expectation.
const rtGuard = 20 * time.Second

// wsMsg is one decoded server message.
type wsMsg struct {
	ID      string
	Type    string
	Payload map[string]any
	raw     []byte
}

func (m wsMsg) str(k string) string { s, _ := m.Payload[k].(string); return s }

func (m wsMsg) delta() map[string]any { d, _ := m.Payload["delta"].(map[string]any); return d }

func (m wsMsg) String() string { return string(m.raw) }

type wsClient struct {
	t    testing.TB
	conn *websocket.Conn
}

// dialWS connects to /realtime/ws (admin key unless headers set
// Authorization; "" removes it).
func (e *testEnv) dialWS(t testing.TB, query string, headers map[string]string) *wsClient {
	t.Helper()
	c, res, err := e.tryDialWS(query, headers)
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial ws: %v (status %d)", err, status)
	}
	w := &wsClient{t: t, conn: c}
	t.Cleanup(func() { c.Close() })
	return w
}

func (e *testEnv) tryDialWS(query string, headers map[string]string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{"Authorization": {"Bearer " + testAdminKey}}
	for k, v := range headers {
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
	}
	d := websocket.Dialer{HandshakeTimeout: rtGuard}
	return d.Dial("ws"+strings.TrimPrefix(e.URL, "http")+"/realtime/ws"+query, h)
}

func (w *wsClient) send(id, typ string, payload any) {
	w.t.Helper()
	m := map[string]any{"type": typ}
	if id != "" {
		m["id"] = id
	}
	if payload != nil {
		m["payload"] = payload
	}
	b, _ := json.Marshal(m)
	w.sendRaw(websocket.TextMessage, b)
}

func (w *wsClient) sendRaw(kind int, b []byte) {
	w.t.Helper()
	if err := w.conn.WriteMessage(kind, b); err != nil {
		w.t.Fatalf("ws write: %v", err)
	}
}

// read returns the next message other than a heartbeat.
func (w *wsClient) read() wsMsg {
	w.t.Helper()
	for {
		m, err := w.tryRead()
		if err != nil {
			w.t.Fatalf("ws read: %v", err)
		}
		if m.Type != "heartbeat" {
			return m
		}
	}
}

func (w *wsClient) tryRead() (wsMsg, error) {
	_ = w.conn.SetReadDeadline(time.Now().Add(rtGuard))
	_, b, err := w.conn.ReadMessage()
	if err != nil {
		return wsMsg{}, err
	}
	var m struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return wsMsg{}, fmt.Errorf("bad server message %s: %w", b, err)
	}
	out := wsMsg{ID: m.ID, Type: m.Type, raw: b}
	if len(m.Payload) > 0 {
		if out.Payload, err = collections.DecodeObject(m.Payload); err != nil {
			return wsMsg{}, fmt.Errorf("bad payload %s: %w", b, err)
		}
	}
	return out, nil
}

func (w *wsClient) expect(typ string) wsMsg {
	w.t.Helper()
	m := w.read()
	if m.Type != typ {
		w.t.Fatalf("got %s, want a %s message", m, typ)
	}
	return m
}

// subscribe sends a subscribe and waits for its ack.
func (w *wsClient) subscribe(id string, payload map[string]any) wsMsg {
	w.t.Helper()
	w.send(id, "subscribe", payload)
	ack := w.expect("subscribe_ack")
	if ack.ID != id || ack.str("subId") != id || ack.str("resumeToken") == "" {
		w.t.Fatalf("ack=%s, want subId %q and a resumeToken", ack, id)
	}
	return ack
}

func q(coll string, filters ...collections.Filter) map[string]any {
	m := map[string]any{"collection": coll}
	if len(filters) > 0 {
		m["filters"] = filters
	}
	return m
}

// deltaKey is type/op path.
func deltaKey(m wsMsg) string {
	d := m.delta()
	return fmt.Sprintf("%v/%v %v", d["type"], d["op"], d["path"])
}

func storeCommit(t testing.TB, st collections.Store, ws ...collections.Write) int64 {
	t.Helper()
	res, err := st.Commit(context.Background(), "default", ws, collections.CommitOptions{})
	if err != nil {
		t.Errorf("commit: %v", err)
		return 0
	}
	return res[len(res)-1].Doc.Seq
}

func putW(path string, data map[string]any) collections.Write {
	if data == nil {
		data = map[string]any{}
	}
	return collections.Write{Type: collections.WriteReplace, Path: path, Data: data}
}

func TestRealtimeWS_SubscribeDeltas(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{Realtime: server.RealtimeConfig{Heartbeat: 20 * time.Millisecond}})
	w := env.dialWS(t, "", nil)
	w.subscribe("all", map[string]any{"query": q("rooms")})
	w.subscribe("hot", map[string]any{"query": q("rooms", collections.Filter{Field: "n", Op: ">", Value: 5}), "includeData": false})
	w.subscribe("msgs", map[string]any{"query": q("rooms/*/msgs")})

	env.MustDo(t, 201, "PUT", api+"/documents/rooms/a", `{"doc":{"n":1}}`)
	env.MustDo(t, 200, "PATCH", api+"/documents/rooms/a", `{"doc":{"n":9}}`) // enters hot
	env.MustDo(t, 200, "PATCH", api+"/documents/rooms/a", `{"doc":{"n":2}}`) // leaves hot
	env.MustDo(t, 201, "PUT", api+"/documents/rooms/x/msgs/m1", `{"doc":{"t":"hi"}}`)
	env.MustDo(t, 204, "DELETE", api+"/documents/rooms/a", ``)

	want := map[string][]string{
		"all":  {"create/create rooms/a", "update/update rooms/a", "update/update rooms/a", "delete/delete rooms/a"},
		"hot":  {"create/update rooms/a", "delete/update rooms/a"},
		"msgs": {"create/create rooms/x/msgs/m1"},
	}
	got := map[string][]wsMsg{}
	for n := 0; n < 7; n++ {
		m := w.expect("event")
		got[m.str("subId")] = append(got[m.str("subId")], m)
	}
	for sub, keys := range want {
		if len(got[sub]) != len(keys) {
			t.Fatalf("%s: %d events, want %d", sub, len(got[sub]), len(keys))
		}
		for i, k := range keys {
			if g := deltaKey(got[sub][i]); g != k {
				t.Fatalf("%s[%d]=%s, want %s", sub, i, g, k)
			}
		}
	}
	first := got["all"][0].delta()
	doc, _ := first["document"].(map[string]any)
	if first["id"] != "a" || first["collection"] != "rooms" || doc["n"] != json.Number("1") || doc["version"] != json.Number("1") || first["timestamp"] == nil {
		t.Fatalf("create delta=%v", first)
	}
	if _, ok := first["before"]; ok {
		t.Fatalf("create delta has before: %v", first)
	}
	upd := got["all"][1].delta()
	if b, _ := upd["before"].(map[string]any); b["n"] != json.Number("1") {
		t.Fatalf("update delta before=%v, want n=1", upd["before"])
	}
	if d := got["all"][3].delta(); d["document"] != nil || d["before"] == nil {
		t.Fatalf("delete delta=%v, want before and no document", d)
	}
	if d := got["hot"][0].delta(); d["document"] != nil || d["before"] != nil {
		t.Fatalf("includeData=false delta carries data: %v", d)
	}
	// Tokens increase along one subscription.
	if got["all"][0].str("resumeToken") >= got["all"][1].str("resumeToken") && len(got["all"][0].str("resumeToken")) == len(got["all"][1].str("resumeToken")) {
		t.Fatalf("tokens do not increase: %s then %s", got["all"][0], got["all"][1])
	}

	// ping → pong; unsubscribe → ack and no more events of it.
	w.send("p1", "ping", nil)
	if m := w.expect("pong"); m.ID != "p1" {
		t.Fatalf("pong=%s, want id p1", m)
	}
	w.send("u1", "unsubscribe", map[string]any{"id": "all"})
	if m := w.expect("unsubscribe_ack"); m.ID != "u1" || m.str("subId") != "all" {
		t.Fatalf("unsubscribe_ack=%s", m)
	}
	env.MustDo(t, 201, "PUT", api+"/documents/rooms/x/msgs/m2", `{"doc":{}}`)
	if m := w.expect("event"); m.str("subId") != "msgs" {
		t.Fatalf("event after unsubscribe: %s", m)
	}
	// Heartbeats arrive at the configured interval.
	for {
		m, err := w.tryRead()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if m.Type == "heartbeat" {
			break
		}
	}
}

func TestRealtimeWS_ResumeAfterDisconnect(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c")})
	storeCommit(t, env.Store, putW("c/first", nil))
	tok := w.expect("event").str("resumeToken")
	w.conn.Close()

	for i := range 30 {
		storeCommit(t, env.Store, putW(fmt.Sprintf("c/d%02d", i), nil), putW("other/x", nil))
	}
	w = env.dialWS(t, "", nil)
	if ack := w.subscribe("s", map[string]any{"query": q("c"), "resumeToken": tok}); ack.str("resumeToken") != tok {
		t.Fatalf("ack token=%s, want the resume token %s", ack.str("resumeToken"), tok)
	}
	go storeCommit(t, env.Store, putW("c/live", nil))
	for i := range 31 {
		m := w.expect("event")
		want := fmt.Sprintf("create/create c/d%02d", i)
		if i == 30 {
			want = "create/create c/live"
		}
		if g := deltaKey(m); g != want {
			t.Fatalf("event %d=%s, want %s", i, g, want)
		}
	}
	w.send("p", "ping", nil)
	if m := w.read(); m.Type != "pong" {
		t.Fatalf("after the last event got %s, want pong (a duplicate?)", m)
	}
	w.send("bad", "subscribe", map[string]any{"query": q("c"), "resumeToken": "99999999"})
	if m := w.expect("error"); m.str("code") != "BAD_REQUEST" {
		t.Fatalf("token ahead of the log: %s", m)
	}
}

// A subscription the hub ends (here a reset) gives its slot back at once,
// not when its id is reused or the connection closes: a client that
// resubscribes under a new id is not refused.
func TestRealtimeWS_EndedSubscriptionFreesItsSlot(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db"), Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := MustStartServer(t, st, server.Config{Realtime: server.RealtimeConfig{MaxSubscriptionsTotal: 1}})
	first := storeCommit(t, st, putW("c/a", nil))
	storeCommit(t, st, putW("c/b", nil))
	time.Sleep(5 * time.Millisecond) // age the changes past the 1 ms retention
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c"), "resumeToken": fmt.Sprint(first - 1)})
	if m := w.expect("reset"); m.str("subId") != "s" {
		t.Fatalf("reset=%s", m)
	}
	w.subscribe("t", map[string]any{"query": q("c"), "sendSnapshot": true})
}

func TestRealtimeWS_ResumeExpiredResets(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db"), Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := MustStartServer(t, st, server.Config{})
	first := storeCommit(t, st, putW("c/a", nil))
	storeCommit(t, st, putW("c/b", nil))
	time.Sleep(5 * time.Millisecond) // age the changes past the 1 ms retention
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c"), "resumeToken": fmt.Sprint(first - 1)})
	if m := w.expect("reset"); m.ID != "s" || m.str("subId") != "s" || m.str("reason") == "" {
		t.Fatalf("reset=%s", m)
	}
	// The id is free again: re-snapshot.
	w.subscribe("s", map[string]any{"query": q("c"), "sendSnapshot": true})
	if m := w.expect("snapshot"); len(m.Payload["documents"].([]any)) != 2 {
		t.Fatalf("snapshot=%s, want 2 documents", m)
	}
}

func TestRealtimeWS_SlowConsumerResubscribes(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{Realtime: server.RealtimeConfig{QueueSize: 4}})
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c")})
	// One event first: the subscription is then live (while it catches up
	// an overflow only re-arms it), so the first 10-write commit overflows.
	storeCommit(t, env.Store, putW("c/d000", nil))
	first := w.expect("event")
	const batches, per = 30, 10
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range batches {
			ws := make([]collections.Write, per)
			for i := range ws {
				ws[i] = putW(fmt.Sprintf("c/d%03d", b*per+i+1), nil)
			}
			storeCommit(t, env.Store, ws...)
		}
	}()
	seen := []string{"c/d000"}
	last := first.str("resumeToken")
	slow := 0
	for len(seen) < batches*per+1 {
		m := w.read()
		switch m.Type {
		case "event":
			seen = append(seen, m.delta()["path"].(string))
			last = m.str("resumeToken")
		case "error":
			if m.str("code") != "SLOW_CONSUMER" || m.str("subId") != "s" {
				t.Fatalf("error=%s", m)
			}
			if last != "" && m.str("resumeToken") != last {
				t.Fatalf("SLOW_CONSUMER token=%s, want the last delivered %s", m.str("resumeToken"), last)
			}
			slow++
			w.subscribe("s", map[string]any{"query": q("c"), "resumeToken": m.str("resumeToken")})
		default:
			t.Fatalf("unexpected %s", m)
		}
	}
	<-done
	if slow == 0 {
		t.Fatalf("no SLOW_CONSUMER with a 4-slot queue and 10-write commits")
	}
	for i, p := range seen {
		if want := fmt.Sprintf("c/d%03d", i); p != want {
			t.Fatalf("event %d=%s, want %s (gap or duplicate)", i, p, want)
		}
	}
	r := env.Do(t, "GET", "/metrics", "", nil)
	if !strings.Contains(string(r.Body), `loom_realtime_slow_consumers_total{transport="ws"}`) || !strings.Contains(string(r.Body), `loom_realtime_connections{transport="ws"} 1`) {
		t.Fatalf("metrics lack the realtime series")
	}
}

func TestRealtimeWS_SnapshotNoGapNoOverlap(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{Realtime: server.RealtimeConfig{QueueSize: 64}})
	const docs = 400
	for i := 0; i < docs; i += 100 {
		ws := make([]collections.Write, 100)
		for j := range ws {
			ws[j] = putW(fmt.Sprintf("c/d%03d", i+j), map[string]any{"v": json.Number("0")})
		}
		storeCommit(t, env.Store, ws...)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for wr := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("c/d%03d", (n*13+wr*131)%docs)
				if n%9 == 0 {
					_, _ = env.Store.Commit(context.Background(), "default", []collections.Write{{Type: collections.WriteDelete, Path: p}}, collections.CommitOptions{})
					continue
				}
				storeCommit(t, env.Store, putW(p, map[string]any{"v": json.Number(fmt.Sprint(n))}))
			}
		}()
	}
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c"), "sendSnapshot": true})
	state := map[string]json.Number{} // path → version held by the client
	for {
		m := w.expect("snapshot")
		for _, d := range m.Payload["documents"].([]any) {
			d := d.(map[string]any)
			state["c/"+d["id"].(string)] = d["version"].(json.Number)
		}
		if m.Payload["more"] != true {
			break
		}
	}
	var last string
	apply := func(m wsMsg) {
		d := m.delta()
		p := d["path"].(string)
		have, held := state[p]
		var before json.Number
		if b, ok := d["before"].(map[string]any); ok {
			before = b["version"].(json.Number)
		}
		switch d["type"] {
		case "create":
			if held {
				t.Fatalf("create of %s already held at v%s: %s", p, have, m)
			}
			state[p] = d["document"].(map[string]any)["version"].(json.Number)
		case "update":
			if !held || before != have {
				t.Fatalf("update of %s from v%s, client holds v%s (%v): overlap or gap", p, before, have, held)
			}
			state[p] = d["document"].(map[string]any)["version"].(json.Number)
		case "delete":
			if held && before != have {
				t.Fatalf("delete of %s from v%s, client holds v%s", p, before, have)
			}
			delete(state, p)
		}
		last = m.str("resumeToken")
	}
	for range 150 {
		apply(w.expect("event"))
	}
	close(stop)
	wg.Wait()
	head := fmt.Sprint(env.Head(t))
	for last != head {
		apply(w.expect("event"))
	}
	res, err := env.Store.Query(context.Background(), "default", collections.Query{Collection: "c", Limit: collections.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Docs) != len(state) {
		t.Fatalf("client holds %d documents, store %d", len(state), len(res.Docs))
	}
	for _, d := range res.Docs {
		if state[d.Path] != json.Number(fmt.Sprint(d.Version)) {
			t.Fatalf("%s: client v%s, store v%d", d.Path, state[d.Path], d.Version)
		}
	}
}

func TestRealtimeWS_Rules(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")

	// Anonymous: the auth message comes later.
	w := env.dialWS(t, "", map[string]string{"Authorization": ""})
	w.send("s0", "subscribe", map[string]any{"query": q("users/*/notes")})
	if m := w.expect("error"); m.str("code") != "UNAUTHENTICATED" || m.str("subId") != "s0" {
		t.Fatalf("anonymous subscribe: %s", m)
	}
	w.send("a1", "auth", map[string]any{"token": "garbage"})
	if m := w.expect("error"); m.str("code") != "UNAUTHENTICATED" || m.ID != "a1" {
		t.Fatalf("bad token: %s", m)
	}
	w.send("a2", "auth", map[string]any{"token": alice.Access, "database": "default"})
	if m := w.expect("auth_ack"); m.ID != "a2" {
		t.Fatalf("auth_ack=%s", m)
	}
	w.send("rooms", "subscribe", map[string]any{"query": q("rooms")})
	if m := w.expect("error"); m.str("code") != "PERMISSION_DENIED" || m.str("subId") != "rooms" {
		t.Fatalf("subscribe where no rule allows: %s", m)
	}
	w.send("sys", "subscribe", map[string]any{"query": q("_users")})
	if m := w.expect("error"); m.str("code") != "PERMISSION_DENIED" {
		t.Fatalf("subscribe to a system collection: %s", m)
	}
	w.subscribe("notes", map[string]any{"query": q("users/*/notes")})

	// Bob's connection authenticates with the header.
	wb := env.dialWS(t, "", bob.h())
	wb.subscribe("notes", map[string]any{"query": q("users/*/notes"), "sendSnapshot": true})
	wb.expect("snapshot")

	for i := range 3 {
		for _, u := range []user{bob, alice} {
			wantStatus(t, "write", env.Do(t, "PUT", fmt.Sprintf("%s/documents/users/%s/notes/n%d", api, u.UID, i), `{"doc":{"owner":"`+u.Name+`"}}`, u.h()), http.StatusCreated)
		}
	}
	for _, c := range []struct {
		w    *wsClient
		name string
	}{{w, "alice"}, {wb, "bob"}} {
		for i := range 3 {
			m := c.w.expect("event")
			d := m.delta()
			if owner := d["document"].(map[string]any)["owner"]; owner != c.name || d["id"] != fmt.Sprintf("n%d", i) {
				t.Fatalf("%s got %s", c.name, m)
			}
		}
		c.w.send("p", "ping", nil)
		if m := c.w.read(); m.Type != "pong" {
			t.Fatalf("%s got %s, want nothing but its own documents", c.name, m)
		}
	}
}

func TestRealtimeWS_MalformedMessages(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	w := env.dialWS(t, "", nil)
	cases := []struct {
		name string
		kind int
		msg  []byte
		code string
	}{
		{"not JSON", websocket.TextMessage, []byte("{nope"), "INVALID_JSON"},
		{"unknown type", websocket.TextMessage, []byte(`{"type":"frobnicate"}`), "BAD_REQUEST"},
		{"binary", websocket.BinaryMessage, []byte{1, 2, 3}, "BAD_REQUEST"},
		{"too large", websocket.TextMessage, []byte(`{"type":"ping","payload":{"x":"` + strings.Repeat("x", 70<<10) + `"}}`), "REQUEST_TOO_LARGE"},
		{"subscribe without id", websocket.TextMessage, []byte(`{"type":"subscribe","payload":{"query":{"collection":"c"}}}`), "BAD_REQUEST"},
		{"bad query", websocket.TextMessage, []byte(`{"id":"q","type":"subscribe","payload":{"query":{"collection":"a/b"}}}`), "INVALID_PATH"},
		{"bad filter", websocket.TextMessage, []byte(`{"id":"q","type":"subscribe","payload":{"query":{"collection":"c","filters":[{"field":"x","op":"~","value":1}]}}}`), "INVALID_QUERY"},
		{"bad token", websocket.TextMessage, []byte(`{"id":"q","type":"subscribe","payload":{"query":{"collection":"c"},"resumeToken":"abc"}}`), "BAD_REQUEST"},
		{"unknown payload key", websocket.TextMessage, []byte(`{"id":"q","type":"subscribe","payload":{"qeury":{}}}`), "BAD_REQUEST"},
	}
	for _, c := range cases {
		w.sendRaw(c.kind, c.msg)
		if m := w.expect("error"); m.str("code") != c.code || m.str("message") == "" {
			t.Fatalf("%s: got %s, want error %s", c.name, m, c.code)
		}
	}
	// Still usable; then one more bad message reaches the limit of 10.
	w.send("p", "ping", nil)
	w.expect("pong")
	w.sendRaw(websocket.TextMessage, []byte("garbage"))
	w.expect("error")
	_, err := w.tryRead()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("after 10 bad messages: err=%v, want close 1008", err)
	}

	// Origin check on the upgrade.
	if _, res, err := env.tryDialWS("", map[string]string{"Origin": "http://evil.example"}); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: err=%v res=%v, want 403", err, res)
	}
	if _, res, err := env.tryDialWS("", map[string]string{"Authorization": "Bearer wrong"}); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad credential: err=%v, want 401", err)
	}
}

// sseStream reads one SSE response.
type sseStream struct {
	t    testing.TB
	res  *http.Response
	rd   *bufio.Reader
	body func() error
}

type sseEvent struct {
	id, data string
	comment  bool
}

func (e *testEnv) openSSE(t testing.TB, query string, headers map[string]string) *sseStream {
	t.Helper()
	req, _ := http.NewRequest("GET", e.URL+"/realtime/sse?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	setHeaders(req, headers)
	res, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("sse: %v", err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("sse: status %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return &sseStream{t: t, res: res, rd: bufio.NewReader(res.Body)}
}

// next reads one event or comment block (hang-guarded by a timer that
// closes the body).
func (s *sseStream) next() (sseEvent, error) {
	timer := time.AfterFunc(rtGuard, func() { s.res.Body.Close() })
	defer timer.Stop()
	var ev sseEvent
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, ":"):
			ev.comment = true
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

func (s *sseStream) event() sseEvent {
	s.t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			s.t.Fatalf("sse read: %v", err)
		}
		if !ev.comment {
			return ev
		}
	}
}

func TestRealtimeSSE_ResumeWithLastEventID(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{Realtime: server.RealtimeConfig{SSEHeartbeat: 20 * time.Millisecond}})
	filters := `[{"field":"n","op":">=","value":1}]`
	s := env.openSSE(t, "collection=c&filters="+strings.ReplaceAll(filters, " ", "%20"), nil)
	storeCommit(t, env.Store, putW("c/skip", map[string]any{"n": json.Number("0")}))
	storeCommit(t, env.Store, putW("c/a", map[string]any{"n": json.Number("1")}))
	ev := s.event()
	var m struct {
		Type    string `json:"type"`
		Payload struct {
			SubID       string            `json:"subId"`
			ResumeToken string            `json:"resumeToken"`
			Delta       map[string]any    `json:"delta"`
			Document    map[string]string `json:"-"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(ev.data), &m); err != nil || m.Type != "event" || m.Payload.ResumeToken != ev.id || m.Payload.Delta["path"] != "c/a" {
		t.Fatalf("sse event id=%s data=%s (%v)", ev.id, ev.data, err)
	}
	// A comment heartbeat arrives while idle.
	for {
		hb, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if hb.comment {
			break
		}
	}
	s.res.Body.Close()
	for i := range 5 {
		storeCommit(t, env.Store, putW(fmt.Sprintf("c/m%d", i), map[string]any{"n": json.Number("2")}))
	}
	r := env.openSSE(t, "collection=c&filters="+filters, map[string]string{"Last-Event-ID": ev.id})
	for i := range 5 {
		e := r.event()
		if !strings.Contains(e.data, fmt.Sprintf(`"path":"c/m%d"`, i)) {
			t.Fatalf("resumed event %d: %s", i, e.data)
		}
	}
	// The lastEventId parameter and access_token work the same way; a bad
	// token is refused before the stream starts.
	p := env.openSSE(t, "collection=c&lastEventId="+ev.id+"&access_token="+testAdminKey, map[string]string{"Authorization": ""})
	if e := p.event(); !strings.Contains(e.data, `"path":"c/m0"`) {
		t.Fatalf("lastEventId resume: %s", e.data)
	}
	wantSSERefused(t, "bad access_token", env.trySSE(t, "/realtime/sse?collection=c&access_token=nope", anon), http.StatusUnauthorized, "UNAUTHENTICATED")
	wantSSERefused(t, "bad filters", env.trySSE(t, "/realtime/sse?collection=c&filters=%5B1", nil), http.StatusBadRequest, "INVALID_QUERY")
}

func TestRealtime_GracefulShutdownClosesStreams(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	w := env.dialWS(t, "", nil)
	w.subscribe("s", map[string]any{"query": q("c")})
	s := env.openSSE(t, "collection=c", nil)
	if _, err := s.next(); err != nil { // ": connected"
		t.Fatal(err)
	}
	env.Shutdown()
	_, err := w.tryRead()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("ws after shutdown: err=%v, want close 1001", err)
	}
	for {
		if _, err := s.next(); err != nil {
			break // the stream ended
		}
	}
	if err := env.WaitServe(t, rtGuard); err != nil {
		t.Fatalf("Serve=%v, want nil", err)
	}
}
