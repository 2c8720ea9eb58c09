package triggers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// runService runs a Service without a triggers file on a fresh store
// until the test ends.
func runService(t *testing.T, cfg triggers.Config) (*triggers.Service, collections.Store) {
	t.Helper()
	e := startEnv(t, "", cfg)
	return e.svc, e.store
}

func commit(t *testing.T, st collections.Store, path string) {
	t.Helper()
	w := collections.Write{Type: collections.WriteCreate, Path: path, Data: map[string]any{"role": "user"}}
	if _, err := st.Commit(context.Background(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Without a file, Config.Builtin's triggers run, and a reload keeps them.
func TestBuiltin_LoadedAndKeptByReload(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	svc, st := runService(t, triggers.Config{Builtin: []byte("[" + triggerJSON("b1", rc.URL+"/webhooks/x", "") + "]")})
	if !svc.Builtin() || svc.Len() != 1 {
		t.Fatalf("Builtin()=%v Len()=%d, want true 1", svc.Builtin(), svc.Len())
	}
	if err := svc.Reload(context.Background()); err != nil {
		t.Fatalf("Reload with the built-in triggers: %v", err)
	}
	if _, _, err := svc.Get(context.Background(), "b1"); err != nil {
		t.Fatalf("b1 after a reload: %v", err)
	}
	commit(t, st, "users/u1/chats/c1/messages/m1")
	rc.WaitFor(t, "the built-in trigger's delivery", apptest.Exactly(1))
}

// A file wins over Config.Builtin; a bad built-in set fails New.
func TestBuiltin_FileWins(t *testing.T) {
	e := startEnv(t, "["+triggerJSON("f1", "http://127.0.0.1:1/", "")+"]", triggers.Config{
		Builtin: []byte("[" + triggerJSON("b1", "http://127.0.0.1:1/", "") + "]"),
	})
	if e.svc.Builtin() {
		t.Error("Builtin() with a file")
	}
	if _, _, err := e.svc.Get(context.Background(), "b1"); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("b1 with a file: %v, want ErrNotFound", err)
	}
	_, err := triggers.New(context.Background(), triggers.Config{Store: e.store, Builtin: []byte(`[{"triggerId": "x"}]`)})
	if err == nil || !strings.Contains(err.Error(), "built-in triggers") {
		t.Errorf("New with a bad built-in set: %v", err)
	}
}

// refuse is a transport that sends nothing (an SSRF guard refusing).
type refuse struct{}

func (refuse) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("refused") }

// Deliveries under BuiltinURL go through BuiltinTransport, all others
// through Transport.
func TestBuiltin_OwnTransport(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	file := "[" + triggerJSON("own", rc.URL+"/webhooks/x", "") + "," + triggerJSON("other", rc.URL+"/hooks/x", `, "retryPolicy": {"maxAttempts": 1}`) + "]"
	e := startEnv(t, file, triggers.Config{
		BuiltinURL: rc.URL + "/webhooks/", Transport: refuse{}, BuiltinTransport: http.DefaultTransport,
	})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"role": "user"})
	got := rc.WaitFor(t, "the own delivery", apptest.AtLeast(1))
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{TriggerID: "other"}, func(ds []*triggers.Delivery) bool {
		return len(ds) == 1 && ds[0].Status == "dead"
	})
	if a := ds[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "refused") {
		t.Errorf("other's attempts %+v, want one refused", a)
	}
	if got = rc.Requests(); len(got) != 1 || got[0].Body["triggerId"] != "own" {
		t.Errorf("received %d requests (first from %v), want only own's", len(got), got[0].Body["triggerId"])
	}
}

// A registered trigger replaces the built-in one of its id (the built-in
// set cannot be edited), where a file using that id is refused.
func TestBuiltin_RegisteredTriggerWins(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { _ = st.Close() })
	first, err := triggers.New(ctx, triggers.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	var def triggers.Trigger
	if err := json.Unmarshal([]byte(triggerJSON("b1", "http://127.0.0.1:1/registered", "")), &def); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Register(ctx, def); err != nil {
		t.Fatal(err)
	}
	set := "[" + triggerJSON("b1", "http://127.0.0.1:1/builtin", "") + "," + triggerJSON("b2", "http://127.0.0.1:1/builtin", "") + "]"
	svc, err := triggers.New(ctx, triggers.Config{Store: st, Builtin: []byte(set)})
	if err != nil {
		t.Fatalf("New with a built-in id registered: %v", err)
	}
	for id, want := range map[string]string{"b1": triggers.SourceAPI, "b2": triggers.SourceFile} {
		if in, _, err := svc.Get(ctx, id); err != nil || in.Source != want {
			t.Errorf("%s: source %q (%v), want %q", id, in.Source, err, want)
		}
	}
	file := writeTemp(t, set)
	if _, err := triggers.New(ctx, triggers.Config{Store: st, File: file}); err == nil || !strings.Contains(err.Error(), "already used by a registered trigger") {
		t.Errorf("New with a file using a registered id: %v", err)
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
