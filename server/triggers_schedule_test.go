package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
)

// scheduledOut is a delivery with the fields of a scheduled one.
type scheduledOut struct {
	ID            string       `json:"id"`
	Status        string       `json:"status"`
	DeliverAt     int64        `json:"deliverAt"`
	NextAttemptAt int64        `json:"nextAttemptAt"`
	FinishedAt    int64        `json:"finishedAt"`
	Attempts      []attemptOut `json:"attempts"`
}

func (e *trigEnv) scheduled(t testing.TB, query string) []scheduledOut {
	t.Helper()
	var out struct {
		Deliveries []scheduledOut `json:"deliveries"`
	}
	decodeInto(t, e.MustDo(t, http.StatusOK, "GET", "/admin/v1/deliveries?"+query, ""), &out)
	return out.Deliveries
}

// deliverAt through the admin API: validated like the other fields,
// listed as scheduled with its time, canceled, replayed.
func TestTriggersAdmin_ScheduledDeliveries(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	wantErr(t, "deliverAt with orderingKey",
		e.Do(t, "POST", "/admin/v1/triggers", extDef("s", rc.URL, `,"deliverAt":"event.document.data.at","orderingKey":"event.id"`), nil),
		http.StatusBadRequest, "deliverAt: cannot be combined with orderingKey")
	wantErr(t, "deliverAt of the wrong type",
		e.Do(t, "POST", "/admin/v1/triggers", extDef("s", rc.URL, `,"deliverAt":"event.id == 'x'"`), nil),
		http.StatusBadRequest, "deliverAt", "expression has type bool, want a timestamp")
	e.register(t, extDef("s", rc.URL, `,"deliverAt":"event.document.data.at"`))
	if got := e.getTrigger(t, "s"); got.ID != "s" {
		t.Fatalf("trigger %+v", got)
	}
	r := e.MustDo(t, http.StatusOK, "GET", "/admin/v1/triggers/s", "")
	if m := r.JSON(t); m["deliverAt"] != "event.document.data.at" {
		t.Fatalf("the trigger does not show its deliverAt: %s", r.Body)
	}
	wantErr(t, "update to deliverAt with orderingKey",
		e.Do(t, "PUT", "/admin/v1/triggers/s", extDef("s", rc.URL, `,"deliverAt":"event.document.data.at","orderingKey":"event.id"`), nil),
		http.StatusBadRequest, "deliverAt")

	far := time.Now().Add(time.Hour).UnixMilli()
	soon := time.Now().Add(800 * time.Millisecond).UnixMilli()
	e.Put(t, "items/far", fmt.Sprintf(`{"at":%d}`, far))
	e.Put(t, "items/soon", fmt.Sprintf(`{"at":%d}`, soon))
	e.Put(t, "items/cancel", fmt.Sprintf(`{"at":%d}`, far+1))
	var ds []scheduledOut
	apptest.WaitFor(t, "three scheduled deliveries", func() bool {
		ds = e.scheduled(t, "status=scheduled&triggerId=s")
		return len(ds) == 3
	})
	// Soonest first, each with its deliverAt, due then, not attempted.
	for i, want := range []int64{soon, far, far + 1} {
		if d := ds[i]; d.DeliverAt != want || d.NextAttemptAt != want || d.Status != "scheduled" || len(d.Attempts) != 0 {
			t.Fatalf("scheduled #%d %+v, want deliverAt %d", i, d, want)
		}
	}
	farID, cancelID := ds[1].ID, ds[2].ID

	r = e.MustDo(t, http.StatusOK, "POST", "/admin/v1/deliveries/"+cancelID+"/cancel", "")
	if m := r.JSON(t); m["id"] != cancelID || m["status"] != "canceled" {
		t.Fatalf("cancel answer %s", r.Body)
	}
	wantErr(t, "cancel twice", e.Do(t, "POST", "/admin/v1/deliveries/"+cancelID+"/cancel", "", nil), http.StatusConflict, "canceled")
	wantErr(t, "cancel unknown", e.Do(t, "POST", "/admin/v1/deliveries/nope/cancel", "", nil), http.StatusNotFound)
	if c := e.scheduled(t, "status=canceled"); len(c) != 1 || c[0].ID != cancelID || c[0].Status != "canceled" || c[0].FinishedAt == 0 {
		t.Fatalf("canceled: %+v", c)
	}

	// Replay makes the far one due now; the soon one goes at its time.
	e.MustDo(t, http.StatusAccepted, "POST", "/admin/v1/deliveries/"+farID+"/replay", "")
	rc.WaitFor(t, "the replayed far delivery", apptest.HasDoc("far"))
	got := rc.WaitFor(t, "the soon delivery", apptest.HasDoc("soon"))
	for _, g := range got {
		if g.DocID() == "soon" && g.At.UnixMilli() < soon {
			t.Fatalf("soon delivered at %d, before %d", g.At.UnixMilli(), soon)
		}
	}
	e.waitDeliveries(t, "two delivered", "status=delivered", func(ds []deliveryOut) bool { return len(ds) == 2 })
	if s := e.scheduled(t, "status=scheduled"); len(s) != 0 {
		t.Fatalf("still scheduled: %+v", s)
	}
	wantErr(t, "cancel delivered", e.Do(t, "POST", "/admin/v1/deliveries/"+farID+"/cancel", "", nil), http.StatusConflict, "delivered")
	for _, g := range rc.Requests() {
		if g.DocID() == "cancel" {
			t.Fatal("a canceled delivery was sent")
		}
	}
}
