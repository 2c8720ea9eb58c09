package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// Run's shutdown order: the trigger pipeline drains before the HTTP server
// stops, so a delivery in flight when the context ends may still use the
// server (the built-in handlers do). The receiver here ends Run's context
// and then calls the server; it answers 200 only if the server still
// answered.
func TestApp_RunDrainsTriggersBeforeHTTP(t *testing.T) {
	cfg := testConfig(t)
	off := false
	cfg.Agents.Enabled = &off
	cfg.Delivery.AllowHosts = []string{"127.0.0.1"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu        sync.Mutex
		selfURL   string
		healthErr = errors.New("no delivery arrived")
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		cancel()
		// Not an expectation: a wrong order would stop the server in this
		// time; the right one keeps it up however long the delivery takes.
		time.Sleep(200 * time.Millisecond)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get(selfURL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if healthErr = err; err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer receiver.Close()
	cfg.Triggers = filepath.Join(t.TempDir(), "triggers.json")
	def := `[{"triggerId": "t", "collection": "rooms", "events": ["create"], "url": "` + receiver.URL +
		`", "secret": "${LOOM_WEBHOOK_SECRET}", "retryPolicy": {"maxAttempts": 1}}]`
	if err := os.WriteFile(cfg.Triggers, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}

	a, err := app.New(t.Context(), cfg, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mu.Lock()
	selfURL = a.URL
	mu.Unlock()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	w := collections.Write{Type: collections.WriteCreate, Path: "rooms/r1", Data: map[string]any{"n": 1}}
	if _, err := a.Store.Commit(t.Context(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run=%v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the delivery ended its context")
	}

	mu.Lock()
	defer mu.Unlock()
	if healthErr != nil {
		t.Fatalf("the server during the drain: %v", healthErr)
	}
	ds, _, err := a.Triggers.Deliveries(t.Context(), triggers.DeliveryQuery{TriggerID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != triggers.StatusDelivered {
		t.Fatalf("deliveries=%+v, want the one delivered", ds)
	}
}
