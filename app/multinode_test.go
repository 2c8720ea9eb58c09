package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/mongo/mongotest"
	"github.com/loomdb/loom/triggers"
)

// Several whole nodes on one MongoDB database ("Running several nodes" in
// the README): two nodes built by app.New, each with its own mongo Store
// (its own client, committer and change-stream waker), as two loom serve
// --engine mongo processes are. Nothing is shared in the process but the
// database, so what one node sees of the other's writes came through
// MongoDB. These tests need a server (mongotest: LOOM_TEST_MONGO_URI or a
// Docker daemon) and skip with one line without one.

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

// mongoNodes are two nodes on one fresh database. b was started first and
// holds the evaluator lease (b evaluates every change and delivers the rows
// it leases itself on insert), so a change made through a reaches the
// evaluation only through MongoDB.
type mongoNodes struct {
	a, b *apptest.Stack
	bID  string // b's node id, the evaluator lease owner
}

func startMongoNodes(t *testing.T, o apptest.Options) *mongoNodes {
	t.Helper()
	uri, db := mongotest.Database(t)
	o.Mongo = &apptest.Mongo{URI: uri, Database: db}
	n := &mongoNodes{b: apptest.Start(t, o)}
	apptest.WaitFor(t, "node b to take the evaluator lease", func() bool {
		n.bID = apptest.EvaluatorOwner(t, n.b.Store)
		return n.bID != ""
	})
	n.a = apptest.Start(t, o)
	return n
}

// messageTrigger is a trigger on every message creation, signed with
// apptest.WebhookSecret; extra is appended to the object.
func messageTrigger(id, url, extra string) string {
	return fmt.Sprintf(`{"triggerId": %q, "collection": "users/{userId}/chats/{chatId}/messages", "events": ["create"], "url": %q, "secret": %q%s}`,
		id, url, apptest.WebhookSecret, extra)
}

// putMessage creates message id through the node's own Store and returns
// its change-log seq.
func putMessage(t testing.TB, s *apptest.Stack, id string) int64 {
	t.Helper()
	res, err := s.Store.Commit(context.Background(), "default", []collections.Write{{
		Type: collections.WriteCreate, Path: "users/u1/chats/c1/messages/" + id, Data: map[string]any{"id": id},
	}}, collections.CommitOptions{})
	if err != nil {
		t.Errorf("commit %s: %v", id, err)
		return 0
	}
	return res[0].Doc.Seq
}

