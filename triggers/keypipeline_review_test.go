package triggers_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// A row canceled (admin API) while its 2xx answer waits to be stored: the
// record fails on the row's version and the row is let go, not sent again;
// the rows behind it are each delivered once, in order, and the trigger
// counts every delivered row once and the canceled one not at all.
func TestOrderingKeyCancelWhileRecordPending(t *testing.T) {
	const target = "m0003"
	rc := newSerialReceiver(t, time.Millisecond, func(string, int) int { return http.StatusOK })
	var (
		e        *pipeEnv
		once     sync.Once
		canceled = make(chan error, 1)
	)
	e = startHooked(t, rc.URL, func(ctx context.Context, msg string) error {
		if msg != target {
			return nil
		}
		once.Do(func() {
			_, _, hooks := rc.snapshot()
			ds, _, err := e.svc.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusPending, Limit: 100})
			if err != nil {
				canceled <- err
				return
			}
			for _, d := range ds {
				if d.EventID == hooks[target][0] {
					canceled <- e.svc.Cancel(ctx, d.ID)
					return
				}
			}
			canceled <- fmt.Errorf("no pending row of %s", target)
		})
		return nil
	})
	ids := writeChat(t, e.store, "c1", 20)
	select {
	case err := <-canceled:
		if err != nil {
			t.Fatalf("cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the record of the target row never came")
	}
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{Limit: 100}, func(ds []*triggers.Delivery) bool {
		n := 0
		for _, d := range ds {
			if d.Status == triggers.StatusDelivered {
				n++
			}
		}
		return n == len(ids)-1
	})
	for _, d := range ds {
		if d.Status != triggers.StatusDelivered && d.Status != triggers.StatusCanceled {
			t.Fatalf("row at seq %d is %s", d.Seq, d.Status)
		}
	}
	time.Sleep(200 * time.Millisecond) // a wrong retry of the canceled row would go now
	sent, oks, hooks := rc.snapshot()
	if len(sent) != len(ids) {
		t.Fatalf("%d requests for %d rows (the canceled row sent again?): %v", len(sent), len(ids), sent)
	}
	checkFirstOKsInOrder(t, oks, ids)
	if len(hooks[target]) != 1 {
		t.Fatalf("%s sent %d times", target, len(hooks[target]))
	}
	apptest.WaitFor(t, "the delivered count", func() bool {
		info, _, err := e.svc.Get(context.Background(), "o")
		return err == nil && info.Counts.Delivered == int64(len(ids)-1)
	})
}

// orderGuard is a receiver that checks the rule pipelining keeps across
// nodes: a row is first sent only once every earlier row of its key was
// answered 2xx (a redelivery of an answered row may overlap later rows).
type orderGuard struct {
	*apptest.Receiver
	t     *testing.T
	order map[string]int // message id -> position in commit order
	mu    sync.Mutex
	sent  map[string]int // message id -> requests
	ok    map[string]bool
}

func newOrderGuard(t *testing.T, ids []string) *orderGuard {
	g := &orderGuard{t: t, order: map[string]int{}, sent: map[string]int{}, ok: map[string]bool{}}
	for i, id := range ids {
		g.order[id] = i
	}
	g.Receiver = apptest.NewReceiver(t, func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		msg := r.DocID()
		g.mu.Lock()
		if g.sent[msg] == 0 {
			for id, i := range g.order {
				if i < g.order[msg] && !g.ok[id] {
					t.Errorf("%s first sent before %s was answered 2xx", msg, id)
				}
			}
		}
		g.sent[msg]++
		g.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // b is still sending its rows when a polls the later ones
		g.mu.Lock()
		g.ok[msg] = true
		g.mu.Unlock()
		return http.StatusOK
	})
	return g
}

