package triggers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// keyedReceiver answers 500 to every delivery of a chat "bad*" while broken
// and to the first attempt of every note (so each note needs a retry,
// which the poller claims), 200 to everything else, and records the
// message ids each chat got a 200 for, in arrival order.
type keyedReceiver struct {
	*apptest.Receiver
	mu     sync.Mutex
	broken bool
	ok     map[string][]string // chat (or "note") -> ids answered 200
	tried  map[string]bool     // notes attempted once
}

func newKeyedReceiver(t *testing.T) *keyedReceiver {
	kr := &keyedReceiver{Receiver: apptest.NewReceiver(t, nil), broken: true, ok: map[string][]string{}, tried: map[string]bool{}}
	kr.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		chat := r.Param("chatId")
		if chat == "" {
			chat = "note"
		}
		ev, _ := r.Body["event"].(map[string]any)
		id, _ := ev["id"].(string)
		kr.mu.Lock()
		defer kr.mu.Unlock()
		if strings.HasPrefix(chat, "bad") && kr.broken {
			return http.StatusInternalServerError
		}
		if chat == "note" && !kr.tried[id] {
			kr.tried[id] = true
			return http.StatusServiceUnavailable
		}
		kr.ok[chat] = append(kr.ok[chat], id)
		return http.StatusOK
	})
	return kr
}

func (kr *keyedReceiver) delivered(chat string) []string {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	return slices.Clone(kr.ok[chat])
}

func (kr *keyedReceiver) setBroken(b bool) {
	kr.mu.Lock()
	kr.broken = b
	kr.mu.Unlock()
}

// waitDelivered waits until chat got a 200 for n ids.
func (kr *keyedReceiver) waitDelivered(t *testing.T, chat string, n int, timeout time.Duration) []string {
	t.Helper()
	kr.WaitWithin(t, timeout, fmt.Sprintf("%d deliveries of %s", n, chat), func([]apptest.Request) bool {
		return len(kr.delivered(chat)) >= n
	})
	return kr.delivered(chat)
}

func msgIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return ids
}

// One ordering key whose head keeps failing, flooded with far more rows
// than the node may hold in memory, must not stop the deliveries of other
// keys of the same trigger or of other triggers (whose retries the poller
// must find behind the flood's due rows), before or after a restart; once
// its receiver recovers, every row of the key is delivered once, in
// commit order.
func TestBlockedOrderingKeyDoesNotStarveOthers(t *testing.T) {
	const maxHeld, flood = 40, 400
	kr := newKeyedReceiver(t)
	files := "[" + triggerJSON("chat", kr.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 100, "initialBackoff": "100ms", "maxBackoff": "300ms"}`) +
		"," + fmt.Sprintf(`{"triggerId": "notes", "collection": "notes", "events": ["create"], "url": %q, "secret": %q, "retryPolicy": {"initialBackoff": "100ms", "maxBackoff": "100ms"}}`, kr.URL, testSecret) + "]"
	cfg := triggers.Config{MaxHeld: maxHeld}
	e := startEnv(t, files, cfg)

	// The flood: one user's chat, committed in batches, in id order.
	for b := 0; b < flood; b += 50 {
		var ws []collections.Write
		for i := b; i < b+50; i++ {
			ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/chats/bad/messages/m%04d", i), Data: map[string]any{"i": i}})
		}
		if _, err := e.store.Commit(context.Background(), "default", ws, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kr.WaitFor(t, "the failing head", apptest.AtLeast(1))

	// Other users' chats and another trigger, committed after the flood.
	others := func(round string) {
		for c := 0; c < 3; c++ {
			for i := 0; i < 5; i++ {
				e.write(t, collections.WriteCreate, fmt.Sprintf("users/u2/chats/%s%d/messages/m%04d", round, c, i), map[string]any{"i": i})
			}
		}
		for i := 0; i < 5; i++ {
			e.write(t, collections.WriteCreate, fmt.Sprintf("notes/%s%04d", round, i), map[string]any{"i": i})
		}
		for c := 0; c < 3; c++ {
			chat := fmt.Sprintf("%s%d", round, c)
			if got := kr.waitDelivered(t, chat, 5, 20*time.Second); !slices.Equal(got, msgIDs("m", 5)) {
				t.Fatalf("chat %s got %v", chat, got)
			}
		}
		kr.WaitFor(t, "every note of "+round, func([]apptest.Request) bool {
			n := 0
			for _, id := range kr.delivered("note") {
				if id[0] == round[0] {
					n++
				}
			}
			return n == 5
		})
	}
	others("a")

	// A restart while the key is blocked: the node takes back its own rows
	// of the key, and its head (waiting for a retry) must still get in.
	e.stop()
	e.start(t, cfg)
	others("b")

	kr.setBroken(false)
	got := kr.waitDelivered(t, "bad", flood, 60*time.Second)
	if !slices.Equal(got, msgIDs("m", flood)) {
		t.Fatalf("the blocked key's deliveries after recovery (%d) are not its rows once each in commit order: %v", len(got), got)
	}
}

// One tenant with many ordering keys whose heads keep failing must not
// take all the memory of the trigger they share with other tenants.
func TestTenantWithManyBlockedKeysDoesNotStarveOthers(t *testing.T) {
	const maxHeld, chats, perChat = 40, 30, 4
	kr := newKeyedReceiver(t)
	e := startEnv(t, "["+triggerJSON("chat", kr.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 100, "initialBackoff": "100ms", "maxBackoff": "300ms"}`)+"]", triggers.Config{MaxHeld: maxHeld})
	var ws []collections.Write
	for i := 0; i < perChat; i++ {
		for c := 0; c < chats; c++ {
			ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/chats/bad%02d/messages/m%04d", c, i), Data: map[string]any{"i": i}})
		}
	}
	if _, err := e.store.Commit(context.Background(), "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	kr.WaitFor(t, "the failing heads", apptest.AtLeast(1))
	for c := 0; c < 3; c++ {
		for i := 0; i < 5; i++ {
			e.write(t, collections.WriteCreate, fmt.Sprintf("users/u2/chats/ok%d/messages/m%04d", c, i), map[string]any{"i": i})
		}
	}
	for c := 0; c < 3; c++ {
		chat := fmt.Sprintf("ok%d", c)
		if got := kr.waitDelivered(t, chat, 5, 20*time.Second); !slices.Equal(got, msgIDs("m", 5)) {
			t.Fatalf("chat %s got %v", chat, got)
		}
	}
	kr.setBroken(false)
	for c := 0; c < chats; c++ {
		chat := fmt.Sprintf("bad%02d", c)
		if got := kr.waitDelivered(t, chat, perChat, 30*time.Second); !slices.Equal(got, msgIDs("m", perChat)) {
			t.Fatalf("chat %s after recovery got %v", chat, got)
		}
	}
}

