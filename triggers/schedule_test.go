package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
)

// Scheduled deliveries: a trigger's deliverAt sets when the first attempt
// of each of its deliveries is made.

func TestCompile_DeliverAt(t *testing.T) {
	bad := []struct {
		name, at, key, want string
	}{
		{"with orderingKey", "event.document.data.at", "event.params.chatId", "deliverAt: cannot be combined with orderingKey"},
		{"bool", "event.timestamp > 1", "", `deliverAt "event.timestamp > 1": expression has type bool, want a timestamp, a number (unix milliseconds) or an RFC 3339 string`},
		{"list", "[1]", "", `deliverAt "[1]": expression has type list(int)`},
		{"syntax", "event.timestamp +", "", `deliverAt "event.timestamp +": ERROR`},
		{"unknown field", "event.documnt.data.at", "", `deliverAt "event.documnt.data.at": event has no field "documnt"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			def := valid()
			def.DeliverAt, def.OrderingKey = tt.at, tt.key
			_, err := triggers.Compile(def, testEnv)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `trigger "t1"`) {
				t.Fatalf("err=%v, want it to name the trigger and contain %q", err, tt.want)
			}
		})
	}
	for _, at := range []string{
		"event.document.data.remindAt",                       // dyn
		"event.document.data.remindAt + 3600000",             // dyn arithmetic
		"event.timestamp + 1000",                             // int
		"timestamp('2030-01-01T00:00:00Z')",                  // timestamp
		"timestamp(event.document.data.at) + duration('1h')", // timestamp arithmetic
		"'2030-01-01T00:00:00Z'",                             // string
		"double(event.timestamp) * 1.5",                      // double
		"uint(event.timestamp)",                              // uint
	} {
		def := valid()
		def.DeliverAt = at
		if _, err := triggers.Compile(def, testEnv); err != nil {
			t.Errorf("deliverAt %s: %v", at, err)
		}
	}
	// The file form names the field too.
	_, err := triggers.ParseFile([]byte(`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com","orderingKey":"event.id","deliverAt":"event.timestamp"}]`), nil)
	if err == nil || !strings.Contains(err.Error(), `trigger #1: trigger "a": deliverAt:`) {
		t.Fatalf("ParseFile: %v", err)
	}
}

// The README's example: a reminder 1 h after remindAt, scheduled again
// when remindAt changes, not on other updates.
func TestEvaluate_DeliverAtReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "### Scheduled deliveries (deliverAt)")
	_, block, ok2 := strings.Cut(sec, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README: the scheduled deliveries example is gone")
	}
	cs, err := triggers.ParseFile([]byte("["+block+"]"), nil)
	if err != nil {
		t.Fatalf("README example: %v", err)
	}
	// The same expressions on the test collection.
	def := valid()
	def.Events = cs[0].Def.Events
	def.Condition, def.DeliverAt = cs[0].Def.Condition, cs[0].Def.DeliverAt
	c, err := triggers.Compile(def, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	at := now.UnixMilli() + 60_000
	for _, tt := range []struct {
		ch   *collections.Change
		want int64 // 0: no match
	}{
		{createCh(t, fmt.Sprintf(`{"remindAt":%d}`, at)), at + 3600000},
		{createCh(t, `{"title":"x"}`), 0},
		{updateCh(t, `{"title":"x"}`, fmt.Sprintf(`{"title":"x","remindAt":%d}`, at)), at + 3600000},
		{updateCh(t, fmt.Sprintf(`{"remindAt":%d}`, at), fmt.Sprintf(`{"remindAt":%d}`, at+1)), at + 1 + 3600000},
		{updateCh(t, fmt.Sprintf(`{"remindAt":%d}`, at), fmt.Sprintf(`{"remindAt":%d,"title":"y"}`, at)), 0},
		{updateCh(t, fmt.Sprintf(`{"remindAt":%d}`, at), `{}`), 0},
	} {
		r, err := c.Evaluate(event(t, c, tt.ch), now)
		if err != nil || r.Matched != (tt.want != 0) || r.DeliverAt != tt.want {
			t.Errorf("%s %v: %+v, %v; want deliverAt %d", tt.ch.Op, tt.ch.After.Data, r, err, tt.want)
		}
	}
}

func TestEvaluate_DeliverAt(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	nowMs := now.UnixMilli()
	const day = int64(24 * time.Hour / time.Millisecond)
	tests := []struct {
		at, data string
		want     int64 // 0: an error
	}{
		{"event.document.data.t", fmt.Sprintf(`{"t":%d}`, nowMs+5000), nowMs + 5000},
		{"event.document.data.t", fmt.Sprintf(`{"t":%d.0}`, nowMs+5000), nowMs + 5000},  // integral double
		{"event.document.data.t", fmt.Sprintf(`{"t":%d.75}`, nowMs+5000), nowMs + 5000}, // fraction dropped
		{"double(event.document.data.t)", fmt.Sprintf(`{"t":%d}`, nowMs+7), nowMs + 7},  // double
		{"uint(event.document.data.t)", fmt.Sprintf(`{"t":%d}`, nowMs+9), nowMs + 9},    // uint
		{"event.document.data.t", `{"t":"2027-01-15T08:00:00Z"}`, time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC).UnixMilli()},
		{"event.document.data.t", `{"t":"2027-01-15T09:00:00.250+01:00"}`, time.Date(2027, 1, 15, 8, 0, 0, 250e6, time.UTC).UnixMilli()},
		{"timestamp(event.document.data.t) + duration('1h')", `{"t":"2027-01-15T08:00:00Z"}`, time.Date(2027, 1, 15, 9, 0, 0, 0, time.UTC).UnixMilli()},
		{"event.document.data.t + 3600000", fmt.Sprintf(`{"t":%d}`, nowMs), nowMs + 3600000},
		{"event.document.data.t", fmt.Sprintf(`{"t":%d}`, nowMs+366*day), nowMs + 366*day}, // the limit
		{"event.document.data.t", fmt.Sprintf(`{"t":%d}`, nowMs-5000), nowMs},              // past: now
		{"event.document.data.t", `{"t":0}`, nowMs},                                        // 1970: now
		{"event.document.data.t", `{"t":"2001-01-01T00:00:00Z"}`, nowMs},                   // past string: now
		{"event.document.data.t", fmt.Sprintf(`{"t":%d}`, nowMs+366*day+1), 0},             // too far
		{"double(event.document.data.t)", fmt.Sprintf(`{"t":%d}`, nowMs+400*day), 0},       // too far (double)
		{"uint(event.document.data.t)", `{"t":18446744073709551615}`, 0},                   // too far (uint)
		{"event.document.data.t", `{"t":"9999-12-31T00:00:00Z"}`, 0},                       // too far (string)
		{"event.document.data.t", `{"t":-1}`, 0},                                           // negative
		{"event.document.data.t", `{"t":-0.5}`, 0},                                         // negative double
		{"event.document.data.t", `{"t":"1969-12-31T23:59:59Z"}`, 0},                       // negative as a time
		{"double('NaN')", `{}`, 0},                         // NaN
		{"double('Infinity')", `{}`, 0},                    // infinite
		{"event.document.data.t", `{"t":"tomorrow"}`, 0},   // unparsable
		{"event.document.data.t", `{"t":"2027-01-15"}`, 0}, // not RFC 3339
		{"event.document.data.t", `{"t":true}`, 0},         // not a time
		{"event.document.data.t", `{"t":null}`, 0},         // null
		{"event.document.data.t", `{}`, 0},                 // missing
	}
	for _, tt := range tests {
		t.Run(tt.at+" "+tt.data, func(t *testing.T) {
			def := valid()
			def.DeliverAt = tt.at
			c, err := triggers.Compile(def, testEnv)
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Evaluate(event(t, c, createCh(t, tt.data)), now)
			if tt.want == 0 {
				if err == nil || r.Matched || !strings.Contains(err.Error(), `trigger "t1": deliverAt:`) {
					t.Fatalf("Evaluate=%+v, %v; want a deliverAt error", r, err)
				}
				return
			}
			if err != nil || !r.Matched || r.DeliverAt != tt.want {
				t.Fatalf("Evaluate=%+v, %v; want deliverAt %d", r, err, tt.want)
			}
		})
	}
	// A false condition does not evaluate deliverAt; a trigger without one
	// has none.
	def := valid()
	def.Condition, def.DeliverAt = "event.document.data.go == true", "event.document.data.t"
	c, err := triggers.Compile(def, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Evaluate(event(t, c, createCh(t, `{"go":false}`)), now); err != nil || r.Matched {
		t.Fatalf("false condition: %+v, %v", r, err)
	}
	plain := compileT(t, "", "")
	if r, err := plain.Evaluate(event(t, plain, createCh(t, `{}`)), now); err != nil || !r.Matched || r.DeliverAt != 0 {
		t.Fatalf("no deliverAt: %+v, %v", r, err)
	}
}

// remindJSON is a trigger that delivers at the document's remindAt (ms).
func remindJSON(id, url string) string {
	return triggerJSON(id, url, `, "events": ["create"], "deliverAt": "event.document.data.remindAt"`)
}

// scheduleAt creates messages/{id} to be delivered at (unix ms).
func scheduleAt(t *testing.T, st collections.Store, id string, at int64) {
	t.Helper()
	write(t, st, collections.WriteCreate, "users/u1/chats/c1/messages/"+id, map[string]any{"remindAt": at})
}

func TestScheduledDeliveryWaitsForDeliverAt(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+remindJSON("remind", rc.URL)+"]")
	at := time.Now().Add(1200 * time.Millisecond).UnixMilli()
	scheduleAt(t, e.Store, "later", at)
	scheduleAt(t, e.Store, "past", time.Now().Add(-time.Hour).UnixMilli())

	// The past one goes at once; the other is listed as scheduled, with its
	// deliverAt, and nowhere else.
	rc.WaitFor(t, "the past reminder", apptest.HasDoc("past"))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if d := ds[0]; d.DeliverAt != at || d.Status != triggers.StatusScheduled || d.NextAttemptAt != at || len(d.Attempts) != 0 {
		t.Fatalf("scheduled delivery %+v, want deliverAt %d", d, at)
	}
	all, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{})
	// Newest first: the past one, then the scheduled one.
	if err != nil || len(all) != 2 || all[1].Status != triggers.StatusScheduled || all[1].ID != ds[0].ID {
		t.Fatalf("log: %s, %v", show(all), err)
	}
	if pending, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{Status: triggers.StatusPending}); err != nil || len(pending) != 0 {
		t.Fatalf("pending: %+v, %v (a scheduled row is listed only as scheduled)", pending, err)
	}
	if all[0].DeliverAt == 0 || all[0].DeliverAt > time.Now().UnixMilli() {
		t.Fatalf("a past deliverAt is stored as the time it was scheduled: %s", show(all[:1]))
	}

	got := rc.WaitFor(t, "the scheduled reminder", apptest.HasDoc("later"))
	r := got[len(got)-1]
	if r.DocID() != "later" || r.At.UnixMilli() < at {
		t.Fatalf("delivered %s at %d, deliverAt %d: before its time", r.DocID(), r.At.UnixMilli(), at)
	}
	apptest.Verify(t, testSecret, r)
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 2 })
	if n := len(rc.Requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// Enabling a trigger wakes its parked deliveries, not its scheduled ones.
func TestScheduledDeliveryNotWokenByEnable(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+remindJSON("remind", rc.URL)+"]")
	at := time.Now().Add(time.Second).UnixMilli()
	scheduleAt(t, e.Store, "m1", at)
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	ctx := context.Background()
	if err := e.Triggers.Disable(ctx, "remind"); err != nil {
		t.Fatal(err)
	}
	if err := e.Triggers.Enable(ctx, "remind"); err != nil {
		t.Fatal(err)
	}
	got := rc.WaitFor(t, "the scheduled delivery", apptest.Exactly(1))
	if got[0].At.UnixMilli() < at {
		t.Fatalf("delivered at %d, before its deliverAt %d", got[0].At.UnixMilli(), at)
	}
}

