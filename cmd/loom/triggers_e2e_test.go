package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/app/apptest"
)

// Black-box tests of the trigger pipeline: a real `loom serve` process
// delivering to a real receiver in this process.

const e2eSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hook is one webhook request the receiver saw.
type hook struct {
	id       string // webhook-id
	trigger  string // body.triggerId
	doc      string // body.event.id
	key      string // body.event.document.data.k
	raw      []byte
	header   http.Header
	status   int // what the receiver answered
	okSerial int // order of the 2xx answers (0: not 2xx)
}

// hookReceiver is a receiver (apptest's) that answers with the status
// respond picks, after its delay, and keeps each answered request as a
// hook, in the order of the answers.
type hookReceiver struct {
	*apptest.Receiver
	mu  sync.Mutex
	got []hook
	oks int
}

func newHookReceiver(t *testing.T, respond func(path string) (int, time.Duration)) *hookReceiver {
	rc := &hookReceiver{}
	rc.Receiver = apptest.NewReceiver(t, func(_ context.Context, _ http.ResponseWriter, req apptest.Request) int {
		status, delay := http.StatusOK, time.Duration(0)
		if respond != nil {
			status, delay = respond(req.Path)
		}
		time.Sleep(delay)
		h := hook{id: req.ID(), trigger: req.TriggerID(), doc: req.DocID(), raw: req.Raw, header: req.Header, status: status}
		doc, _ := req.Event()["document"].(map[string]any)
		data, _ := doc["data"].(map[string]any)
		h.key, _ = data["k"].(string)
		// Recorded before the answer is written: Loom sends the next
		// delivery of an ordering key only after it read this answer.
		rc.mu.Lock()
		if status/100 == 2 {
			rc.oks++
			h.okSerial = rc.oks
		}
		rc.got = append(rc.got, h)
		rc.mu.Unlock()
		return status
	})
	return rc
}

func (rc *hookReceiver) hooks() []hook {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hook(nil), rc.got...)
}

// writeTriggerFiles writes triggers.json (the given triggers) and, unless
// toml is "", loom.toml into dir, and returns the env for startLoom.
func writeTriggerFiles(t *testing.T, dir string, trigs []map[string]any, toml string) (trigFile string, env []string) {
	t.Helper()
	trigFile = filepath.Join(dir, "triggers.json")
	b, err := json.MarshalIndent(trigs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	env = []string{"LOOM_ADMIN_KEY=k", "LOOM_TRIGGERS=" + trigFile}
	if toml != "" {
		cfg := filepath.Join(dir, "loom.toml")
		if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "LOOM_CONFIG="+cfg)
	}
	return trigFile, env
}

const allowLoopback = "[delivery]\nallow_hosts = [\"127.0.0.1\"]\n"

// apiDelivery is a row of GET /admin/v1/deliveries.
type apiDelivery struct {
	ID        string `json:"id"`
	TriggerID string `json:"triggerId"`
	EventID   string `json:"eventId"`
	Status    string `json:"status"`
	Attempts  []struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	} `json:"attempts"`
}

