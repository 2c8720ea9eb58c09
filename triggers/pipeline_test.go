package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
)

// The trigger pipeline as a node runs it: each test starts a whole node
// (apptest.Start) with its triggers.json, commits to its store and watches
// a real receiver.

// evaluatedThrough waits until the trigger evaluator's stored cursor is at
// seq or past it: every change up to seq has been evaluated, and the
// outbox rows it matched are committed (they commit with the cursor). A
// check that a change matched nothing reads the outbox after this, not
// after a sleep.
func evaluatedThrough(t testing.TB, st collections.Store, seq int64) {
	t.Helper()
	apptest.WaitFor(t, fmt.Sprintf("the trigger cursor at %d", seq), func() bool {
		pos, err := st.Cursor(context.Background(), "triggers")
		return err == nil && pos >= seq
	})
}

// startNode starts a node running the given triggers.
func startNode(t *testing.T, triggersJSON string) *apptest.Stack {
	t.Helper()
	return apptest.Start(t, apptest.Options{Triggers: triggersJSON})
}

func TestDeliverySignedAndShaped(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+triggerJSON("t1", rc.URL, `, "condition": "event.document.data.role == 'user'", "headers": {"X-Team": "core"}`)+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"role": "user", "content": "hi"})
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"role": "assistant", "content": "hello"})
	write(t, e.Store, collections.WriteCreate, "other/x", map[string]any{"role": "user"})
	// All three evaluated, the one row they matched delivered: the
	// receiver has seen everything it will.
	evaluatedThrough(t, e.Store, e.Head(t))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		if len(ds) != 1 {
			t.Fatalf("%d outbox rows, want 1 (the assistant message and the other collection must not match): %s", len(ds), show(ds))
		}
		return ds[0].Status == triggers.StatusDelivered
	})
	got := rc.Requests()
	if len(got) != 1 {
		t.Fatalf("got %d deliveries, want 1", len(got))
	}
	r := got[0]
	apptest.Verify(t, testSecret, r)
	if !strings.HasPrefix(r.ID(), "evt_") || r.Body["id"] != r.ID() {
		t.Fatalf("webhook-id %q, body id %v", r.ID(), r.Body["id"])
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
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+triggerJSON("done", rc.URL, `, "events": ["update"], "condition": "event.document.data.status == 'success' && event.before.data.status != 'success'"`)+"]")
	p := "users/u1/chats/c1/messages/m1"
	write(t, e.Store, collections.WriteCreate, p, map[string]any{"status": "running"})
	write(t, e.Store, collections.WriteUpdate, p, map[string]any{"progress": json.Number("1")})
	write(t, e.Store, collections.WriteUpdate, p, map[string]any{"status": "success"})
	write(t, e.Store, collections.WriteUpdate, p, map[string]any{"progress": json.Number("2")})
	write(t, e.Store, collections.WriteUpdate, p, map[string]any{"note": "x"})
	evaluatedThrough(t, e.Store, e.Head(t))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		if len(ds) != 1 {
			t.Fatalf("transition matched %d times, want once: %s", len(ds), show(ds))
		}
		return ds[0].Status == triggers.StatusDelivered
	})
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("transition fired %d times, want once", n)
	}
}

func TestRetryThenSuccessKeepsWebhookID(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N < 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	e := startNode(t, "["+triggerJSON("r", rc.URL, `, "retryPolicy": {"maxAttempts": 5, "initialBackoff": "50ms", "maxBackoff": "100ms"}`)+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	got := rc.WaitFor(t, "three attempts", apptest.AtLeast(3))
	for i, r := range got {
		apptest.Verify(t, testSecret, r)
		if r.ID() != got[0].ID() {
			t.Fatalf("attempt %d webhook-id %q, first %q", i+1, r.ID(), got[0].ID())
		}
		if r.Body["attempt"] != float64(i+1) {
			t.Fatalf("attempt %d body attempt %v", i+1, r.Body["attempt"])
		}
	}
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "r"}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 1 && ds[0].Status == triggers.StatusDelivered
	})
	if a := ds[0].Attempts; len(a) != 3 || a[0].Status != 500 || a[2].Status != 200 || a[0].Response != `{"ok":true}` {
		t.Fatalf("attempts %+v", a)
	}
}

