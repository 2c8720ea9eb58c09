package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/triggers"
)

// testSecret is a fixed Standard Webhooks secret.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// received is one request a receiver saw.
type received struct {
	ID        string
	Timestamp string
	Signature string
	Body      map[string]any
	Raw       []byte
	At        time.Time
}

// receiver is a real HTTP server that records webhooks and answers with
// the status its respond func picks (200 by default).
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []received
	respond func(r received, n int) (status int, header http.Header)
	notify  chan struct{}
}

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{notify: make(chan struct{}, 1)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		rec := received{ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"),
			Signature: r.Header.Get("webhook-signature"), Body: body, Raw: raw, At: time.Now()}
		rc.mu.Lock()
		rc.got = append(rc.got, rec)
		n := len(rc.got)
		respond := rc.respond
		rc.mu.Unlock()
		status := http.StatusOK
		if respond != nil {
			var h http.Header
			status, h = respond(rec, n)
			for k, v := range h {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"ok":true}`))
		select {
		case rc.notify <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// waitFor polls until cond holds over the received requests.
func (rc *receiver) waitFor(t testing.TB, what string, timeout time.Duration, cond func([]received) bool) []received {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := rc.requests()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; got %d requests", what, len(got))
		}
		select {
		case <-rc.notify:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type pipeEnv struct {
	store collections.Store
	svc   *triggers.Service
	file  string
	stop  func()
}

func openStore(t testing.TB, dir string) collections.Store {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "loom.db"), Indexes: triggers.Indexes})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startEnv writes triggers.json, opens a real SQLite store and runs the
// pipeline; cfg fields override the test defaults.
func startEnv(t testing.TB, triggersJSON string, cfg triggers.Config) *pipeEnv {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(file, []byte(triggersJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dir)
	e := &pipeEnv{store: st, file: file}
	e.start(t, cfg)
	t.Cleanup(func() {
		e.stop()
		_ = st.Close()
	})
	return e
}

func (e *pipeEnv) start(t testing.TB, cfg triggers.Config) {
	t.Helper()
	cfg.Store = e.store
	cfg.File = e.file
	if cfg.NodeID == "" {
		cfg.NodeID = "test-node"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	svc, err := triggers.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = svc.Run(ctx)
	}()
	e.svc = svc
	var once sync.Once
	e.stop = func() { once.Do(func() { cancel(); <-done }) }
}

func (e *pipeEnv) write(t testing.TB, typ collections.WriteType, path string, data map[string]any) {
	t.Helper()
	if _, err := e.store.Commit(context.Background(), "default", []collections.Write{{Type: typ, Path: path, Data: data}}, collections.CommitOptions{}); err != nil {
		t.Fatalf("%s %s: %v", typ, path, err)
	}
}

func triggerJSON(id, url, extra string) string {
	return fmt.Sprintf(`{"triggerId": %q, "collection": "users/{userId}/chats/{chatId}/messages", "events": ["create","update","delete"], "url": %q, "secret": %q%s}`, id, url, testSecret, extra)
}

func verify(t testing.TB, r received) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", r.ID)
	h.Set("webhook-timestamp", r.Timestamp)
	h.Set("webhook-signature", r.Signature)
	if err := wh.Verify(r.Raw, h); err != nil {
		t.Fatalf("standardwebhooks.Verify(%s): %v (signature %q)", r.ID, err, r.Signature)
	}
}

func TestDeliverySignedAndShaped(t *testing.T) {
	rc := newReceiver(t)
	e := startEnv(t, "["+triggerJSON("t1", rc.srv.URL, `, "condition": "event.document.data.role == 'user'", "headers": {"X-Team": "core"}`)+"]", triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"role": "user", "content": "hi"})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"role": "assistant", "content": "hello"})
	e.write(t, collections.WriteCreate, "other/x", map[string]any{"role": "user"})
	got := rc.waitFor(t, "one delivery", 5*time.Second, func(r []received) bool { return len(r) >= 1 })
	time.Sleep(200 * time.Millisecond)
	if got = rc.requests(); len(got) != 1 {
		t.Fatalf("got %d deliveries, want 1 (the assistant message and the other collection must not match)", len(got))
	}
	r := got[0]
	verify(t, r)
	if !strings.HasPrefix(r.ID, "evt_") || r.Body["id"] != r.ID {
		t.Fatalf("webhook-id %q, body id %v", r.ID, r.Body["id"])
	}
	if r.Body["type"] != "document.create" || r.Body["triggerId"] != "t1" || r.Body["database"] != "default" || r.Body["attempt"] != float64(1) {
		t.Fatalf("body %v", r.Body)
	}
	ev, _ := r.Body["event"].(map[string]any)
	params, _ := ev["params"].(map[string]any)
	doc, _ := ev["document"].(map[string]any)
	data, _ := doc["data"].(map[string]any)
	if ev["type"] != "create" || ev["path"] != "users/u1/chats/c1/messages/m1" || ev["id"] != "m1" ||
		params["userId"] != "u1" || params["chatId"] != "c1" || data["content"] != "hi" || ev["before"] != nil {
		t.Fatalf("event %v", ev)
	}
	if s := fmt.Sprint(ev["changedFields"]); s != "[content role]" {
		t.Fatalf("changedFields %s", s)
	}
	if strings.Contains(string(r.Raw), "whsec_") || strings.Contains(strings.ToLower(string(r.Raw)), "token") {
		t.Fatalf("body carries credentials: %s", r.Raw)
	}
}

func TestStatusTransitionFiresOnce(t *testing.T) {
	rc := newReceiver(t)
	e := startEnv(t, "["+triggerJSON("done", rc.srv.URL, `, "events": ["update"], "condition": "event.document.data.status == 'success' && event.before.data.status != 'success'"`)+"]", triggers.Config{})
	p := "users/u1/chats/c1/messages/m1"
	e.write(t, collections.WriteCreate, p, map[string]any{"status": "running"})
	e.write(t, collections.WriteUpdate, p, map[string]any{"progress": json.Number("1")})
	e.write(t, collections.WriteUpdate, p, map[string]any{"status": "success"})
	e.write(t, collections.WriteUpdate, p, map[string]any{"progress": json.Number("2")})
	e.write(t, collections.WriteUpdate, p, map[string]any{"note": "x"})
	rc.waitFor(t, "the transition", 5*time.Second, func(r []received) bool { return len(r) >= 1 })
	time.Sleep(300 * time.Millisecond)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("transition fired %d times, want once", n)
	}
}

func TestRetryThenSuccessKeepsWebhookID(t *testing.T) {
	rc := newReceiver(t)
	rc.respond = func(_ received, n int) (int, http.Header) {
		if n < 3 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	}
	e := startEnv(t, "["+triggerJSON("r", rc.srv.URL, `, "retryPolicy": {"maxAttempts": 5, "initialBackoff": "50ms", "maxBackoff": "100ms"}`)+"]", triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	got := rc.waitFor(t, "three attempts", 10*time.Second, func(r []received) bool { return len(r) >= 3 })
	for i, r := range got {
		verify(t, r)
		if r.ID != got[0].ID {
			t.Fatalf("attempt %d webhook-id %q, first %q", i+1, r.ID, got[0].ID)
		}
		if r.Body["attempt"] != float64(i+1) {
			t.Fatalf("attempt %d body attempt %v", i+1, r.Body["attempt"])
		}
	}
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{TriggerID: "r"}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 1 && ds[0].Status == triggers.StatusDelivered
	})
	if a := ds[0].Attempts; len(a) != 3 || a[0].Status != 500 || a[2].Status != 200 || a[0].Response != `{"ok":true}` {
		t.Fatalf("attempts %+v", a)
	}
}

func waitDeliveries(t testing.TB, svc *triggers.Service, q triggers.DeliveryQuery, cond func([]*triggers.Delivery) bool) []*triggers.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, _, err := svc.Deliveries(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(ds, "", "  ")
			t.Fatalf("deliveries never reached the expected state:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDeadThenReplay(t *testing.T) {
	rc := newReceiver(t)
	fail := true
	var mu sync.Mutex
	rc.respond = func(received, int) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusNoContent, nil
	}
	e := startEnv(t, "["+triggerJSON("d", rc.srv.URL, `, "retryPolicy": {"maxAttempts": 2, "initialBackoff": "20ms", "maxBackoff": "20ms"}`)+"]", triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{Status: triggers.StatusDead}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if len(ds[0].Attempts) != 2 {
		t.Fatalf("dead after %d attempts, want 2", len(ds[0].Attempts))
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := e.svc.Replay(context.Background(), ds[0].ID); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 && len(ds[0].Attempts) == 3 })
	got := rc.requests()
	if len(got) != 3 || got[2].ID != got[0].ID {
		t.Fatalf("replay: %d requests, ids %q %q", len(got), got[0].ID, got[len(got)-1].ID)
	}
	if err := e.svc.Replay(context.Background(), "dlv_nope"); !errors.Is(err, triggers.ErrNotFound) {
		t.Fatalf("replay unknown: %v", err)
	}
}

func TestGoneDisablesTrigger(t *testing.T) {
	rc := newReceiver(t)
	gone := true
	var mu sync.Mutex
	rc.respond = func(received, int) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return http.StatusGone, nil
		}
		return http.StatusOK, nil
	}
	e := startEnv(t, "["+triggerJSON("g", rc.srv.URL, "")+"]", triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	rc.waitFor(t, "the 410", 5*time.Second, func(r []received) bool { return len(r) == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, _, err := e.svc.Get(context.Background(), "g")
		if err != nil {
			t.Fatal(err)
		}
		if in.Status == "disabled" {
			if !strings.Contains(in.DisabledReason, "410") {
				t.Fatalf("reason %q", in.DisabledReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trigger not disabled after 410: %+v", in)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// While disabled, new changes do not match and nothing is sent.
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"a": "b"})
	time.Sleep(300 * time.Millisecond)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("%d requests while disabled", n)
	}
	mu.Lock()
	gone = false
	mu.Unlock()
	if err := e.svc.Enable(context.Background(), "g"); err != nil {
		t.Fatal(err)
	}
	got := rc.waitFor(t, "the parked delivery after enable", 5*time.Second, func(r []received) bool { return len(r) == 2 })
	if got[1].ID != got[0].ID {
		t.Fatalf("after enable got %s, want the parked %s", got[1].ID, got[0].ID)
	}
}

func TestOrderingKeySequentialPerKey(t *testing.T) {
	rc := newReceiver(t)
	var mu sync.Mutex
	inflight := map[string]int{}
	fails := map[string]int{}
	rc.respond = func(r received, _ int) (int, http.Header) {
		ev, _ := r.Body["event"].(map[string]any)
		params, _ := ev["params"].(map[string]any)
		chat, _ := params["chatId"].(string)
		mu.Lock()
		inflight[chat]++
		if inflight[chat] > 1 {
			mu.Unlock()
			t.Errorf("two deliveries of chat %s in flight at once", chat)
			return 200, nil
		}
		// The first delivery of each chat fails once: the next one must wait.
		first := fails[chat] == 0
		fails[chat]++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		inflight[chat]--
		mu.Unlock()
		if first {
			return 500, nil
		}
		return 200, nil
	}
	e := startEnv(t, "["+triggerJSON("o", rc.srv.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 5, "initialBackoff": "30ms", "maxBackoff": "30ms"}`)+"]", triggers.Config{})
	const chats, perChat = 4, 15
	var wg sync.WaitGroup
	for c := 0; c < chats; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perChat; i++ {
				e.write(t, collections.WriteCreate, fmt.Sprintf("users/u1/chats/c%d/messages/m%03d", c, i), map[string]any{"i": json.Number(fmt.Sprint(i))})
			}
		}()
	}
	wg.Wait()
	got := rc.waitFor(t, "all deliveries", 20*time.Second, func(r []received) bool { return len(r) >= chats*(perChat+1) })
	// Per chat, successful deliveries arrive in commit (message) order.
	seen := map[string][]string{}
	for _, r := range got {
		ev, _ := r.Body["event"].(map[string]any)
		params, _ := ev["params"].(map[string]any)
		seen[params["chatId"].(string)] = append(seen[params["chatId"].(string)], ev["id"].(string))
	}
	for chat, ids := range seen {
		// The first id appears twice (failed, then retried); after that
		// the order is strictly increasing.
		if len(ids) != perChat+1 || ids[0] != ids[1] {
			t.Fatalf("chat %s: %v", chat, ids)
		}
		if !sort.StringsAreSorted(ids[1:]) {
			t.Fatalf("chat %s out of order: %v", chat, ids)
		}
	}
}