// A trigger flooded with deliveries its receiver never answers must not
// take all the memory: another trigger's deliveries still start.
func TestFloodedTriggerDoesNotStarveOthers(t *testing.T) {
	const maxHeld, flood = 40, 100
	slow := apptest.NewReceiver(t, nil)
	release := make(chan struct{})
	slow.SetRespond(func(_ context.Context, _ http.ResponseWriter, _ apptest.Request) int {
		<-release
		return http.StatusOK
	})
	kr := newKeyedReceiver(t)
	files := "[" + fmt.Sprintf(`{"triggerId": "slow", "collection": "slow", "events": ["create"], "url": %q, "secret": %q, "timeout": "5m"}`, slow.URL, testSecret) +
		"," + fmt.Sprintf(`{"triggerId": "notes", "collection": "notes", "events": ["create"], "url": %q, "secret": %q, "retryPolicy": {"initialBackoff": "100ms", "maxBackoff": "100ms"}}`, kr.URL, testSecret) + "]"
	e := startEnv(t, files, triggers.Config{MaxHeld: maxHeld})
	t.Cleanup(func() { close(release) }) // before the service drains and the server closes
	var ws []collections.Write
	for i := 0; i < flood; i++ {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("slow/s%04d", i), Data: map[string]any{"i": i}})
	}
	if _, err := e.store.Commit(context.Background(), "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	slow.WaitFor(t, "the hanging requests", apptest.AtLeast(1))
	for i := 0; i < 5; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("notes/n%04d", i), map[string]any{"i": i})
	}
	kr.waitDelivered(t, "note", 5, 20*time.Second)
}

// hangingReceiver never answers the requests hang picks (until the test
// ends) and answers 200 to the others.
func hangingReceiver(t *testing.T, hang func(chat string) bool) (*apptest.Receiver, chan struct{}) {
	rc := apptest.NewReceiver(t, nil)
	release := make(chan struct{})
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if hang(r.Param("chatId")) {
			<-release
		}
		return http.StatusOK
	})
	return rc, release
}

// waitAnswered waits until the receiver has seen a request for every
// change of chat ("" for a trigger without chats) in want.
func waitAnswered(t *testing.T, rc *apptest.Receiver, chat string, want int) {
	t.Helper()
	rc.WaitFor(t, fmt.Sprintf("%d requests of %q", want, chat), func(r []apptest.Request) bool {
		ids := map[string]bool{}
		for _, x := range r {
			if x.Param("chatId") == chat {
				ids[x.ID()] = true
			}
		}
		return len(ids) >= want
	})
}

