package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