func TestDeadThenReplay(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusServiceUnavailable))
	e := startNode(t, "["+triggerJSON("d", rc.URL, `, "retryPolicy": {"maxAttempts": 2, "initialBackoff": "20ms", "maxBackoff": "20ms"}`)+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDead}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if len(ds[0].Attempts) != 2 {
		t.Fatalf("dead after %d attempts, want 2", len(ds[0].Attempts))
	}
	rc.SetRespond(apptest.Status(http.StatusNoContent))
	if err := e.Triggers.Replay(context.Background(), ds[0].ID); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 && len(ds[0].Attempts) == 3 })
	got := rc.Requests()
	if len(got) != 3 || got[2].ID() != got[0].ID() {
		t.Fatalf("replay: %d requests, ids %q %q", len(got), got[0].ID(), got[len(got)-1].ID())
	}
	if err := e.Triggers.Replay(context.Background(), "dlv_nope"); !errors.Is(err, triggers.ErrNotFound) {
		t.Fatalf("replay unknown: %v", err)
	}
}

func TestGoneDisablesTrigger(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusGone))
	e := startNode(t, "["+triggerJSON("g", rc.URL, "")+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	rc.WaitFor(t, "the 410", apptest.Exactly(1))
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, _, err := e.Triggers.Get(context.Background(), "g")
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
	// While disabled, new changes do not match, and the 410's row is put
	// back (a minute: disabledRecheck) instead of retried.
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"a": "b"})
	evaluatedThrough(t, e.Store, e.Head(t))
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool { return true })
	if len(ds) != 1 || ds[0].Status != triggers.StatusPending || len(ds[0].Attempts) != 1 ||
		ds[0].NextAttemptAt < time.Now().Add(30*time.Second).UnixMilli() {
		t.Fatalf("outbox while disabled: %s; want only the 410's row, pending, put back for a minute", show(ds))
	}
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests while disabled", n)
	}
	rc.SetRespond(nil)
	if err := e.Triggers.Enable(context.Background(), "g"); err != nil {
		t.Fatal(err)
	}
	got := rc.WaitFor(t, "the parked delivery after enable", apptest.Exactly(2))
	if got[1].ID() != got[0].ID() {
		t.Fatalf("after enable got %s, want the parked %s", got[1].ID(), got[0].ID())
	}
}