func TestPurgeKeepsPendingDropsOldFinished(t *testing.T) {
	rc := newReceiver(t)
	rc.respond = func(r received, _ int) (int, http.Header) {
		if strings.Contains(string(r.Raw), `"keep"`) {
			return 500, nil
		}
		return 200, nil
	}
	e := startEnv(t, "["+triggerJSON("p", rc.srv.URL, `, "retryPolicy": {"maxAttempts": 50, "initialBackoff": "1h", "maxBackoff": "1h"}`)+"]", triggers.Config{Retention: time.Millisecond})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "done"})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"a": "keep"})
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 2 && ds[0].Status == triggers.StatusPending && len(ds[0].Attempts) == 1 && ds[1].Status == triggers.StatusDelivered
	})
	time.Sleep(5 * time.Millisecond)
	if err := e.svc.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds, _, err := e.svc.Deliveries(context.Background(), triggers.DeliveryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != triggers.StatusPending {
		t.Fatalf("after purge: %+v", ds)
	}
}

// A restarted service delivers what was matched while it was down and
// what was in flight when it stopped; a trigger added later does not fire
// for changes committed before it existed.
func TestRestartDeliversBacklogOnly(t *testing.T) {
	rc := newReceiver(t)
	release := make(chan struct{})
	rc.respond = func(r received, n int) (int, http.Header) {
		if n == 1 {
			<-release // the first delivery hangs until the service stopped
			return 500, nil
		}
		return 200, nil
	}
	// A short drain: the hanging request is cut off at stop.
	e := startEnv(t, "["+triggerJSON("a", rc.srv.URL, `, "timeout": "30s"`)+"]", triggers.Config{DrainTimeout: 100 * time.Millisecond})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"x": "1"})
	rc.waitFor(t, "the hanging first delivery", 5*time.Second, func(r []received) bool { return len(r) == 1 })
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	<-stopped
	close(release)
	// Written while the service is down: must still fire after restart.
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"x": "2"})
	// A second trigger appears in the file while the service is down.
	if err := os.WriteFile(e.file, []byte("["+triggerJSON("a", rc.srv.URL, "")+","+triggerJSON("b", rc.srv.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start(t, triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m3", map[string]any{"x": "3"})
	got := rc.waitFor(t, "m1 again, m2 and m3 (twice)", 10*time.Second, func(r []received) bool { return len(r) >= 5 })
	time.Sleep(200 * time.Millisecond)
	got = rc.requests()
	count := map[string]int{}
	for _, r := range got[1:] {
		ev, _ := r.Body["event"].(map[string]any)
		count[fmt.Sprint(r.Body["triggerId"], "/", ev["id"])]++
	}
	want := map[string]int{"a/m1": 1, "a/m2": 1, "a/m3": 1, "b/m3": 1}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Fatalf("after restart got %v, want %v", count, want)
	}
}

// Stopping the service lets a request in flight finish and records it: a
// restart does not deliver it again.
func TestStopDrainsRequestsInFlight(t *testing.T) {
	rc := newReceiver(t)
	arrived := make(chan struct{}, 1)
	rc.respond = func(received, int) (int, http.Header) {
		arrived <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return http.StatusOK, nil
	}
	e := startEnv(t, "["+triggerJSON("drain", rc.srv.URL, "")+"]", triggers.Config{})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	<-arrived
	e.stop()
	ds, _, err := e.svc.Deliveries(context.Background(), triggers.DeliveryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != triggers.StatusDelivered {
		b, _ := json.Marshal(ds)
		t.Fatalf("after stop: %s", b)
	}
	e.start(t, triggers.Config{})
	time.Sleep(300 * time.Millisecond)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("%d requests after restart, want 1", n)
	}
}

// A receiver that is down does not starve other triggers: rows waiting for
// a retry are not held in memory, so new rows keep getting delivered even
// with a tiny MaxHeld.
func TestFailingReceiverDoesNotStarveOthers(t *testing.T) {
	bad := newReceiver(t)
	bad.respond = func(received, int) (int, http.Header) { return http.StatusInternalServerError, nil }
	good := newReceiver(t)
	files := "[" + fmt.Sprintf(`{"triggerId": "bad", "collection": "bad", "events": ["create"], "url": %q, "secret": %q, "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1h", "maxBackoff": "1h"}}`, bad.srv.URL, testSecret) +
		"," + fmt.Sprintf(`{"triggerId": "good", "collection": "good", "events": ["create"], "url": %q, "secret": %q}`, good.srv.URL, testSecret) + "]"
	e := startEnv(t, files, triggers.Config{MaxHeld: 2})
	for i := 0; i < 6; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("bad/b%d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	bad.waitFor(t, "the failing first attempts", 10*time.Second, func(r []received) bool { return len(r) >= 2 })
	for i := 0; i < 4; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("good/g%d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	good.waitFor(t, "every good delivery", 10*time.Second, func(r []received) bool { return len(r) == 4 })
	bad.waitFor(t, "one failed attempt per bad row", 10*time.Second, func(r []received) bool { return len(r) == 6 })
}

// Two nodes on one store: each change is matched once (by whichever
// evaluator wins the cursor) and delivered once, and both nodes' counters
// add up in the stored trigger state although they write it concurrently.
func TestTwoNodesShareTheWorkAndTheCounters(t *testing.T) {
	rc := newReceiver(t)
	e := startEnv(t, "["+triggerJSON("n", rc.srv.URL, "")+"]", triggers.Config{NodeID: "node-a"})
	b := &pipeEnv{store: e.store, file: e.file}
	b.start(t, triggers.Config{NodeID: "node-b"})
	const n = 40
	for i := 0; i < n; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("users/u1/chats/c1/messages/m%02d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	got := rc.waitFor(t, "every delivery", 10*time.Second, func(r []received) bool { return len(r) >= n })
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.ID] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct webhook-ids for %d changes", len(ids), n)
	}
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Status: triggers.StatusDelivered, Limit: 100}, func(ds []*triggers.Delivery) bool { return len(ds) == n })
	// Node b changes the trigger's state while node a still has counts to
	// flush: a's flush conflicts with b's write and must keep its counts.
	if err := b.svc.Disable(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.Enable(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	b.stop()
	e.stop() // both flush their counters
	doc, err := e.store.Get(context.Background(), triggers.SystemDB, "_triggers/n")
	if err != nil {
		t.Fatal(err)
	}
	counts, _ := doc.Data["counts"].(map[string]any)
	if fmt.Sprint(counts["matched"]) != fmt.Sprint(n) || fmt.Sprint(counts["delivered"]) != fmt.Sprint(n) {
		t.Fatalf("stored counts %v, want matched and delivered %d", counts, n)
	}
}
