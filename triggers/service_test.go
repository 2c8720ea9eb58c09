package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/triggers"
)

// The package's own harness: one triggers.Service on a store, for the
// tests of the service's knobs that a node does not expose (MaxHeld,
// Workers, the built-in set and its transports). Tests of the pipeline as
// a node runs it use apptest.Start instead (pipeline_test.go).

// testSecret is a fixed Standard Webhooks secret.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type pipeEnv struct {
	store collections.Store
	svc   *triggers.Service
	file  string
	stop  func()
}

func openStore(t testing.TB, dir string) collections.Store {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "loom.db"), Indexes: triggers.Indexes})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startEnv writes triggers.json (none when triggersJSON is ""), opens a
// real SQLite store and runs the service; cfg fields override the test
// defaults.
func startEnv(t testing.TB, triggersJSON string, cfg triggers.Config) *pipeEnv {
	t.Helper()
	dir := t.TempDir()
	e := &pipeEnv{store: openStore(t, dir)}
	if triggersJSON != "" {
		e.file = filepath.Join(dir, "triggers.json")
		if err := os.WriteFile(e.file, []byte(triggersJSON), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, cfg)
	t.Cleanup(func() {
		e.stop()
		_ = e.store.Close()
	})
	return e
}

func (e *pipeEnv) start(t testing.TB, cfg triggers.Config) {
	t.Helper()
	cfg.Store = e.store
	cfg.File = e.file
	if cfg.NodeID == "" {
		cfg.NodeID = "test-node"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	svc, err := triggers.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	e.svc = svc
	var once sync.Once
	// stop may run on another goroutine (a test stopping while it
	// watches): it reports with Errorf, never Fatalf.
	e.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("triggers service Run: %v", err)
			}
		})
	}
}

func (e *pipeEnv) write(t testing.TB, typ collections.WriteType, path string, data map[string]any) {
	t.Helper()
	write(t, e.store, typ, path, data)
}

// write commits one write to the default database.
func write(t testing.TB, st collections.Store, typ collections.WriteType, path string, data map[string]any) {
	t.Helper()
	if _, err := st.Commit(context.Background(), "default", []collections.Write{{Type: typ, Path: path, Data: data}}, collections.CommitOptions{}); err != nil {
		t.Fatalf("%s %s: %v", typ, path, err)
	}
}

func triggerJSON(id, url, extra string) string {
	return fmt.Sprintf(`{"triggerId": %q, "collection": "users/{userId}/chats/{chatId}/messages", "events": ["create","update","delete"], "url": %q, "secret": %q%s}`, id, url, testSecret, extra)
}

func waitDeliveries(t testing.TB, svc *triggers.Service, q triggers.DeliveryQuery, cond func([]*triggers.Delivery) bool) []*triggers.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, _, err := svc.Deliveries(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(ds, "", "  ")
			t.Fatalf("deliveries never reached the expected state:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
