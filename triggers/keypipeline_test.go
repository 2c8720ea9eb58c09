package triggers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// The rows of an ordering key are sent one at a time, each once the one
// before was answered 2xx; the answers are stored afterwards, in order,
// while the next rows go (at most keyPipeline of them wait to be stored).

// keyPipeline is the dispatcher's bound on a key's answers waiting to be
// stored.
const keyPipeline = 16

// hookedStore lets a test see, delay or fail the record of a delivered
// attempt before it is committed.
type hookedStore struct {
	collections.Store
	// delivered is called with the message id of each row a commit would
	// record delivered; an error fails the whole commit.
	delivered func(ctx context.Context, msg string) error

	mu sync.Mutex
	// claims counts the commits that claim outbox rows, by how many rows
	// each claims.
	claims map[int]int
}

func (s *hookedStore) claimCommits() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for k, v := range s.claims {
		out[k] = v
	}
	return out
}

func (s *hookedStore) Commit(ctx context.Context, db string, ws []collections.Write, o collections.CommitOptions) ([]collections.WriteResult, error) {
	if db == triggers.SystemDB {
		n := 0
		for _, w := range ws {
			if w.Type == collections.WriteUpdate && strings.HasPrefix(w.Path, "_outbox/") && w.Data["leaseOwner"] != nil && w.Data["status"] == nil {
				n++
			}
		}
		if n > 0 {
			s.mu.Lock()
			if s.claims == nil {
				s.claims = map[int]int{}
			}
			s.claims[n]++
			s.mu.Unlock()
		}
	}
	if db == triggers.SystemDB && s.delivered != nil {
		for _, w := range ws {
			if w.Type != collections.WriteUpdate || !strings.HasPrefix(w.Path, "_outbox/") || w.Data["status"] != triggers.StatusDelivered {
				continue
			}
			row, err := s.Store.Get(ctx, db, w.Path)
			if err != nil {
				return nil, err
			}
			ev, _ := row.Data["event"].(map[string]any)
			msg, _ := ev["id"].(string)
			if err := s.delivered(ctx, msg); err != nil {
				return nil, err
			}
		}
	}
	return s.Store.Commit(ctx, db, ws, o)
}

// startHooked runs a service on a hookedStore over a fresh SQLite store with
// one trigger on chat messages, ordered by chat.
func startHooked(t *testing.T, url string, hook func(context.Context, string) error) *pipeEnv {
	return startHookedWith(t, url, hook, triggers.Config{})
}