func TestScheduledDeliveryCancel(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+remindJSON("remind", rc.URL)+"]")
	at := time.Now().Add(600 * time.Millisecond).UnixMilli()
	scheduleAt(t, e.Store, "m1", at)
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	ctx := context.Background()
	if err := e.Triggers.Cancel(ctx, ds[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Triggers.Cancel(ctx, ds[0].ID); !errors.Is(err, triggers.ErrConflict) || !strings.Contains(err.Error(), "is canceled") {
		t.Fatalf("second cancel: %v", err)
	}
	if err := e.Triggers.Cancel(ctx, "dlv_nope"); !errors.Is(err, triggers.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
	// Past its deliverAt (and a few polls), nothing was sent.
	time.Sleep(time.Until(time.UnixMilli(at)) + 300*time.Millisecond)
	if n := len(rc.Requests()); n != 0 {
		t.Fatalf("a canceled delivery was sent (%d requests)", n)
	}
	c, _, err := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusCanceled})
	if err != nil || len(c) != 1 || c[0].ID != ds[0].ID || c[0].Status != triggers.StatusCanceled || c[0].FinishedAt == 0 || c[0].DeliverAt != at {
		t.Fatalf("canceled: %+v, %v", c, err)
	}
	if s, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusScheduled}); len(s) != 0 {
		t.Fatalf("still scheduled: %+v", s)
	}
	// A delivered one cannot be canceled.
	scheduleAt(t, e.Store, "m2", 0)
	done := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if err := e.Triggers.Cancel(ctx, done[0].ID); !errors.Is(err, triggers.ErrConflict) {
		t.Fatalf("cancel delivered: %v", err)
	}
	// Purge drops canceled rows past the retention like finished ones.
	if err := e.Triggers.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusCanceled}); len(c) != 1 {
		t.Fatalf("purged within the retention: %+v", c)
	}
}