// listDeliveries pages through the delivery log (status "" = all).
func listDeliveries(t *testing.T, base, status string) []apiDelivery {
	t.Helper()
	var all []apiDelivery
	cursor := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"1000"}}
		if status != "" {
			q.Set("status", status)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, _ := http.NewRequest("GET", base+"/admin/v1/deliveries?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET deliveries: %v", err)
		}
		var out struct {
			Deliveries []apiDelivery `json:"deliveries"`
			NextCursor string        `json:"nextCursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET deliveries: status=%d err=%v", resp.StatusCode, err)
		}
		all = append(all, out.Deliveries...)
		if out.NextCursor == "" {
			return all
		}
		if page > 100 {
			t.Fatal("deliveries: more than 100 pages; the cursor does not advance")
		}
		cursor = out.NextCursor
	}
}

// seqOf returns the change seq in an event id evt_<epoch>-<seq>-<trigger>.
func seqOf(t *testing.T, eventID, trigger string) int64 {
	s := strings.TrimSuffix(eventID, "-"+trigger)
	n, err := strconv.ParseInt(s[strings.LastIndexByte(s, '-')+1:], 10, 64)
	if err != nil {
		t.Fatalf("event id %q: no seq: %v", eventID, err)
	}
	return n
}

// TestServe_TriggersSurviveSIGKILL kills the server with SIGKILL while
// clients create documents and webhooks are in flight (the receiver is slow
// and sometimes fails), restarts it, and checks that every acknowledged
// write has exactly one outbox row per trigger, delivered, under one stable
// webhook-id, signed, and — for the triggers with an ordering key — first
// delivered in commit order per key. One of them puts every document under
// one key and its receiver answers at once, so the key's answers are being
// recorded behind its deliveries (pipelined) when the kill lands.
func TestServe_TriggersSurviveSIGKILL(t *testing.T) {
	rc := newHookReceiver(t, func(path string) (int, time.Duration) {
		if path == "/onekey" {
			return http.StatusOK, 0
		}
		switch r := rand.IntN(100); {
		case r < 10:
			return http.StatusInternalServerError, 0
		case r < 40:
			return http.StatusOK, time.Duration(50+rand.IntN(150)) * time.Millisecond
		default:
			return http.StatusOK, 0
		}
	})
	retry := map[string]any{"maxAttempts": 30, "initialBackoff": "50ms", "maxBackoff": "200ms"}
	trigs := []map[string]any{
		{"triggerId": "items-all", "collection": "items", "events": []string{"create"},
			"url": rc.URL + "/all", "secret": e2eSecret, "timeout": "2s", "retryPolicy": retry},
		{"triggerId": "items-ordered", "collection": "items", "events": []string{"create"},
			"url": rc.URL + "/ordered", "secret": e2eSecret, "timeout": "2s", "retryPolicy": retry,
			"orderingKey": "event.document.data.k"},
		{"triggerId": "items-onekey", "collection": "items", "events": []string{"create"},
			"url": rc.URL + "/onekey", "secret": e2eSecret, "timeout": "2s", "retryPolicy": retry,
			"orderingKey": "'all'"},
	}
	names := []string{"items-all", "items-ordered", "items-onekey"}
	ordered := func(h hook) (key string, ok bool) {
		switch h.trigger {
		case "items-ordered":
			return h.trigger + "/" + h.key, true
		case "items-onekey":
			return h.trigger, true
		}
		return "", false
	}
	_, env := writeTriggerFiles(t, t.TempDir(), trigs, allowLoopback)
	data := t.TempDir()
	p := startLoom(t, data, env...)

	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		tried = map[string]bool{}
	)
	create := func(ctx context.Context, client *http.Client, base, id string, w int) error {
		body, _ := json.Marshal(map[string]any{"id": id, "w": w, "k": fmt.Sprintf("k%d", w%4)})
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/databases/default/documents/items", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		mu.Lock()
		tried[id] = true
		mu.Unlock()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("create %s: status %d", id, resp.StatusCode)
		}
		mu.Lock()
		acked[id] = true
		mu.Unlock()
		return nil
	}
	ackCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	// Phase 1: 8 writers, 300 documents at most; the kill lands mid-way.
	const writers, perWriter = 8, 38
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter && ctx.Err() == nil; i++ {
				if err := create(ctx, client, p.url, fmt.Sprintf("w%d-%d", w, i), w); err != nil {
					return // the server died
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			}
		}(w)
	}
	deadline := time.Now().Add(15 * time.Second)
	for (ackCount() < 150 || len(rc.hooks()) < 20) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	stop()
	wg.Wait()
	beforeKill := ackCount()
	seenAtKill := len(rc.hooks())
	if beforeKill < 100 {
		t.Fatalf("only %d writes acknowledged before the kill; the test proves nothing\n%s", beforeKill, p.output())
	}

	// Phase 2: restart on the same data directory and write a few more.
	p2 := startLoom(t, data, env...)
	for i := 0; i < 20; i++ {
		if err := create(context.Background(), client, p2.url, fmt.Sprintf("after-%d", i), 100+i); err != nil {
			t.Fatalf("write after restart: %v\n%s", err, p2.output())
		}
	}
	total := ackCount()
	t.Logf("%d writes acknowledged before the kill (%d webhooks seen then), %d in all", beforeKill, seenAtKill, total)

	// Wait until every acknowledged write was delivered (2xx) by both triggers.
	missing := func(hs []hook) []string {
		ok := map[string]bool{}
		for _, h := range hs {
			if h.status/100 == 2 {
				ok[h.trigger+"/"+h.doc] = true
			}
		}
		var miss []string
		mu.Lock()
		defer mu.Unlock()
		for id := range acked {
			for _, tr := range names {
				if !ok[tr+"/"+id] {
					miss = append(miss, tr+"/"+id)
				}
			}
		}
		sort.Strings(miss)
		return miss
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		miss := missing(rc.hooks())
		if len(miss) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s, %d acknowledged writes were never delivered, e.g. %v\nfirst process:\n%s\nsecond process:\n%s",
				len(miss), miss[:min(10, len(miss))], p.output(), p2.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	hs := rc.hooks()
	crossed, repeated := 0, 0 // events first delivered after the restart; 2xx answered twice
	oks := map[string]int{}
	for i, h := range hs {
		if h.status/100 == 2 {
			oks[h.id]++
			if oks[h.id] == 2 {
				repeated++
			}
			if oks[h.id] == 1 && i >= seenAtKill && !strings.HasPrefix(h.doc, "after-") {
				crossed++
			}
		}
	}
	t.Logf("%d events written before the kill were first delivered after the restart; %d events were answered 2xx twice (at least once)", crossed, repeated)
	// The kill must land while deliveries are under way: some made before
	// it, some events of acknowledged writes left to the restarted
	// process. Otherwise this test checks a clean restart, not a crash.
	if seenAtKill == 0 || crossed == 0 {
		t.Fatalf("no delivery was in flight at the kill: %d webhooks before it, %d events first delivered after the restart; the test proves nothing", seenAtKill, crossed)
	}

	// One stable webhook-id per (trigger, document), equal to the body id.
	idsOf := map[string]map[string]bool{} // trigger/doc -> webhook-ids
	docOf := map[string]string{}          // webhook-id -> trigger/doc
	for _, h := range hs {
		if h.id == "" || h.doc == "" || h.trigger == "" {
			t.Fatalf("webhook without webhook-id, triggerId or event.id: %s", h.raw)
		}
		var b struct {
			ID string `json:"id"`
		}
		json.Unmarshal(h.raw, &b)
		if b.ID != h.id {
			t.Fatalf("body id %q != webhook-id %q", b.ID, h.id)
		}
		k := h.trigger + "/" + h.doc
		if idsOf[k] == nil {
			idsOf[k] = map[string]bool{}
		}
		idsOf[k][h.id] = true
		if prev, ok := docOf[h.id]; ok && prev != k {
			t.Fatalf("webhook-id %s carried %s and %s", h.id, prev, k)
		}
		docOf[h.id] = k
	}
	for k, ids := range idsOf {
		if len(ids) != 1 {
			t.Errorf("%s arrived under %d webhook-ids: %v (a duplicated outbox row)", k, len(ids), ids)
		}
	}
	mu.Lock()
	for k := range idsOf {
		if doc := k[strings.IndexByte(k, '/')+1:]; !tried[doc] {
			t.Errorf("webhook for %s, a document never written", k)
		}
	}
	mu.Unlock()

	// Signatures verify with the official library (a sample, plus every
	// request after the restart's first).
	wh, err := standardwebhooks.NewWebhook(e2eSecret)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if i%7 != 0 && i != len(hs)-1 && i != seenAtKill {
			continue
		}
		if err := wh.Verify(h.raw, h.header); err != nil {
			t.Errorf("request %d (%s): signature does not verify: %v", i, h.id, err)
		}
	}

	// Ordering keys: per key, the first 2xx of each event is in commit
	// order. A 2xx whose record the kill lost is answered again, possibly
	// after later events of its key (counted, not an error).
	firstOK := map[string]int{} // webhook-id -> okSerial
	lastFirst := map[string]int64{}
	redeliveredLate := 0
	for _, h := range hs {
		k, ok := ordered(h)
		if !ok || h.okSerial == 0 {
			continue
		}
		if firstOK[h.id] == 0 {
			firstOK[h.id] = h.okSerial
			lastFirst[k] = max(lastFirst[k], seqOf(t, h.id, h.trigger))
		} else if seqOf(t, h.id, h.trigger) < lastFirst[k] {
			redeliveredLate++
		}
	}
	t.Logf("%d 2xx answers repeated an event after a later event of its key was delivered", redeliveredLate)
	type okEv struct {
		seq    int64
		serial int
		id     string
	}
	byKey := map[string][]okEv{}
	keyOf := map[string]string{}
	for _, h := range hs {
		if k, ok := ordered(h); ok && h.okSerial > 0 && h.okSerial == firstOK[h.id] {
			byKey[k] = append(byKey[k], okEv{seqOf(t, h.id, h.trigger), h.okSerial, h.id})
			keyOf[h.id] = k
		}
	}
	for k, evs := range byKey {
		sort.Slice(evs, func(i, j int) bool { return evs[i].serial < evs[j].serial })
		for i := 1; i < len(evs); i++ {
			if evs[i].seq < evs[i-1].seq {
				t.Errorf("ordering key %q: %s (seq %d) was first delivered after %s (seq %d)",
					k, evs[i-1].id, evs[i-1].seq, evs[i].id, evs[i].seq)
			}
		}
	}

	// The outbox: exactly one row per (trigger, acknowledged document), all
	// delivered (they may still be recording the last answers: wait a bit).
	var rows []apiDelivery
	deadline = time.Now().Add(15 * time.Second)
	for {
		rows = listDeliveries(t, p2.url, "")
		notDone := 0
		for _, r := range rows {
			if r.Status != "delivered" {
				notDone++
			}
		}
		if notDone == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d outbox rows still not delivered after 15s\n%s", notDone, len(rows), p2.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, st := range []string{"pending", "dead"} {
		if n := len(listDeliveries(t, p2.url, st)); n != 0 {
			t.Errorf("%d %s rows, want 0", n, st)
		}
	}
	if d := listDeliveries(t, p2.url, "delivered"); len(d) != len(rows) {
		t.Errorf("status=delivered lists %d rows, all statuses %d", len(d), len(rows))
	}
	rowsOf := map[string]int{}
	rowIDs := map[string]bool{}
	for _, r := range rows {
		if rowIDs[r.ID] {
			t.Errorf("outbox row %s listed twice", r.ID)
		}
		rowIDs[r.ID] = true
		k, ok := docOf[r.EventID]
		if !ok {
			t.Errorf("outbox row %s (%s, %s) is delivered but the receiver never saw its event", r.ID, r.TriggerID, r.EventID)
			continue
		}
		if !strings.HasPrefix(k, r.TriggerID+"/") {
			t.Errorf("outbox row %s of trigger %s carried %s", r.ID, r.TriggerID, k)
		}
		var ok2 bool
		for _, a := range r.Attempts {
			ok2 = ok2 || a.Status/100 == 2
		}
		if !ok2 {
			t.Errorf("outbox row %s is delivered without a 2xx attempt: %+v", r.ID, r.Attempts)
		}
		rowsOf[k]++
	}
	for k, n := range rowsOf {
		if n != 1 {
			t.Errorf("%s has %d outbox rows, want 1", k, n)
		}
	}
	mu.Lock()
	for id := range acked {
		for _, tr := range names {
			if rowsOf[tr+"/"+id] != 1 {
				t.Errorf("acknowledged write %s: %d outbox rows of %s, want 1", id, rowsOf[tr+"/"+id], tr)
			}
		}
	}
	mu.Unlock()
	t.Logf("%d webhook requests, %d outbox rows, all delivered once per trigger and acknowledged write", len(hs), len(rows))
}

// TestServe_BadTriggersFileRefusesToStart: a CEL error in triggers.json
// refuses to start, naming the trigger and the expression.
func TestServe_BadTriggersFileRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	const expr = "event.document.data.role = 'user'"
	trigFile, _ := writeTriggerFiles(t, dir, []map[string]any{
		{"triggerId": "good-one", "collection": "items", "events": []string{"create"}, "url": "http://127.0.0.1:9/hook"},
		{"triggerId": "bad-cel", "collection": "items", "events": []string{"create"}, "url": "http://127.0.0.1:9/hook",
			"condition": expr},
	}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, loomBin, "serve", "--triggers", trigFile, "--data", t.TempDir(), "--addr", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOOM_ADMIN_KEY=k")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("loom started (and kept running) with a bad triggers file\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if err == nil {
		t.Fatalf("loom exited 0 with a bad triggers file\nstderr:\n%s", stderr.String())
	}
	for _, want := range []string{"bad-cel", expr} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr.String())
		}
	}
}

type triggerList struct {
	Triggers []struct {
		ID        string `json:"triggerId"`
		Condition string `json:"condition"`
		Source    string `json:"source"`
		FileError string `json:"fileError"`
	} `json:"triggers"`
}

func getTriggers(t *testing.T, base string) triggerList {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/admin/v1/triggers", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET triggers: %v", err)
	}
	defer resp.Body.Close()
	var out triggerList
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET triggers: status=%d err=%v", resp.StatusCode, err)
	}
	return out
}

// TestServe_SIGHUPReloadsTriggers: SIGHUP re-reads triggers.json; a broken
// file keeps the current triggers and the process running.
func TestServe_SIGHUPReloadsTriggers(t *testing.T) {
	dir := t.TempDir()
	trigA := []map[string]any{{"triggerId": "alpha", "collection": "a", "events": []string{"create"},
		"url": "http://127.0.0.1:9/hook"}}
	trigB := []map[string]any{{"triggerId": "beta", "collection": "b", "events": []string{"update"},
		"condition": "event.document.data.x == 1", "url": "http://127.0.0.1:9/hook"}}
	trigFile, env := writeTriggerFiles(t, dir, trigA, allowLoopback)
	p := startLoom(t, t.TempDir(), env...)

	describe := func(l triggerList) string { b, _ := json.Marshal(l); return string(b) }
	if l := getTriggers(t, p.url); len(l.Triggers) != 1 || l.Triggers[0].ID != "alpha" {
		t.Fatalf("triggers at start: %s, want alpha", describe(l))
	}

	writeTriggerFiles(t, dir, trigB, "")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitTriggers := func(what string, cond func(triggerList) bool) triggerList {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			l := getTriggers(t, p.url)
			if cond(l) {
				return l
			}
			select {
			case err := <-p.done:
				t.Fatalf("loom exited while waiting for %s: %v\n%s", what, err, p.output())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10s, %s: triggers %s\n%s", what, describe(l), p.output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	l := waitTriggers("B after SIGHUP", func(l triggerList) bool {
		return len(l.Triggers) == 1 && l.Triggers[0].ID == "beta"
	})
	if c := l.Triggers[0].Condition; c != "event.document.data.x == 1" {
		t.Fatalf("beta condition=%q", c)
	}

	// A broken file: the reload fails, B stays, the process keeps running.
	if err := os.WriteFile(trigFile, []byte(`[{"triggerId": "gamma", "collection": "c", "events": ["create"], "url": "http://127.0.0.1:9/x", "condition": "event.nosuch("}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	l = waitTriggers("the failed reload to be reported", func(l triggerList) bool {
		return len(l.Triggers) > 0 && l.Triggers[0].FileError != ""
	})
	if len(l.Triggers) != 1 || l.Triggers[0].ID != "beta" || l.Triggers[0].Condition != "event.document.data.x == 1" {
		t.Fatalf("after a broken file and SIGHUP: triggers %s, want beta unchanged", describe(l))
	}
	if !strings.Contains(l.Triggers[0].FileError, "gamma") {
		t.Errorf("fileError %q does not name the bad trigger", l.Triggers[0].FileError)
	}
	// Still serving after the bad reload was reported (a request answered
	// after it, not a sleep), and not exited.
	if code, _ := request(t, "GET", p.url+"/admin/v1/triggers/beta", "k", nil); code != 200 {
		t.Fatalf("GET beta after the bad reload: status=%d", code)
	}
	select {
	case err := <-p.done:
		t.Fatalf("loom exited after a bad reload: %v\n%s", err, p.output())
	default:
	}
}

// TestServe_WebhookToLoopbackRefusedWithoutAllowList: without a [delivery]
// allow list the SSRF guard refuses the loopback receiver; the delivery log
// says why.
func TestServe_WebhookToLoopbackRefusedWithoutAllowList(t *testing.T) {
	rc := newHookReceiver(t, nil)
	_, env := writeTriggerFiles(t, t.TempDir(), []map[string]any{{
		"triggerId": "to-loopback", "collection": "items", "events": []string{"create"},
		"url": rc.URL + "/hook", "secret": e2eSecret, "timeout": "1s",
		"retryPolicy": map[string]any{"maxAttempts": 3, "initialBackoff": "50ms", "maxBackoff": "100ms"},
	}}, "")
	p := startLoom(t, t.TempDir(), env...)
	if code, _ := request(t, "POST", p.url+"/api/v1/databases/default/documents/items", "k", map[string]any{"id": "i1"}); code != 201 {
		t.Fatalf("create: status=%d", code)
	}
	deadline := time.Now().Add(15 * time.Second)
	var rows []apiDelivery
	for {
		rows = listDeliveries(t, p.url, "")
		if len(rows) == 1 && rows[0].Status == "dead" {
			break
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(rows)
			t.Fatalf("after 15s the delivery is not dead: %s\n%s", b, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rc.hooks()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests without an allow list", n)
	}
	r := rows[0]
	if len(r.Attempts) != 3 {
		t.Errorf("attempts=%d, want 3 (maxAttempts)", len(r.Attempts))
	}
	for i, a := range r.Attempts {
		if !strings.Contains(a.Error, "loopback") {
			t.Errorf("attempt %d error %q does not mention loopback", i+1, a.Error)
		}
	}
}