func startHookedWith(t *testing.T, url string, hook func(context.Context, string) error, cfg triggers.Config) *pipeEnv {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "triggers.json")
	def := "[" + triggerJSON("o", url, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 10, "initialBackoff": "20ms", "maxBackoff": "20ms"}`) + "]"
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	base := openStore(t, dir)
	e := &pipeEnv{store: &hookedStore{Store: base, delivered: hook}, file: file}
	e.start(t, cfg)
	t.Cleanup(func() {
		e.stop()
		_ = base.Close()
	})
	return e
}

// writeChat commits n messages of one chat in one commit, so they are all
// queued behind each other at once.
func writeChat(t *testing.T, st collections.Store, chat string, n int) []string {
	t.Helper()
	ids := msgIDs("m", n)
	ws := make([]collections.Write, n)
	for i, id := range ids {
		ws[i] = collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/u1/chats/%s/messages/%s", chat, id), Data: map[string]any{"i": i}}
	}
	if _, err := st.Commit(context.Background(), "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// serialReceiver fails the test when two requests of one chat are in
// flight at once, answers what status says, and keeps the order of the
// requests and of the 2xx answers.
type serialReceiver struct {
	*apptest.Receiver
	mu       sync.Mutex
	inflight map[string]int
	sent     []string            // message ids, in request order
	oks      []string            // message ids answered 2xx, in order
	hooks    map[string][]string // message id -> webhook-ids it came with
}

func newSerialReceiver(t *testing.T, delay time.Duration, status func(msg string, n int) int) *serialReceiver {
	sr := &serialReceiver{inflight: map[string]int{}, hooks: map[string][]string{}}
	sr.Receiver = apptest.NewReceiver(t, func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		chat, msg := r.Param("chatId"), r.DocID()
		sr.mu.Lock()
		sr.inflight[chat]++
		if sr.inflight[chat] > 1 {
			t.Errorf("two deliveries of chat %s in flight at once", chat)
		}
		sr.sent = append(sr.sent, msg)
		sr.hooks[msg] = append(sr.hooks[msg], r.ID())
		n := len(sr.hooks[msg])
		sr.mu.Unlock()
		time.Sleep(delay)
		code := status(msg, n)
		sr.mu.Lock()
		sr.inflight[chat]--
		if code/100 == 2 {
			sr.oks = append(sr.oks, msg)
		}
		sr.mu.Unlock()
		return code
	})
	return sr
}

func (sr *serialReceiver) snapshot() (sent, oks []string, hooks map[string][]string) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	hooks = map[string][]string{}
	for k, v := range sr.hooks {
		hooks[k] = append([]string(nil), v...)
	}
	return append([]string(nil), sr.sent...), append([]string(nil), sr.oks...), hooks
}

// checkFirstOKsInOrder fails unless the first 2xx of each message came in
// the messages' order (ids sort in commit order) and every id got one.
func checkFirstOKsInOrder(t *testing.T, oks, ids []string) {
	t.Helper()
	seen := map[string]bool{}
	var first []string
	for _, id := range oks {
		if !seen[id] {
			seen[id] = true
			first = append(first, id)
		}
	}
	if fmt.Sprint(first) != fmt.Sprint(ids) {
		t.Fatalf("first 2xx answers in order %v, want %v", first, ids)
	}
}

func allDelivered(n int) func([]*triggers.Delivery) bool {
	return func(ds []*triggers.Delivery) bool {
		if len(ds) != n {
			return false
		}
		for _, d := range ds {
			if d.Status != triggers.StatusDelivered {
				return false
			}
		}
		return true
	}
}

// While the answers of a key cannot be stored, the runner sends at most
// keyPipeline rows past the last one stored, then waits; once the store
// recovers, every answer is stored and the rest goes, in order.
func TestOrderingKeyPipelineIsBounded(t *testing.T) {
	rc := newSerialReceiver(t, 0, func(string, int) int { return http.StatusOK })
	gate := make(chan struct{})
	e := startHooked(t, rc.URL, func(ctx context.Context, _ string) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ids := writeChat(t, e.store, "c1", 3*keyPipeline)
	rc.WaitFor(t, "a full pipeline", apptest.AtLeast(keyPipeline))
	time.Sleep(300 * time.Millisecond)
	if sent, _, _ := rc.snapshot(); len(sent) != keyPipeline {
		t.Fatalf("%d rows sent while no answer could be stored, want %d: %v", len(sent), keyPipeline, sent)
	}
	close(gate)
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{}, allDelivered(len(ids)))
	sent, oks, _ := rc.snapshot()
	if len(sent) != len(ids) {
		t.Fatalf("%d requests, want %d (one per row): %v", len(sent), len(ids), sent)
	}
	checkFirstOKsInOrder(t, oks, ids)
}

// A record that fails mid-pipeline (here the store fails it, after the rows
// behind it were sent) leaves its row pending: the row is delivered again,
// with its webhook-id, after the later rows the pipeline had sent — the one
// order change pipelining allows. Every other row is delivered once, and the
// first 2xx of each row still comes in commit order.
func TestOrderingKeyRecordFailureMidPipeline(t *testing.T) {
	const failing = "m0005"
	rc := newSerialReceiver(t, time.Millisecond, func(string, int) int { return http.StatusOK })
	e := startHooked(t, rc.URL, func(_ context.Context, msg string) error {
		if msg != failing {
			return nil
		}
		if _, _, hooks := rc.snapshot(); len(hooks[msg]) < 2 {
			time.Sleep(50 * time.Millisecond) // the rows behind it go meanwhile
			return errors.New("disk on fire")
		}
		return nil
	})
	ids := writeChat(t, e.store, "c1", 20)
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{}, allDelivered(len(ids)))
	sent, oks, hooks := rc.snapshot()
	checkFirstOKsInOrder(t, oks, ids)
	for _, id := range ids {
		want := 1
		if id == failing {
			want = 2
		}
		if len(hooks[id]) != want {
			t.Errorf("%s sent %d times, want %d (%v)", id, len(hooks[id]), want, sent)
		}
	}
	if h := hooks[failing]; len(h) == 2 && h[0] != h[1] {
		t.Errorf("%s delivered again under another webhook-id: %v", failing, h)
	}
	first, again := -1, -1
	for i, id := range sent {
		if id == failing {
			if first < 0 {
				first = i
			} else {
				again = i
			}
		}
	}
	if again <= first+1 {
		t.Fatalf("%s was delivered again right after its first delivery (%v): the rows behind it did not go meanwhile", failing, sent)
	}
}

// A failed attempt (5xx) at a row stops the key's pipeline: no later row is
// sent until that row was answered 2xx, though they are all queued.
func TestOrderingKeyFailureStopsThePipeline(t *testing.T) {
	const failing = "m0005"
	rc := newSerialReceiver(t, 0, func(msg string, n int) int {
		if msg == failing && n < 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	e := startHooked(t, rc.URL, nil)
	ids := writeChat(t, e.store, "c1", 20)
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{}, allDelivered(len(ids)))
	sent, oks, _ := rc.snapshot()
	checkFirstOKsInOrder(t, oks, ids)
	want := append(append(append([]string(nil), ids[:6]...), failing, failing), ids[6:]...)
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Fatalf("requests %v, want %v", sent, want)
	}
}

// Stopping the service while a key's rows are pipelined stores every
// answer already received (the drain waits for the records) and leaves
// the rest pending: after a restart no row answered 2xx is sent again, and
// every row is delivered.
func TestOrderingKeyStopStoresPipelinedAnswers(t *testing.T) {
	rc := newSerialReceiver(t, time.Millisecond, func(string, int) int { return http.StatusOK })
	slow := make(chan struct{})
	e := startHooked(t, rc.URL, func(ctx context.Context, _ string) error {
		select { // records take a while: answers pile up in the pipeline
		case <-slow:
		case <-time.After(20 * time.Millisecond):
		}
		return nil
	})
	ids := writeChat(t, e.store, "c1", 200)
	rc.WaitFor(t, "deliveries under way", apptest.AtLeast(40))
	e.stop()
	close(slow)
	_, oksAtStop, _ := rc.snapshot()
	ds, _, err := e.svc.Deliveries(context.Background(), triggers.DeliveryQuery{Status: triggers.StatusDelivered, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(oksAtStop) {
		t.Fatalf("after stop %d rows are recorded delivered, the receiver answered 2xx to %d", len(ds), len(oksAtStop))
	}
	e.start(t, triggers.Config{})
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Limit: 1000}, allDelivered(len(ids)))
	sent, oks, _ := rc.snapshot()
	if len(sent) != len(ids) {
		t.Fatalf("%d requests for %d rows: a row answered before the stop was sent again", len(sent), len(ids))
	}
	checkFirstOKsInOrder(t, oks, ids)
}

// A key that fell behind (its rows did not fit in its share and wait in
// the outbox, unleased) takes its backlog back a page at a time with one
// claim commit per page, not one per row; every row is still delivered
// once, in order.
func TestOrderingKeyBacklogClaimedPerPage(t *testing.T) {
	// The receiver answers nothing until every row is written (however
	// slow the writes are on a loaded machine), and with MaxHeld 100 a key
	// holds at most 16 rows: the rest wait in the outbox.
	written := make(chan struct{})
	rc := newSerialReceiver(t, time.Millisecond, func(string, int) int {
		<-written
		return http.StatusOK
	})
	e := startHookedWith(t, rc.URL, nil, triggers.Config{MaxHeld: 100})
	ids := msgIDs("m", 200)
	for _, id := range ids {
		e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/"+id, map[string]any{"a": 1})
	}
	close(written)
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Limit: 1000}, allDelivered(len(ids)))
	sent, oks, _ := rc.snapshot()
	if len(sent) != len(ids) {
		t.Fatalf("%d requests for %d rows", len(sent), len(ids))
	}
	checkFirstOKsInOrder(t, oks, ids)
	claims := e.store.(*hookedStore).claimCommits()
	commits, rows := 0, 0
	for n, c := range claims {
		commits += c
		rows += n * c
	}
	if rows < 150 || commits > rows/4 {
		t.Fatalf("%d rows claimed in %d commits (by rows per commit: %v), want the backlog claimed a page per commit", rows, commits, claims)
	}
}