func TestScheduledDeliveryPurgedWhenCanceled(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := apptest.Start(t, apptest.Options{
		Triggers: "[" + remindJSON("remind", rc.URL) + "]",
		Config:   func(c *config.Config) { c.Delivery.Retention = config.Duration{Duration: time.Millisecond} },
	})
	scheduleAt(t, e.Store, "m1", time.Now().Add(time.Hour).UnixMilli())
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	ctx := context.Background()
	if err := e.Triggers.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusScheduled}); len(s) != 1 {
		t.Fatalf("a scheduled delivery was purged: %+v", s)
	}
	if err := e.Triggers.Cancel(ctx, ds[0].ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := e.Triggers.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if all, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{}); len(all) != 0 {
		t.Fatalf("canceled delivery not purged: %+v", all)
	}
}

func TestScheduledDeliveryReplayDeliversNow(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+remindJSON("remind", rc.URL)+"]")
	at := time.Now().Add(time.Hour).UnixMilli()
	scheduleAt(t, e.Store, "m1", at)
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	before := time.Now().UnixMilli()
	if err := e.Triggers.Replay(context.Background(), ds[0].ID); err != nil {
		t.Fatal(err)
	}
	got := rc.WaitFor(t, "the replayed delivery", apptest.Exactly(1))
	if got[0].ID() != ds[0].EventID {
		t.Fatalf("webhook-id %s, want %s", got[0].ID(), ds[0].EventID)
	}
	d := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })[0]
	if d.DeliverAt < before || d.DeliverAt >= at {
		t.Fatalf("replayed deliverAt %d, want the replay time (>= %d)", d.DeliverAt, before)
	}
}