// rows are trigger id's outbox rows as node s's admin API lists them.
func rows(t testing.TB, s *apptest.Stack, id string) []*triggers.Delivery {
	t.Helper()
	ds, _, err := s.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{TriggerID: id, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// rowAt is trigger id's row for the change seq (nil when none).
func rowAt(t testing.TB, s *apptest.Stack, id string, seq int64) *triggers.Delivery {
	t.Helper()
	for _, d := range rows(t, s, id) {
		if d.Seq == seq {
			return d
		}
	}
	return nil
}

// rowOwner is the node holding the lease on an outbox row (the outbox is
// the _outbox collection of triggers.SystemDB).
func rowOwner(t testing.TB, s *apptest.Stack, d *triggers.Delivery) string {
	t.Helper()
	doc, err := s.Store.Get(context.Background(), triggers.SystemDB, "_outbox/"+d.ID)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := collections.Lookup(doc, collections.FieldLeaseOwner)
	owner, _ := v.(string)
	return owner
}

// sseEvents opens a Server-Sent Events subscription to collection on node
// s with the admin key and returns the data of its events as they arrive
// (the channel closes when the stream ends; cleanup ends it).
func sseEvents(t *testing.T, s *apptest.Stack, collection string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/realtime/sse?collection="+collection, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apptest.AdminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("sse: %v", err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		res.Body.Close()
		cancel()
		t.Fatalf("sse: status %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		rd := bufio.NewScanner(res.Body)
		rd.Buffer(make([]byte, 64<<10), 1<<20)
		for rd.Scan() {
			if data, ok := strings.CutPrefix(rd.Text(), "data: "); ok {
				select {
				case out <- data:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		res.Body.Close()
		<-done
	})
	return out
}

// waitEventFor waits for an event message about the document at path.
func waitEventFor(t *testing.T, events <-chan string, path string) {
	t.Helper()
	timeout := time.After(apptest.WaitTimeout)
	for {
		select {
		case data, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before an event for %s", path)
			}
			var m struct {
				Type    string `json:"type"`
				Payload struct {
					Delta struct {
						Path string `json:"path"`
					} `json:"delta"`
				} `json:"payload"`
			}
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatalf("sse data %s: %v", data, err)
			}
			if m.Type == "event" && m.Payload.Delta.Path == path {
				return
			}
		case <-timeout:
			t.Fatalf("no event for %s within %s", path, apptest.WaitTimeout)
		}
	}
}

// A write through node a's REST API reaches node b's realtime subscribers
// (b's store is woken by MongoDB's change stream, not by a's commit) and
// b's RxDB pull; a's tokens and query cursors work on b (the shared
// settings).
func TestMongoNodes_RealtimeAcrossNodes(t *testing.T) {
	n := startMongoNodes(t, apptest.Options{})

	events := sseEvents(t, n.b, "notes")
	n.a.Put(t, "notes/n1", `{"text":"from a"}`)
	waitEventFor(t, events, "notes/n1")
	n.a.Put(t, "notes/n2", `{"text":"from a again"}`)
	waitEventFor(t, events, "notes/n2")

	r := n.b.MustDo(t, http.StatusOK, "GET", "/replication/rxdb/default/notes/0/pull?lwt=0&id=&limit=10", "")
	var pull struct {
		Documents []map[string]any `json:"documents"`
	}
	if err := json.Unmarshal(r.Body, &pull); err != nil {
		t.Fatalf("pull body %s: %v", r.Body, err)
	}
	var ids []string
	for _, d := range pull.Documents {
		id, _ := d["id"].(string)
		ids = append(ids, id)
	}
	if !slices.Equal(ids, []string{"n1", "n2"}) {
		t.Fatalf("b's RxDB pull ids=%v, want [n1 n2] (a's writes, in order); body %s", ids, r.Body)
	}

	u := n.a.SignUp(t, "alice")
	if me := n.b.Do(t, "GET", "/auth/v1/me", "", u.Header()); me.Status != http.StatusOK {
		t.Fatalf("a's access token on b: status=%d %s, want 200 (one jwt secret)", me.Status, me.Body)
	}
	page := n.a.MustDo(t, http.StatusOK, "POST", "/api/v1/databases/default/query", `{"collection":"notes","limit":1}`).JSON(t)
	cursor, _ := page["nextCursor"].(string)
	if cursor == "" {
		t.Fatalf("a's first page has no cursor: %v", page)
	}
	next := n.b.MustDo(t, http.StatusOK, "POST", "/api/v1/databases/default/query",
		fmt.Sprintf(`{"collection":"notes","limit":1,"startAfter":%q}`, cursor)).JSON(t)
	docs, _ := next["docs"].([]any)
	if len(docs) != 1 || docs[0].(map[string]any)["id"] != "n2" {
		t.Fatalf("b continued a's cursor with %v, want n2 (one cursor key)", docs)
	}
}

// Changes written concurrently through both nodes are each evaluated once
// and delivered once: one outbox row per change, one request per row
// (distinct webhook-ids = changes), whichever node delivers it.
func TestMongoNodes_TriggersFireOnce(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	n := startMongoNodes(t, apptest.Options{Triggers: "[" + messageTrigger("t", rc.URL, "") + "]"})
	const perNode = 15
	var mu sync.Mutex
	var seqs []int64
	var wg sync.WaitGroup
	for name, s := range map[string]*apptest.Stack{"a": n.a, "b": n.b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perNode {
				if seq := putMessage(t, s, fmt.Sprintf("%s%d", name, i)); seq != 0 {
					mu.Lock()
					seqs = append(seqs, seq)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	const total = 2 * perNode
	rc.WaitFor(t, "a request for every message", func(rs []apptest.Request) bool {
		docs := map[string]bool{}
		for _, r := range rs {
			docs[r.DocID()] = true
		}
		return len(docs) == total
	})
	var ds []*triggers.Delivery
	apptest.WaitFor(t, "every row delivered", func() bool {
		ds = rows(t, n.a, "t")
		for _, d := range ds {
			if d.Status != triggers.StatusDelivered {
				return false
			}
		}
		return len(ds) >= total
	})
	time.Sleep(500 * time.Millisecond) // a second evaluation or delivery would show by now
	ds = rows(t, n.b, "t")
	got := make([]int64, 0, len(ds))
	for _, d := range ds {
		got = append(got, d.Seq)
	}
	slices.Sort(got)
	slices.Sort(seqs)
	if !slices.Equal(got, seqs) {
		t.Fatalf("outbox rows at seqs %v, want one per change %v", got, seqs)
	}
	reqs := rc.Requests()
	ids := map[string]bool{}
	for _, r := range reqs {
		apptest.Verify(t, apptest.WebhookSecret, r)
		ids[r.ID()] = true
	}
	if len(reqs) != total || len(ids) != total {
		t.Fatalf("%d requests with %d distinct webhook-ids, want %d of each", len(reqs), len(ids), total)
	}
}

// triggerView is a trigger as a node's admin API shows it.
type triggerView struct {
	Status              string `json:"status"`
	Secret              string `json:"secret"`
	SecretRotatingUntil int64  `json:"secretRotatingUntil"`
}

// adminTrigger is node s's admin view of trigger id (nil when s answers
// 404).
func adminTrigger(t testing.TB, s *apptest.Stack, id string) *triggerView {
	t.Helper()
	r := s.Do(t, "GET", "/admin/v1/triggers/"+id, "", nil)
	if r.Status == http.StatusNotFound {
		return nil
	}
	if r.Status != http.StatusOK {
		t.Fatalf("GET trigger %s: status=%d %s", id, r.Status, r.Body)
	}
	var v triggerView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

// adminCall sends an admin request to node s and returns the trigger view
// it answers with, failing unless the status is 2xx.
func adminCall(t testing.TB, s *apptest.Stack, method, path, body string) triggerView {
	t.Helper()
	r := s.Do(t, method, path, body, nil)
	if r.Status < 200 || r.Status > 299 {
		t.Fatalf("%s %s: status=%d %s", method, path, r.Status, r.Body)
	}
	var v triggerView
	_ = json.Unmarshal(r.Body, &v) // a 204 has no body
	return v
}

// Register, disable, enable, rotate and delete through node a's admin API:
// b's admin API shows each, and b, which evaluates, applies each to a
// change written right after the call returned (the trigger documents and
// the changes share one change log). A file trigger on both nodes
// (sentinel) matches every message, so once its row for a change exists
// the change was evaluated and x's row for it must (or must not) exist.
func TestMongoNodes_AdminChangesReachBothNodes(t *testing.T) {
	rc, sentinel := apptest.NewReceiver(t, nil), apptest.NewReceiver(t, nil)
	n := startMongoNodes(t, apptest.Options{Triggers: "[" + messageTrigger("sentinel", sentinel.URL, "") + "]"})
	evaluated := func(seq int64) {
		t.Helper()
		apptest.WaitFor(t, fmt.Sprintf("the evaluation of seq %d", seq), func() bool { return rowAt(t, n.b, "sentinel", seq) != nil })
	}
	shows := func(what string, cond func(v *triggerView) bool) {
		t.Helper()
		apptest.WaitFor(t, "b's admin API shows "+what, func() bool { return cond(adminTrigger(t, n.b, "x")) })
	}

	reg := adminCall(t, n.a, "POST", "/admin/v1/triggers",
		fmt.Sprintf(`{"triggerId":"x","collection":"users/{userId}/chats/{chatId}/messages","events":["create"],"url":%q}`, rc.URL))
	if reg.Secret == "" {
		t.Fatal("registering through a returned no secret")
	}
	putMessage(t, n.a, "m1")
	apptest.Verify(t, reg.Secret, rc.RequestFor(t, "m1"))
	shows("x enabled", func(v *triggerView) bool { return v != nil && v.Status == "enabled" })

	adminCall(t, n.a, "POST", "/admin/v1/triggers/x/disable", "")
	seq2 := putMessage(t, n.a, "m2")
	shows("x disabled", func(v *triggerView) bool { return v != nil && v.Status == "disabled" })
	evaluated(seq2)
	if rowAt(t, n.b, "x", seq2) != nil {
		t.Fatal("x matched m2, written after x was disabled through node a")
	}

	adminCall(t, n.a, "POST", "/admin/v1/triggers/x/enable", "")
	putMessage(t, n.a, "m3")
	shows("x enabled again", func(v *triggerView) bool { return v != nil && v.Status == "enabled" })
	apptest.Verify(t, reg.Secret, rc.RequestFor(t, "m3"))

	rot := adminCall(t, n.a, "POST", "/admin/v1/triggers/x/rotate-secret", "")
	if rot.Secret == "" || rot.Secret == reg.Secret {
		t.Fatalf("rotating through a returned secret %q, want a new one", rot.Secret)
	}
	putMessage(t, n.a, "m4")
	shows("the rotation", func(v *triggerView) bool { return v != nil && v.SecretRotatingUntil > 0 })
	r := rc.RequestFor(t, "m4")
	apptest.Verify(t, rot.Secret, r) // b signs with the secret rotated on a...
	apptest.Verify(t, reg.Secret, r) // ...and the previous one during the overlap

	adminCall(t, n.a, "DELETE", "/admin/v1/triggers/x", "")
	seq5 := putMessage(t, n.a, "m5")
	shows("x gone", func(v *triggerView) bool { return v == nil })
	evaluated(seq5)
	if rowAt(t, n.b, "x", seq5) != nil {
		t.Fatal("x matched m5, written after x was deleted through node a")
	}
	for _, r := range rc.Requests() {
		if id := r.DocID(); id == "m2" || id == "m5" {
			t.Fatalf("x delivered %s", id)
		}
	}
	if owner := apptest.EvaluatorOwner(t, n.a.Store); owner != n.bID {
		t.Fatalf("evaluator lease owner=%q, want node b (%q): b must have evaluated every change", owner, n.bID)
	}
}

// A node stopped with a request in flight leaves its row leased to it; the
// other node takes the row over once the lease ends and delivers it with
// the same webhook-id, then takes the evaluator lease too: each change
// still has exactly one row. The app has no knob for the delivery lease
// slack, so the takeover waits the default (trigger timeout + 30 s).
func TestMongoNodes_StoppedNodeIsTakenOver(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(ctx context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N == 1 {
			<-ctx.Done() // hangs until its sender is gone
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	const timeout = 2 * time.Second
	n := startMongoNodes(t, apptest.Options{
		Triggers:     "[" + messageTrigger("k", rc.URL, fmt.Sprintf(`, "timeout": %q`, timeout)) + "]",
		DrainTimeout: 50 * time.Millisecond,
	})
	aID := nodeID(t, n.a)

	seq1 := putMessage(t, n.a, "m1")
	first := rc.WaitFor(t, "b's hanging request", apptest.AtLeast(1))[0]
	var row *triggers.Delivery // the request goes out while the row's insert commits
	apptest.WaitFor(t, "m1's row", func() bool { row = rowAt(t, n.a, "k", seq1); return row != nil })
	if owner := rowOwner(t, n.a, row); owner != n.bID {
		t.Fatalf("m1's row is leased to %q while its request hangs, want node b (%q)", owner, n.bID)
	}
	if err := n.b.Stop(); err != nil { // cuts the request off; the row stays leased to b
		t.Fatal(err)
	}
	got := rc.WaitWithin(t, timeout+triggers.DefaultLeaseSlack+apptest.WaitTimeout, "a's request after b's lease ran out", apptest.AtLeast(2))
	if got[1].DocID() != "m1" || got[1].ID() != first.ID() {
		t.Fatalf("second request doc=%q id=%q, want m1 with webhook-id %q", got[1].DocID(), got[1].ID(), first.ID())
	}
	seq2 := putMessage(t, n.a, "m2")
	rc.WaitWithin(t, 2*apptest.WaitTimeout, "m2, evaluated by a once b's evaluator lease ran out", apptest.HasDoc("m2"))
	if owner := apptest.EvaluatorOwner(t, n.a.Store); owner != aID {
		t.Fatalf("evaluator lease owner=%q, want node a (%q)", owner, aID)
	}
	var ds []*triggers.Delivery
	apptest.WaitFor(t, "both rows delivered", func() bool {
		ds = rows(t, n.a, "k")
		return len(ds) == 2 && ds[0].Status == triggers.StatusDelivered && ds[1].Status == triggers.StatusDelivered
	})
	if ds[0].Seq != seq2 || ds[1].Seq != seq1 {
		t.Fatalf("rows at seqs %d, %d, want %d and %d (one per change)", ds[0].Seq, ds[1].Seq, seq2, seq1)
	}
}

// nodeID is the node's id in leases, kept in its data directory.
func nodeID(t testing.TB, s *apptest.Stack) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.DataDir, "node.id"))
	if err != nil {
		t.Fatalf("node id: %v", err)
	}
	return strings.TrimSpace(string(b))
}
