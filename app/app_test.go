package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/config"
)

// testConfig is the default configuration on a fresh data directory,
// listening on a free loopback port.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Data = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	t.Chdir(t.TempDir()) // no ./rules, ./triggers.json or ./tools.json
	return cfg
}

func testOptions(t *testing.T) app.Options {
	return app.Options{BcryptCost: bcrypt.MinCost, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), Version: "test"}
}

// New opens a whole node on a fresh data directory (the agent runtime
// on), Run serves it until ctx ends and shuts down cleanly, and Close
// releases the store it opened, once however often it is called.
func TestApp_NewRunClose(t *testing.T) {
	cfg := testConfig(t)
	a, err := app.New(t.Context(), cfg, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if a.AdminKey == "" || a.Agents == nil || a.Triggers == nil || a.Server == nil || a.Auth == nil {
		t.Fatalf("app=%+v, want a generated admin key and every part", a)
	}
	if want := "http://" + a.Addr.String(); a.URL != want {
		t.Errorf("URL=%q, want %q", a.URL, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()

	// New listens already: the request waits in the backlog until Run serves.
	resp, err := http.Get(a.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health status=%d body=%s, want 200", resp.StatusCode, body)
	}

	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run=%v, want a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	for range 2 {
		if err := a.Close(); err != nil {
			t.Fatalf("Close=%v", err)
		}
	}
	if _, err := a.Store.Head(context.Background()); err == nil {
		t.Error("the store New opened is still open after Close")
	}

	// The next start on the same data directory keeps the admin key.
	b, err := app.New(t.Context(), cfg, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.AdminKey != "" {
		t.Error("a second start generated another admin key")
	}
}

// A shared store and a given listener stay the caller's: Close leaves
// both open.
func TestApp_CloseKeepsShared(t *testing.T) {
	cfg := testConfig(t)
	store, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "shared.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opts := testOptions(t)
	opts.Store, opts.Listener = store, ln
	a, err := app.New(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if a.Store != store || a.Addr != ln.Addr() {
		t.Fatalf("store=%v addr=%v, want the shared ones", a.Store, a.Addr)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Head(t.Context()); err != nil {
		t.Errorf("shared store after Close: %v", err)
	}
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	if c, err := ln.Accept(); err != nil {
		t.Errorf("given listener after Close: %v", err)
	} else {
		c.Close()
	}
}

// New closes what it opened when a later step fails: here the triggers
// file, loaded after the store, auth and the listener, is missing, and the
// address New listened on is free again.
func TestApp_NewFailsCleanly(t *testing.T) {
	cfg := testConfig(t)
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = probe.Addr().String()
	probe.Close()
	cfg.Triggers = filepath.Join(t.TempDir(), "missing.json")
	if _, err := app.New(t.Context(), cfg, testOptions(t)); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("err=%v, want one naming the missing triggers file", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		t.Fatalf("the address New listened on: %v", err)
	}
	ln.Close()
}

// --engine mongo opens the MongoDB engine: with no server there, New fails
// within the server-selection timeout (10 s) with an error naming MongoDB
// and the URI with its password redacted, and leaves nothing open.
func TestApp_MongoUnreachable(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Data = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.Engine = "mongo"
	cfg.Mongo.URI = "mongodb://loom:s3cret-pw@127.0.0.1:1/?replicaSet=rs0"
	cfg.Auth.AdminKey = "admin"
	cfg.Auth.JWTSecret = strings.Repeat("j", 32)
	cfg.Security.CursorKey = strings.Repeat("c", 32)
	cfg.WebhookSecret = "whsec_dGVzdA=="
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a, err := app.New(t.Context(), cfg, testOptions(t))
	if err == nil {
		a.Close()
		t.Fatal("New succeeded against 127.0.0.1:1")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("failed after %v, want within the server-selection timeout", took)
	}
	msg := err.Error()
	if !strings.Contains(msg, "MongoDB") || !strings.Contains(msg, "127.0.0.1:1") || strings.Contains(msg, "s3cret-pw") {
		t.Errorf("err=%v, want MongoDB and the address named, the password not", err)
	}
}