// Bad deliverAt results make no row: each counts as an evaluation error,
// like a failed condition.
func TestScheduledDeliveryBadResults(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "["+triggerJSON("bad", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt"`)+"]")
	day := int64(24 * time.Hour / time.Millisecond)
	for i, v := range []any{time.Now().UnixMilli() + 400*day, int64(-5), "tomorrow", true} {
		write(t, e.Store, collections.WriteCreate, fmt.Sprintf("users/u1/chats/c1/messages/bad%d", i), map[string]any{"remindAt": v})
	}
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/nofield", map[string]any{})
	scheduleAt(t, e.Store, "good", 0)
	rc.WaitFor(t, "the good one", apptest.HasDoc("good"))
	apptest.WaitFor(t, "five evaluation errors", func() bool {
		in, _, err := e.Triggers.Get(context.Background(), "bad")
		return err == nil && in.Counts.EvalErrors == 5 && in.Counts.Matched == 1
	})
	all, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{})
	if err != nil || len(all) != 1 {
		t.Fatalf("rows: %+v, %v (want only the good one)", all, err)
	}
	res := e.Do(t, "GET", "/metrics", "", apptest.Bearer(apptest.AdminKey))
	if !regexp.MustCompile(`(?m)^loom_trigger_eval_errors_total\{trigger="bad"\} 5$`).Match(res.Body) {
		t.Fatalf("metrics:\n%s", grepLines(string(res.Body), "loom_trigger_eval_errors_total"))
	}
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func show(ds []*triggers.Delivery) string {
	b, _ := json.Marshal(ds)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A scheduled delivery outlives its node: stopped before it is due and
// started again on the same data, the node delivers it once, at its time.
func TestScheduledDeliverySurvivesRestart(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	dir := t.TempDir()
	st := apptest.OpenStore(t, dir)
	opts := apptest.Options{Store: st, DataDir: dir, Triggers: "[" + remindJSON("remind", rc.URL) + "]"}
	e := apptest.Start(t, opts)
	at := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	scheduleAt(t, st, "m1", at)
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(rc.Requests()); n != 0 {
		t.Fatalf("%d requests before the restart", n)
	}
	e2 := apptest.Start(t, opts)
	got := rc.WaitFor(t, "the scheduled delivery after the restart", apptest.Exactly(1))
	if got[0].At.UnixMilli() < at {
		t.Fatalf("delivered at %d, before its deliverAt %d", got[0].At.UnixMilli(), at)
	}
	waitDeliveries(t, e2.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	time.Sleep(200 * time.Millisecond)
	ids := map[string]int{}
	for _, r := range rc.Requests() {
		ids[r.ID()]++
	}
	if len(ids) != 1 || ids[got[0].ID()] != 1 {
		t.Fatalf("webhook-ids %v, want one delivery", ids)
	}
}

// Purge goes by the time a row finished: a scheduled delivery, finished
// long after the rows that follow it in commit order, does not hold their
// purge back.
func TestPurgeNotHeldBackByLateScheduledDelivery(t *testing.T) {
	const retention = 500 * time.Millisecond
	rc := apptest.NewReceiver(t, nil)
	e := apptest.Start(t, apptest.Options{
		Triggers: "[" + remindJSON("remind", rc.URL) + "]",
		Config:   func(c *config.Config) { c.Delivery.Retention = config.Duration{Duration: retention} },
	})
	scheduleAt(t, e.Store, "late", time.Now().Add(700*time.Millisecond).UnixMilli())
	scheduleAt(t, e.Store, "now", 0)
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 2 })
	late, now := ds[1], ds[0] // newest first: "now" has the higher seq
	if late.Seq > now.Seq || late.FinishedAt <= now.FinishedAt+int64(retention/time.Millisecond) {
		t.Fatalf("setup: late %+v, now %+v", late, now)
	}
	if err := e.Triggers.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Now().UnixMilli() >= late.FinishedAt+int64(retention/time.Millisecond) {
		t.Fatalf("setup: the purge ran %v after the late delivery finished; it should run within the retention", time.Since(time.UnixMilli(late.FinishedAt)))
	}
	left, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{})
	if err != nil || len(left) != 1 || left[0].ID != late.ID {
		t.Fatalf("after purge: %s, %v (want only the late one, finished within the retention)", show(left), err)
	}
}

