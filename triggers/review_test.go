package triggers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// Canceling the head of an ordering key (a delivery the receiver keeps
// failing, waiting for its next retry) lets the rows behind it go: they
// are not held until the canceled row's backoff runs out (up to maxBackoff;
// on-user-message, keyed by user, has 5 minutes: canceling a user's stuck
// message is what an operator would do to unblock the user).
func TestReview_CancelKeyHeadReleasesTheKey(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if strings.Contains(string(r.Raw), "messages/m1") {
			return 500
		}
		return 200
	})
	e := startNode(t, "["+triggerJSON("o", rc.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 20, "initialBackoff": "10m", "maxBackoff": "10m"}`)+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"i": 1})
	rc.WaitFor(t, "the head's first attempt", apptest.AtLeast(1))
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"i": 2})
	ctx := context.Background()
	head := retryingHead(t, e)
	time.Sleep(200 * time.Millisecond)
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests while the head waits, want 1 (m2 is behind it)", n)
	}
	if err := e.Triggers.Cancel(ctx, head.ID); err != nil {
		t.Fatal(err)
	}
	rc.WaitWithin(t, 10*time.Second, "m2 after the head's cancel (the head's retry is 10 minutes away)", apptest.AtLeast(2))
}

// Replaying the head of an ordering key that waits for its retry delivers
// it now, not when its backoff runs out.
func TestReview_ReplayKeyHeadGoesNow(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	rc.SetRespond(func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if r.N == 1 {
			return 500
		}
		return 200
	})
	e := startNode(t, "["+triggerJSON("o", rc.URL, `, "events": ["create"], "orderingKey": "event.params.chatId", "retryPolicy": {"maxAttempts": 20, "initialBackoff": "10m", "maxBackoff": "10m"}`)+"]")
	write(t, e.Store, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"i": 1})
	rc.WaitFor(t, "the head's first attempt", apptest.AtLeast(1))
	ctx := context.Background()
	head := retryingHead(t, e)
	if err := e.Triggers.Replay(ctx, head.ID); err != nil {
		t.Fatal(err)
	}
	rc.WaitWithin(t, 10*time.Second, "the replayed head (its retry is 10 minutes away)", apptest.AtLeast(2))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ds, _, _ := e.Triggers.Deliveries(ctx, triggers.DeliveryQuery{Status: triggers.StatusDelivered})
		if len(ds) == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the replayed head is not recorded delivered")
}

// retryingHead waits (up to 5s) for the pending delivery that has had one
// attempt: the key head waiting for its retry.
func retryingHead(t *testing.T, e *apptest.Stack) *triggers.Delivery {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ds, _, err := e.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{Status: triggers.StatusPending})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if len(d.Attempts) == 1 {
				return d
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no retrying head")
	return nil
}
