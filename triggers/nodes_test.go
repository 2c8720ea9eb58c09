package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// Several nodes on one store ("Several nodes" in docs/architecture.md):
// an admin change made through one node is in force on the others at once
// (each registry follows _triggers in the change log), every change is
// evaluated once by the node holding the evaluator lease, and a node that
// dies mid-delivery has its rows and its lease taken over.

// nodes are two whole nodes on one SQLite store. b was started first and
// holds the evaluator lease, so b evaluates every change (and delivers the
// rows it leases itself on insert); the tests change the triggers through
// a, so a change reaches the evaluation only if it reaches b.
type nodes struct {
	a, b  *apptest.Stack
	store collections.Store
	bID   string // b's node id, the evaluator lease owner
}

func startNodes(t *testing.T, triggersJSON string) *nodes {
	t.Helper()
	st := apptest.OpenStore(t, t.TempDir())
	opts := apptest.Options{Store: st, Triggers: triggersJSON}
	n := &nodes{store: st, b: apptest.Start(t, opts)}
	apptest.WaitFor(t, "node b to take the evaluator lease", func() bool {
		n.bID = apptest.EvaluatorOwner(t, st)
		return n.bID != ""
	})
	n.a = apptest.Start(t, opts)
	return n
}

// checkBEvaluated fails the test unless b still holds the evaluator lease
// (so b evaluated every change of the test).
func (n *nodes) checkBEvaluated(t *testing.T) {
	t.Helper()
	if got := apptest.EvaluatorOwner(t, n.store); got != n.bID {
		t.Fatalf("evaluator lease owner=%q, want node b (%q)", got, n.bID)
	}
}

// registered is the definition of a trigger to register (no secret: the
// registry makes one).
func registered(t testing.TB, id, url string) triggers.Trigger {
	t.Helper()
	var def triggers.Trigger
	js := fmt.Sprintf(`{"triggerId": %q, "collection": "users/{userId}/chats/{chatId}/messages", "events": ["create"], "url": %q}`, id, url)
	if err := json.Unmarshal([]byte(js), &def); err != nil {
		t.Fatal(err)
	}
	return def
}