// The log lists each row under one status: a page of pending rows skips
// the scheduled ones between them, and paging neither repeats nor skips.
func TestDeliveriesLogPagesPendingAndScheduled(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	e := startNode(t, "["+triggerJSON("mix", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt", "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1h"}`)+"]")
	base := time.Now().Add(time.Hour).UnixMilli()
	// In commit order: s1, p1, s2, s3, p2 (the p rows are due at once and
	// fail: pending, waiting an hour for their retry).
	scheduleAt(t, e.Store, "s1", base+3)
	scheduleAt(t, e.Store, "p1", 0)
	scheduleAt(t, e.Store, "s2", base+1)
	scheduleAt(t, e.Store, "s3", base+2)
	scheduleAt(t, e.Store, "p2", 0)
	rc.WaitFor(t, "both immediate deliveries", apptest.Exactly(2))
	ctx := context.Background()
	pageAll := func(status string, limit int) (ids []string, pages int) {
		t.Helper()
		cursor := ""
		for {
			ds, next, err := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: status, Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, d := range ds {
				if status != "" && d.Status != status {
					t.Fatalf("%s page holds %s", status, show(ds))
				}
				ids = append(ids, d.ID)
			}
			if next == "" {
				return ids, pages
			}
			cursor = next
		}
	}
	apptest.WaitFor(t, "two failed attempts recorded", func() bool {
		ids, _ := pageAll(triggers.StatusPending, 10)
		ds, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusPending})
		return len(ids) == 2 && len(ds[0].Attempts) == 1 && len(ds[1].Attempts) == 1
	})
	pending, _ := pageAll(triggers.StatusPending, 1)
	scheduled, _ := pageAll(triggers.StatusScheduled, 2)
	if len(pending) != 2 || len(scheduled) != 3 {
		t.Fatalf("pending %v, scheduled %v", pending, scheduled)
	}
	all, _ := pageAll("", 2)
	if len(all) != 5 {
		t.Fatalf("all: %v", all)
	}
	// Scheduled: soonest first (s2, s3, s1); pending: newest first (p2, p1).
	order := map[string]int{}
	for i, id := range all {
		order[id] = i // newest first: p2, s3, s2, p1, s1
	}
	if !(order[pending[0]] < order[pending[1]]) || !(order[scheduled[0]] > order[scheduled[1]]) || !(order[scheduled[2]] == 4) {
		t.Fatalf("order: all %v, pending %v, scheduled %v", all, pending, scheduled)
	}
}

// Two nodes on one store: the node that scheduled a delivery stops before
// it is due; the other delivers it, once, at its time.
func TestScheduledDeliveryTakenByAnotherNode(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	st := apptest.OpenStore(t, t.TempDir())
	opts := apptest.Options{Store: st, Triggers: "[" + remindJSON("remind", rc.URL) + "]"}
	b := apptest.Start(t, opts)
	var bID string
	apptest.WaitFor(t, "node b to take the evaluator lease", func() bool {
		bID = apptest.EvaluatorOwner(t, st)
		return bID != ""
	})
	a := apptest.Start(t, opts)
	at := time.Now().Add(time.Second).UnixMilli()
	scheduleAt(t, st, "m1", at)
	waitDeliveries(t, a.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if owner := apptest.EvaluatorOwner(t, st); owner != bID {
		t.Fatalf("evaluator %q, want node b %q", owner, bID)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	got := rc.WaitFor(t, "the delivery by node a", apptest.Exactly(1))
	if got[0].At.UnixMilli() < at {
		t.Fatalf("delivered at %d, before %d", got[0].At.UnixMilli(), at)
	}
	waitDeliveries(t, a.Triggers, triggers.DeliveryQuery{Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	time.Sleep(150 * time.Millisecond)
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}