// Two nodes on one store: the evaluating node holds the key's first rows
// (its share), the other node polls the later ones. The first node's
// records are slow, so the leases of its answered rows (and of the rows
// queued behind them) run out while their answers wait to be stored, and
// the other node takes the rows over. The records that come late fail on the rows' versions; no row is
// ever first sent before every earlier row of its key was answered 2xx, and
// every row ends delivered.
func TestNodes_OrderingKeyLeaseLostWhileRecordsPending(t *testing.T) {
	ids := msgIDs("m", 40)
	g := newOrderGuard(t, ids)
	dir := t.TempDir()
	base := openStore(t, dir)
	t.Cleanup(func() { _ = base.Close() })
	file := filepath.Join(dir, "triggers.json")
	def := "[" + triggerJSON("o", g.URL, `, "events": ["create"], "timeout": "1s", "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 10, "initialBackoff": "20ms", "maxBackoff": "20ms"}`) + "]"
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	var slowOnce sync.Map
	slow := func(ctx context.Context, msg string) error {
		if _, again := slowOnce.LoadOrStore(msg, true); again {
			return nil
		}
		select { // longer than the lease (timeout + slack)
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	node := func(id string, hook func(context.Context, string) error, maxHeld int) *pipeEnv {
		e := &pipeEnv{store: &hookedStore{Store: base, delivered: hook}, file: file}
		e.start(t, triggers.Config{NodeID: id, MaxHeld: maxHeld, LeaseSlack: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, DrainTimeout: 50 * time.Millisecond})
		t.Cleanup(e.stop)
		return e
	}
	b := node("node-b", slow, 100) // b holds a key share of the rows; a polls the rest
	apptest.WaitFor(t, "node b to take the evaluator lease", func() bool { return apptest.EvaluatorOwner(t, base) == "node-b" })
	a := node("node-a", nil, 0)

	ws := make([]collections.Write, len(ids))
	for i, id := range ids {
		ws[i] = collections.Write{Type: collections.WriteCreate, Path: "users/u1/chats/c1/messages/" + id, Data: map[string]any{"i": i}}
	}
	if _, err := base.Commit(context.Background(), "default", ws, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, a.svc, triggers.DeliveryQuery{Limit: 100}, allDelivered(len(ids)))
	_ = b
	g.mu.Lock()
	defer g.mu.Unlock()
	again := 0
	for _, id := range ids {
		if g.sent[id] == 0 {
			t.Errorf("%s never sent", id)
		}
		again += g.sent[id] - 1
	}
	t.Logf("%d redeliveries", again)
}

// A key's recorder whose commit never returns on its own (a store that
// hangs until its caller gives up): the stop ends once the drain timeout
// passed, its goroutines end with it (Run returns), no answer is stored,
// and after a restart every row is delivered, the answered ones again with
// their webhook-ids, first answers still in order.
func TestOrderingKeyStopWhileRecordHangs(t *testing.T) {
	rc := newSerialReceiver(t, 0, func(string, int) int { return http.StatusOK })
	var hang atomic.Bool
	hang.Store(true)
	e := startHookedWith(t, rc.URL, func(ctx context.Context, _ string) error {
		if !hang.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}, triggers.Config{DrainTimeout: 100 * time.Millisecond})
	ids := writeChat(t, e.store, "c1", 2*keyPipeline)
	rc.WaitFor(t, "a full pipeline", apptest.AtLeast(keyPipeline))
	stopped := make(chan struct{})
	go func() {
		e.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the stop waits for a record that hangs")
	}
	ds, _, err := e.svc.Deliveries(context.Background(), triggers.DeliveryQuery{Status: triggers.StatusDelivered, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("%d rows recorded delivered though no record could be stored", len(ds))
	}
	hang.Store(false)
	e.start(t, triggers.Config{})
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Limit: 100}, allDelivered(len(ids)))
	_, oks, hooks := rc.snapshot()
	checkFirstOKsInOrder(t, oks, ids)
	for _, id := range ids {
		if n := len(hooks[id]); n == 0 || n > 2 {
			t.Errorf("%s sent %d times", id, n)
		} else if n == 2 && hooks[id][0] != hooks[id][1] {
			t.Errorf("%s sent again under another webhook-id: %v", id, hooks[id])
		}
	}
}

// A disable while a key's answers wait to be stored: the answers are still
// stored (each row the receiver answered 2xx ends delivered), no further row
// of the key is sent, and an enable sends the rest, in order, each once.
func TestOrderingKeyDisableWhileRecordsPending(t *testing.T) {
	rc := newSerialReceiver(t, time.Millisecond, func(string, int) int { return http.StatusOK })
	held := make(chan struct{})
	e := startHooked(t, rc.URL, func(ctx context.Context, msg string) error {
		if msg >= "m0005" {
			select { // the answers from m0005 on wait until the trigger is disabled
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ids := writeChat(t, e.store, "c1", 60)
	rc.WaitFor(t, "rows sent past the held record", apptest.AtLeast(10))
	if err := e.svc.Disable(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	close(held)
	var sent []string
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Status: triggers.StatusDelivered, Limit: 100}, func(ds []*triggers.Delivery) bool {
		sent, _, _ = rc.snapshot()
		return len(ds) == len(sent)
	})
	time.Sleep(300 * time.Millisecond)
	if now, _, _ := rc.snapshot(); len(now) != len(sent) || len(sent) >= len(ids) {
		t.Fatalf("%d rows sent when the records were stored, %d after the disable settled (of %d)", len(sent), len(now), len(ids))
	}
	if err := e.svc.Enable(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, e.svc, triggers.DeliveryQuery{Limit: 100}, allDelivered(len(ids)))
	all, oks, _ := rc.snapshot()
	if len(all) != len(ids) {
		t.Fatalf("%d requests for %d rows: %v", len(all), len(ids), all)
	}
	checkFirstOKsInOrder(t, oks, ids)
}
