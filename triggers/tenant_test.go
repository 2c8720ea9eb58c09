package triggers_test

import (
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/triggers"
)

// One user's document at the size limit, created then updated (its event
// carries the document and its previous state: twice the limit), must not
// stall the evaluator: its deliveries and every later change's are
// recorded and delivered.
func TestDocumentAtTheSizeLimitDoesNotStallTriggers(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startEnv(t, "["+triggerJSON("t1", rc.URL, "")+"]", triggers.Config{})
	big := strings.Repeat("a", sqlite.DefaultMaxDocumentBytes-64)
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/big", map[string]any{"content": big})
	e.write(t, collections.WriteUpdate, "users/u1/chats/c1/messages/big", map[string]any{"n": 1})
	e.write(t, collections.WriteCreate, "users/u2/chats/c1/messages/m1", map[string]any{"content": "hi"})
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{TriggerID: "t1"}, func(ds []*triggers.Delivery) bool {
		if len(ds) != 3 {
			return false
		}
		for _, d := range ds {
			if d.Status != triggers.StatusDelivered {
				return false
			}
		}
		return true
	})
	for _, d := range ds {
		if len(d.Attempts) != 1 {
			t.Fatalf("delivery %s: %d attempts", d.ID, len(d.Attempts))
		}
	}
	// Each change reached the receiver (early requests aside, at least once).
	seen := map[string]bool{}
	for _, r := range rc.Requests() {
		ev, _ := r.Body["event"].(map[string]any)
		seen[ev["type"].(string)+" "+ev["path"].(string)] = true
	}
	for _, want := range []string{"create users/u1/chats/c1/messages/big", "update users/u1/chats/c1/messages/big", "create users/u2/chats/c1/messages/m1"} {
		if !seen[want] {
			t.Fatalf("the receiver never saw %s", want)
		}
	}
}