func TestOrderingKeySequentialPerKey(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	var mu sync.Mutex
	inflight := map[string]int{}
	fails := map[string]int{}
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		ev, _ := r.Body["event"].(map[string]any)
		params, _ := ev["params"].(map[string]any)
		chat, _ := params["chatId"].(string)
		mu.Lock()
		inflight[chat]++
		if inflight[chat] > 1 {
			mu.Unlock()
			t.Errorf("two deliveries of chat %s in flight at once", chat)
			return 200
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
			return 500
		}
		return 200
	})
	e := startNode(t, "["+triggerJSON("o", rc.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 5, "initialBackoff": "30ms", "maxBackoff": "30ms"}`)+"]")
	const chats, perChat = 4, 15
	var wg sync.WaitGroup
	for c := 0; c < chats; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perChat; i++ {
				// Not write: its Fatalf may not run on this goroutine.
				path := fmt.Sprintf("users/u1/chats/c%d/messages/m%03d", c, i)
				w := collections.Write{Type: collections.WriteCreate, Path: path, Data: map[string]any{"i": json.Number(fmt.Sprint(i))}}
				if _, err := e.Store.Commit(context.Background(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
					t.Errorf("create %s: %v", path, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	got := rc.WaitFor(t, "all deliveries", apptest.AtLeast(chats*(perChat+1)))
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
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if strings.Contains(string(r.Raw), `"keep"`) {
			return 500
		}
		return 200
	})
	e := apptest.Start(t, apptest.Options{
		Triggers: "[" + triggerJSON("p", rc.URL, `, "retryPolicy": {"maxAttempts": 50, "initialBackoff": "1h", "maxBackoff": "1h"}`) + "]",
		Config:   func(c *config.Config) { c.Delivery.Retention = config.Duration{Duration: time.Millisecond} },
	})
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "done"})
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"a": "keep"})
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 2 && ds[0].Status == triggers.StatusPending && len(ds[0].Attempts) == 1 && ds[1].Status == triggers.StatusDelivered
	})
	time.Sleep(5 * time.Millisecond)
	if err := e.Triggers.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{})
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
	rc := apptest.NewReceiver(t, nil)
	release := make(chan struct{})
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N == 1 {
			<-release // the first delivery hangs until the service stopped
			return 500
		}
		return 200
	})
	// The store outlives the node, which restarts on the same data
	// directory (the same node id). The drain at stop runs out: the
	// hanging request is cut off.
	dir := t.TempDir()
	st := apptest.OpenStore(t, dir)
	e := apptest.Start(t, apptest.Options{Store: st, DataDir: dir, DrainTimeout: 100 * time.Millisecond,
		Triggers: "[" + triggerJSON("a", rc.URL, `, "timeout": "30s"`) + "]"})
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"x": "1"})
	rc.WaitFor(t, "the hanging first delivery", apptest.Exactly(1))
	stopped := make(chan struct{})
	go func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		close(stopped)
	}()
	<-stopped
	close(release)
	// Written while the service is down: must still fire after restart.
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"x": "2"})
	// A second trigger appears in the file while the service is down.
	e = apptest.Start(t, apptest.Options{Store: st, DataDir: dir, Triggers: "[" + triggerJSON("a", rc.URL, "") + "," + triggerJSON("b", rc.URL, "") + "]"})
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/m3", map[string]any{"x": "3"})
	rc.WaitFor(t, "m1 again, m2 and m3 (twice)", apptest.AtLeast(5))
	// Every row matched through the last change, and each one delivered:
	// no request is still to come.
	evaluatedThrough(t, st, e.Head(t))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		for _, d := range ds {
			if d.Status != triggers.StatusDelivered {
				return false
			}
		}
		return len(ds) >= 4
	})
	got := rc.Requests()
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
	rc := apptest.NewReceiver(t, nil)
	arrived := make(chan struct{}, 1)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, _ apptest.Request) int {
		arrived <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return http.StatusOK
	})
	dir := t.TempDir()
	st := apptest.OpenStore(t, dir)
	opts := apptest.Options{Store: st, DataDir: dir, Triggers: "[" + triggerJSON("drain", rc.URL, "") + "]"}
	e := apptest.Start(t, opts)
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"a": "b"})
	<-arrived
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	ds, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != triggers.StatusDelivered {
		b, _ := json.Marshal(ds)
		t.Fatalf("after stop: %s", b)
	}
	// The restarted node delivers a later change (its pipeline runs, its
	// poller has looked at the outbox) and nothing else.
	apptest.Start(t, opts)
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"a": "b"})
	rc.WaitFor(t, "the later change after restart", apptest.HasDoc("m2"))
	if got := rc.Requests(); len(got) != 2 || got[0].DocID() != "m1" || got[1].DocID() != "m2" {
		t.Fatalf("%d requests after restart, want m1 (before the stop) and m2", len(got))
	}
}

// Two nodes on one store: each change is matched once (by whichever
// evaluator wins the cursor) and delivered once, and both nodes' counters
// add up in the stored trigger state although they write it concurrently.
func TestTwoNodesShareTheWorkAndTheCounters(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	// Each node has its own data directory, so its own node id.
	st := apptest.OpenStore(t, t.TempDir())
	opts := apptest.Options{Store: st, Triggers: "[" + triggerJSON("n", rc.URL, "") + "]"}
	e, b := apptest.Start(t, opts), apptest.Start(t, opts)
	const n = 40
	for i := 0; i < n; i++ {
		write(t, e.Store, collections.WriteCreate, fmt.Sprintf("users/u1/chats/c1/messages/m%02d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	got := rc.WaitFor(t, "every delivery", apptest.AtLeast(n))
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.ID()] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct webhook-ids for %d changes", len(ids), n)
	}
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered, Limit: 100}, func(ds []*triggers.Delivery) bool { return len(ds) == n })
	// Node b changes the trigger's state while node a still has counts to
	// flush: a's flush conflicts with b's write and must keep its counts.
	if err := b.Triggers.Disable(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	if err := b.Triggers.Enable(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	// Both flush their counters.
	if err := errors.Join(b.Stop(), e.Stop()); err != nil {
		t.Fatal(err)
	}
	doc, err := st.Get(context.Background(), triggers.SystemDB, "_triggers/n")
	if err != nil {
		t.Fatal(err)
	}
	counts, _ := doc.Data["counts"].(map[string]any)
	if fmt.Sprint(counts["matched"]) != fmt.Sprint(n) || fmt.Sprint(counts["delivered"]) != fmt.Sprint(n) {
		t.Fatalf("stored counts %v, want matched and delivered %d", counts, n)
	}
}

// A node without triggers moves its cursor past the changes without
// evaluating them; a trigger registered afterwards fires for what is
// committed after it, and a trigger disabled and enabled again misses
// what was committed while it was off — as when every change is read.
func TestNoTriggersSkipsToHeadThenRegistered(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "")
	ctx := context.Background()
	for i := range 5 {
		write(t, e.Store, collections.WriteCreate, fmt.Sprintf("users/u1/chats/c1/messages/old%d", i), map[string]any{"n": i})
	}
	head, err := e.Store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	apptest.WaitFor(t, "the trigger cursor at the head", func() bool {
		pos, err := e.Store.Cursor(ctx, "triggers")
		return err == nil && pos == head
	})
	var def triggers.Trigger
	if err := json.Unmarshal([]byte(triggerJSON("late", rc.URL, "")), &def); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Triggers.Register(ctx, def); err != nil {
		t.Fatal(err)
	}
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/new", map[string]any{"n": 9})
	got := rc.WaitFor(t, "the new message's delivery", apptest.AtLeast(1))
	if err := e.Triggers.Disable(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/while-off", map[string]any{"n": 10})
	apptest.WaitFor(t, "the cursor past the change made while the trigger was off", func() bool {
		h, _ := e.Store.Head(ctx)
		pos, err := e.Store.Cursor(ctx, "triggers")
		return err == nil && pos == h
	})
	if err := e.Triggers.Enable(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/after", map[string]any{"n": 11})
	rc.WaitFor(t, "the delivery after re-enabling", apptest.AtLeast(2))
	// "after" is the last change: once its row is delivered, every row
	// of the trigger is committed and delivered.
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "late"}, func(ds []*triggers.Delivery) bool {
		if len(ds) > 2 {
			t.Fatalf("%d rows, want 2 (new, after): %s", len(ds), show(ds))
		}
		return len(ds) == 2 && ds[0].Status == triggers.StatusDelivered && ds[1].Status == triggers.StatusDelivered
	})
	got = rc.Requests()
	var ids []string
	for _, r := range got {
		ids = append(ids, r.DocID())
	}
	if strings.Join(ids, ",") != "new,after" {
		t.Fatalf("delivered %v, want new,after (nothing from before the trigger or while it was off)", ids)
	}
}

// The change log carries _triggers, the trigger state (signing secrets
// included) every node follows. No trigger ever fires on it: not a
// wildcard, not a capture of any depth, not one naming the collection.
func TestNoTriggerFiresOnTriggerState(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	var defs []string
	for id, coll := range map[string]string{"wild": "*", "capture": "{c}", "rest": "{p=**}", "named": "_triggers"} {
		defs = append(defs, fmt.Sprintf(`{"triggerId": %q, "collection": %q, "events": ["create","update","delete"], "url": %q, "secret": %q}`, id, coll, rc.URL, testSecret))
	}
	e := startNode(t, "["+strings.Join(defs, ",")+"]")
	ctx := context.Background()
	head := e.Head(t)
	if _, _, err := e.Triggers.Register(ctx, registered(t, "r", rc.URL)); err != nil {
		t.Fatal(err)
	}
	if err := e.Triggers.Disable(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Triggers.RotateSecret(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if err := e.Triggers.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	cs, err := e.Store.ReadChanges(ctx, head, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) < 4 || !strings.HasPrefix(cs[0].Path, "_triggers/") {
		t.Fatalf("%d changes after the admin calls, want the _triggers ones: this test would check nothing", len(cs))
	}
	res, err := e.Store.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: "rooms/a", Data: map[string]any{}}}, collections.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seq := res[0].Doc.Seq
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Limit: 100}, func(ds []*triggers.Delivery) bool { return len(ds) >= 3 })
	for _, d := range ds {
		if d.Seq != seq || d.TriggerID == "named" {
			t.Fatalf("trigger %s has a row for change %d, want only rooms/a (%d) of wild, capture and rest", d.TriggerID, d.Seq, seq)
		}
	}
}