// put creates a message and returns its change-log seq.
func put(t testing.TB, st collections.Store, id string) int64 {
	t.Helper()
	res, err := st.Commit(context.Background(), "default", []collections.Write{{
		Type: collections.WriteCreate, Path: "users/u1/chats/c1/messages/" + id, Data: map[string]any{"id": id},
	}}, collections.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Doc.Seq
}

// soon waits up to two seconds for cond (it takes milliseconds): well under
// the registry's idle recheck (5 s), so only the Notify wake-up can make it.
func soon(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within two seconds: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// status is a trigger's status in a node's admin view ("" when unknown).
func status(t testing.TB, s *apptest.Stack, id string) string {
	t.Helper()
	in, _, err := s.Triggers.Get(context.Background(), id)
	if errors.Is(err, triggers.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return in.Status
}

// rowAt reports whether trigger id has an outbox row for the change seq.
func rowAt(t testing.TB, s *apptest.Stack, id string, seq int64) bool {
	t.Helper()
	ds, _, err := s.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{TriggerID: id, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Seq == seq {
			return true
		}
	}
	return false
}

// Register, disable, enable and delete through node a: node b, which
// evaluates, follows each at once — a change written right after the admin
// call returned is evaluated with it in force — and so does b's admin view. A file trigger on both nodes (sentinel)
// matches every message, so once its row for a change exists, that change
// was evaluated, and the registered trigger's row for it must (or must not)
// exist too.
func TestNodes_AdminChangesReachEveryNode(t *testing.T) {
	rc, sentinel := apptest.NewReceiver(t, nil), apptest.NewReceiver(t, nil)
	n := startNodes(t, "["+triggerJSON("sentinel", sentinel.URL, "")+"]")
	ctx := context.Background()

	// Registered on a, written at once: b evaluates m1 with x in force.
	_, secret, err := n.a.Triggers.Register(ctx, registered(t, "x", rc.URL))
	if err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m1")
	got := rc.WaitFor(t, "x's delivery of m1", apptest.HasDoc("m1"))
	apptest.Verify(t, secret, got[0])
	soon(t, "b's admin view shows x", func() bool { return status(t, n.b, "x") == "enabled" })

	// Disabled on a: b stops matching.
	if err := n.a.Triggers.Disable(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	seq2 := put(t, n.store, "m2") // no wait: b evaluates m2 with the switch in force
	soon(t, "b's admin view shows x disabled", func() bool { return status(t, n.b, "x") == "disabled" })
	waitDeliveries(t, n.a.Triggers, triggers.DeliveryQuery{TriggerID: "sentinel"}, func([]*triggers.Delivery) bool { return rowAt(t, n.a, "sentinel", seq2) })
	if rowAt(t, n.a, "x", seq2) {
		t.Fatal("x matched m2, written after x was disabled through node a")
	}

	// Enabled again on a: b matches again (not what was written while off).
	if err := n.a.Triggers.Enable(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m3")
	soon(t, "b's admin view shows x enabled", func() bool { return status(t, n.b, "x") == "enabled" })
	rc.WaitFor(t, "x's delivery of m3", apptest.HasDoc("m3"))

	// Deleted on a: b no longer knows x.
	if err := n.a.Triggers.Delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	seq4 := put(t, n.store, "m4")
	soon(t, "b's admin view no longer shows x", func() bool { return status(t, n.b, "x") == "" })
	waitDeliveries(t, n.a.Triggers, triggers.DeliveryQuery{TriggerID: "sentinel"}, func([]*triggers.Delivery) bool { return rowAt(t, n.a, "sentinel", seq4) })
	if rowAt(t, n.a, "x", seq4) {
		t.Fatal("x matched m4, written after x was deleted through node a")
	}
	for _, r := range rc.Requests() {
		if id := r.DocID(); id == "m2" || id == "m4" {
			t.Fatalf("x delivered %s", id)
		}
	}
	n.checkBEvaluated(t)

	// The other way round: a evaluates nothing, so only its registry's
	// following the log shows it b's changes.
	if _, _, err := n.b.Triggers.Register(ctx, registered(t, "y", rc.URL)); err != nil {
		t.Fatal(err)
	}
	soon(t, "a's admin view shows y", func() bool { return status(t, n.a, "y") == "enabled" })
	if err := n.b.Triggers.Disable(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	soon(t, "a's admin view shows y disabled", func() bool { return status(t, n.a, "y") == "disabled" })
	if err := n.b.Triggers.Delete(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	soon(t, "a's admin view no longer shows y", func() bool { return status(t, n.a, "y") == "" })
}

// A rotation through one node signs the next delivery of every node with
// the new secret: first b's after a rotation on a, then, once b is gone and
// a has taken over the evaluator lease, a's after a rotation on b.
func TestNodes_RotatedSecretSignsOnEveryNode(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	n := startNodes(t, "")
	ctx := context.Background()
	_, s1, err := n.a.Triggers.Register(ctx, registered(t, "x", rc.URL))
	if err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m1")
	apptest.Verify(t, s1, rc.WaitFor(t, "the delivery of m1", apptest.HasDoc("m1"))[0])

	s2, err := n.a.Triggers.RotateSecret(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m2")
	r := rc.RequestFor(t, "m2")
	apptest.Verify(t, s2, r) // b signs with a's new secret...
	apptest.Verify(t, s1, r) // ...and the previous one during the overlap
	n.checkBEvaluated(t)

	before, _, err := n.a.Triggers.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // the rotation on b ends its overlap later
	s3, err := n.b.Triggers.RotateSecret(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	soon(t, "a's admin view shows the rotation on b", func() bool {
		in, _, err := n.a.Triggers.Get(ctx, "x")
		return err == nil && in.SecretRotatingUntil > before.SecretRotatingUntil
	})
	if err := n.b.Stop(); err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m3") // evaluated by a once b's evaluator lease ran out
	r = rc.RequestFor(t, "m3")
	apptest.Verify(t, s3, r)
	if owner := apptest.EvaluatorOwner(t, n.store); owner == n.bID || owner == "" {
		t.Fatalf("evaluator lease owner=%q after b stopped, want node a", owner)
	}
}

// A node that dies with a request in flight leaves its row leased; the
// other node takes the row over once the lease ends (same webhook-id) and
// then the evaluator lease too: each change still has exactly one row.
func TestNodes_KilledNodeIsTakenOver(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(ctx context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N == 1 {
			<-ctx.Done() // hangs until its node dies
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	st := openStore(t, dir)
	t.Cleanup(func() { _ = st.Close() })
	file := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(file, []byte("["+triggerJSON("k", rc.URL, `, "timeout": "1s"`)+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := func(id string) *pipeEnv {
		e := &pipeEnv{store: st, file: file}
		e.start(t, triggers.Config{NodeID: id, LeaseSlack: 200 * time.Millisecond, DrainTimeout: 50 * time.Millisecond})
		t.Cleanup(e.stop)
		return e
	}
	b := node("node-b")
	apptest.WaitFor(t, "node b to take the evaluator lease", func() bool { return apptest.EvaluatorOwner(t, st) == "node-b" })
	a := node("node-a")

	seq1 := put(t, st, "m1")
	first := rc.WaitFor(t, "b's hanging request", apptest.AtLeast(1))[0]
	b.stop() // the request is cut off; the row stays leased to b
	got := rc.WaitFor(t, "a's request after b's lease ran out", apptest.AtLeast(2))
	if got[1].DocID() != "m1" || got[1].ID() != first.ID() {
		t.Fatalf("second request doc=%q id=%q, want m1 with webhook-id %q", got[1].DocID(), got[1].ID(), first.ID())
	}
	seq2 := put(t, st, "m2")
	rc.WaitFor(t, "m2, evaluated by a once b's evaluator lease ran out", apptest.HasDoc("m2"))
	if owner := apptest.EvaluatorOwner(t, st); owner != "node-a" {
		t.Fatalf("evaluator lease owner=%q, want node-a", owner)
	}
	ds := waitDeliveries(t, a.svc, triggers.DeliveryQuery{}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 2 && ds[0].Status == triggers.StatusDelivered && ds[1].Status == triggers.StatusDelivered
	})
	if ds[0].Seq != seq2 || ds[1].Seq != seq1 {
		t.Fatalf("rows at seqs %d, %d, want %d and %d (one per change)", ds[0].Seq, ds[1].Seq, seq2, seq1)
	}
}

// A disable through a stops the retries node b is making of a failing
// delivery (b parks the row); the enable through a resumes them, on
// whichever node's poller finds the row due first.
func TestNodes_DisableStopsAnotherNodesRetries(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	n := startNodes(t, "")
	ctx := context.Background()
	def := registered(t, "x", rc.URL)
	def.RetryPolicy = &triggers.RetryPolicy{MaxAttempts: 100, InitialBackoff: "20ms", MaxBackoff: "20ms"}
	// 1 s: a lease (timeout + 30 s slack) is then shorter than a park.
	def.Timeout = "1s"
	if _, _, err := n.a.Triggers.Register(ctx, def); err != nil {
		t.Fatal(err)
	}
	put(t, n.store, "m1")
	rc.WaitFor(t, "b's first retries", apptest.AtLeast(3))
	if err := n.a.Triggers.Disable(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	soon(t, "b's admin view shows x disabled", func() bool { return status(t, n.b, "x") == "disabled" })
	// b's next retry finds x disabled and puts the row back for a minute
	// (its lease would be 31 s): after that no retry is due, and every
	// request made is a recorded attempt.
	ds := waitDeliveries(t, n.a.Triggers, triggers.DeliveryQuery{TriggerID: "x"}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 1 && (ds[0].Status != triggers.StatusPending || ds[0].NextAttemptAt > time.Now().Add(45*time.Second).UnixMilli())
	})
	if d := ds[0]; d.Status != triggers.StatusPending {
		t.Fatalf("x's row after the disable through a: %s, want it pending, put back", show(ds))
	}
	if got, recorded := len(rc.Requests()), len(ds[0].Attempts); got != recorded {
		t.Fatalf("%d requests, %d recorded attempts, after b put the row back", got, recorded)
	}
	rc.SetRespond(nil)
	after := len(rc.Requests())
	if err := n.a.Triggers.Enable(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	rc.WaitFor(t, "the delivery resumed after the enable through a", apptest.AtLeast(after+1))
	waitDeliveries(t, n.a.Triggers, triggers.DeliveryQuery{TriggerID: "x", Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	n.checkBEvaluated(t)
}