// A receiver that hangs on every delivery of one trigger keeps at most
// that trigger's share of the workers busy: another trigger's deliveries
// still go out.
func TestHangingTriggerLeavesWorkersForOthers(t *testing.T) {
	slow, release := hangingReceiver(t, func(string) bool { return true })
	fast := apptest.NewReceiver(t, nil)
	files := "[" + fmt.Sprintf(`{"triggerId": "slow", "collection": "slow", "events": ["create"], "url": %q, "secret": %q, "timeout": "5m"}`, slow.URL, testSecret) +
		"," + fmt.Sprintf(`{"triggerId": "notes", "collection": "notes", "events": ["create"], "url": %q, "secret": %q}`, fast.URL, testSecret) + "]"
	e := startEnv(t, files, triggers.Config{Workers: 4})
	t.Cleanup(func() { close(release) }) // before the service drains
	for i := 0; i < 20; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("slow/s%04d", i), map[string]any{"i": i})
	}
	slow.WaitFor(t, "the hanging requests", apptest.AtLeast(1))
	for i := 0; i < 5; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("notes/n%04d", i), map[string]any{"i": i})
	}
	waitAnswered(t, fast, "", 5)
}

// A receiver that hangs on every delivery of one tenant (one user's many
// chats) keeps at most that tenant's share of the workers busy: another
// user's deliveries of the same trigger still go out.
func TestHangingTenantLeavesWorkersForOthers(t *testing.T) {
	rc, release := hangingReceiver(t, func(chat string) bool { return strings.HasPrefix(chat, "hang") })
	e := startEnv(t, "["+triggerJSON("chat", rc.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "timeout": "5m"`)+"]", triggers.Config{Workers: 4})
	t.Cleanup(func() { close(release) }) // before the service drains
	for c := 0; c < 8; c++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("users/u1/chats/hang%d/messages/m0000", c), map[string]any{"i": c})
	}
	rc.WaitFor(t, "the hanging requests", apptest.AtLeast(1))
	for i := 0; i < 5; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("users/u2/chats/ok/messages/m%04d", i), map[string]any{"i": i})
	}
	waitAnswered(t, rc, "ok", 5)
}

// When a 410 from an ordering key's head disables the trigger, the rows
// queued behind that head are parked and released, not held (each key
// asking the outbox for its parked head every poll interval) until an
// admin enables the trigger again; after the enable they go out in order.
func TestDisabledTriggerReleasesRowsQueuedBehindAKey(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N == 1 {
			return http.StatusGone
		}
		return http.StatusOK
	})
	reg := prometheus.NewRegistry()
	e := startEnv(t, "["+triggerJSON("k", rc.URL, `, "events": ["create"], "orderingKey": "event.params.chatId"`)+"]", triggers.Config{Registerer: reg})
	var writes []collections.Write
	for i := 0; i < 5; i++ {
		writes = append(writes, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/chats/c1/messages/m%d", i), Data: map[string]any{"i": i}})
	}
	if _, err := e.store.Commit(context.Background(), "default", writes, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	rc.WaitFor(t, "the 410", apptest.AtLeast(1))
	held := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "loom_webhook_deliveries_held" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no loom_webhook_deliveries_held")
		return 0
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := held(); n != 0; n = held() {
		if time.Now().After(deadline) {
			t.Fatalf("%v deliveries held while the trigger is disabled, want 0", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if in, _, err := e.svc.Get(context.Background(), "k"); err != nil || in.Status != "disabled" {
		t.Fatalf("trigger %+v (err %v), want disabled", in, err)
	}
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests while disabled, want 1", n)
	}
	if err := e.svc.Enable(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	got := rc.WaitFor(t, "the parked deliveries after enable", apptest.AtLeast(6))
	for i, r := range got[1:6] {
		ev, _ := r.Body["event"].(map[string]any)
		if want := fmt.Sprintf("m%d", i); ev["id"] != want {
			t.Fatalf("delivery %d after enable is %v, want %s (commit order)", i, ev["id"], want)
		}
	}
}

// A receiver that is down does not starve other triggers: rows waiting for
// a retry are not held in memory, so new rows keep getting delivered even
// with a tiny MaxHeld.
func TestFailingReceiverDoesNotStarveOthers(t *testing.T) {
	bad := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	good := apptest.NewReceiver(t, nil)
	files := "[" + fmt.Sprintf(`{"triggerId": "bad", "collection": "bad", "events": ["create"], "url": %q, "secret": %q, "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1h", "maxBackoff": "1h"}}`, bad.URL, testSecret) +
		"," + fmt.Sprintf(`{"triggerId": "good", "collection": "good", "events": ["create"], "url": %q, "secret": %q}`, good.URL, testSecret) + "]"
	e := startEnv(t, files, triggers.Config{MaxHeld: 2})
	for i := 0; i < 6; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("bad/b%d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	bad.WaitFor(t, "the failing first attempts", apptest.AtLeast(2))
	for i := 0; i < 4; i++ {
		e.write(t, collections.WriteCreate, fmt.Sprintf("good/g%d", i), map[string]any{"i": json.Number(fmt.Sprint(i))})
	}
	good.WaitFor(t, "every good delivery", apptest.Exactly(4))
	bad.WaitFor(t, "one failed attempt per bad row", apptest.Exactly(6))
}
