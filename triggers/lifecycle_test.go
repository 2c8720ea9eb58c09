package triggers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/triggers"
)

// What becomes of the deliveries a trigger already made when it is
// deleted, disabled or changed (README, "Scheduled deliveries": "Changing a
// trigger does not move the deliveries it already scheduled; deleting it
// makes them dead when they fall due, disabling it holds them until it is
// enabled again"; Service.Delete: "Its pending deliveries go dead").

// registerDef registers the trigger triggerJSON(id, url, extra) describes.
func registerDef(t *testing.T, svc *triggers.Service, id, url, extra string) {
	t.Helper()
	var def triggers.Trigger
	if err := json.Unmarshal([]byte(triggerJSON(id, url, extra)), &def); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Register(context.Background(), def); err != nil {
		t.Fatal(err)
	}
}

// onlyDelivery is the one outbox row of trigger id.
func onlyDelivery(t *testing.T, svc *triggers.Service, id string) *triggers.Delivery {
	t.Helper()
	ds, _, err := svc.Deliveries(context.Background(), triggers.DeliveryQuery{TriggerID: id})
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries of %s: %s, %v; want one", id, show(ds), err)
	}
	return ds[0]
}

// A deleted trigger's pending retry and its scheduled delivery both end
// dead, with no further request and the reason in their last attempt.
func TestDeletedTriggersDeliveriesGoDead(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	e := startNode(t, "")
	registerDef(t, e.Triggers, "del", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt", "retryPolicy": {"maxAttempts": 5, "initialBackoff": "300ms", "maxBackoff": "300ms"}`)
	scheduleAt(t, e.Store, "retrying", 0) // now: attempted at once, answered 500
	at := time.Now().Add(800 * time.Millisecond).UnixMilli()
	scheduleAt(t, e.Store, "scheduled", at)
	rc.WaitFor(t, "the first attempt", apptest.HasDoc("retrying"))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "del", Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if err := e.Triggers.Delete(context.Background(), "del"); err != nil {
		t.Fatal(err)
	}
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "del"}, func(ds []*triggers.Delivery) bool {
		finished := 0
		for _, d := range ds {
			if d.FinishedAt != 0 {
				finished++
			}
		}
		return len(ds) == 2 && finished == 2
	})
	for _, d := range ds {
		wantAttempts := 1 // the scheduled one: only the dead entry
		if d.DeliverAt != at {
			wantAttempts = 2 // the 500, then the dead entry
		}
		a := d.Attempts
		if d.Status != triggers.StatusDead || len(a) != wantAttempts || a[len(a)-1].Status != 0 ||
			!strings.Contains(a[len(a)-1].Error, "trigger del no longer exists") {
			t.Errorf("row of a deleted trigger: %s; want dead after %d attempts, the last one unsent with the reason", show([]*triggers.Delivery{d}), wantAttempts)
		}
	}
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests, want only the first attempt before the delete", n)
	}
}

// A disabled trigger holds its scheduled delivery past its deliverAt (the
// row stays pending, put back for later) and delivers it once enabled.
func TestDisabledTriggerHoldsScheduledDelivery(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	// A 1 s timeout keeps the lease a poller takes on the due row (timeout
	// + 30 s slack) apart from the minute a disabled trigger's row is put
	// back for.
	e := startNode(t, "["+triggerJSON("remind", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt", "timeout": "1s"`)+"]")
	ctx := context.Background()
	at := time.Now().Add(500 * time.Millisecond).UnixMilli()
	scheduleAt(t, e.Store, "m1", at)
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	if err := e.Triggers.Disable(ctx, "remind"); err != nil {
		t.Fatal(err)
	}
	// Due at its deliverAt, the row is taken by a poller, which finds the
	// trigger disabled and puts it back for a minute (not just leased for
	// its attempt: 31 s). Only then is "not delivered" a result.
	ds := waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "remind"}, func(ds []*triggers.Delivery) bool {
		if len(ds) != 1 {
			return false
		}
		d := ds[0]
		return (d.Status != triggers.StatusScheduled && d.Status != triggers.StatusPending || d.NextAttemptAt > at+(45*time.Second).Milliseconds())
	})
	if d := ds[0]; d.Status != triggers.StatusPending || len(d.Attempts) != 0 || d.DeliverAt != at {
		t.Fatalf("a disabled trigger's scheduled row past its deliverAt: %s; want it pending, unattempted, deliverAt %d", show(ds), at)
	}
	if n := len(rc.Requests()); n != 0 {
		t.Fatalf("a disabled trigger delivered (%d requests)", n)
	}
	if err := e.Triggers.Enable(ctx, "remind"); err != nil {
		t.Fatal(err)
	}
	rc.WaitFor(t, "the held delivery after enable", apptest.HasDoc("m1"))
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "remind", Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
}

// Changing a trigger's deliverAt does not move a delivery it already
// scheduled: the row keeps its time and goes then.
func TestChangedTriggerKeepsScheduledDelivery(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startNode(t, "")
	registerDef(t, e.Triggers, "chg", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt"`)
	at := time.Now().Add(700 * time.Millisecond).UnixMilli()
	scheduleAt(t, e.Store, "m1", at)
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{Status: triggers.StatusScheduled}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
	var def triggers.Trigger
	if err := json.Unmarshal([]byte(triggerJSON("chg", rc.URL, `, "events": ["create"], "deliverAt": "event.document.data.remindAt + 3600000"`)), &def); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Triggers.Update(context.Background(), "chg", def); err != nil {
		t.Fatal(err)
	}
	if d := onlyDelivery(t, e.Triggers, "chg"); d.DeliverAt != at || d.NextAttemptAt != at {
		t.Fatalf("after the change: %s; want deliverAt and nextAttemptAt still %d", show([]*triggers.Delivery{d}), at)
	}
	got := rc.WaitFor(t, "the scheduled delivery at its first time", apptest.HasDoc("m1"))
	if got[0].At.UnixMilli() < at {
		t.Fatalf("delivered at %d, before its deliverAt %d", got[0].At.UnixMilli(), at)
	}
	waitDeliveries(t, e.Triggers, triggers.DeliveryQuery{TriggerID: "chg", Status: triggers.StatusDelivered}, func(ds []*triggers.Delivery) bool { return len(ds) == 1 })
}
