package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/server"
)

const testAdminKey = apptest.AdminKey

// api is the prefix of the default database's routes.
const api = "/api/v1/databases/default"

// testEnv is one real server over one real SQLite store.
type testEnv struct {
	Store  collections.Store
	Server *server.Server
	URL    string // http://127.0.0.1:port
	Client *http.Client

	stop     context.CancelFunc // starts Serve's graceful shutdown
	served   chan error         // Serve's result
	waitOnce sync.Once
	serveErr error
}

// Shutdown starts the server's graceful shutdown (as SIGTERM does) without
// waiting for it; WaitServe waits.
func (e *testEnv) Shutdown() { e.stop() }

// WaitServe shuts the server down if needed and returns Serve's result,
// failing the test if Serve does not return within d.
func (e *testEnv) WaitServe(t testing.TB, d time.Duration) error {
	t.Helper()
	e.stop()
	e.waitOnce.Do(func() {
		select {
		case e.serveErr = <-e.served:
		case <-time.After(d):
			e.serveErr = errors.New("Serve did not return after shutdown")
		}
	})
	return e.serveErr
}

// MustOpenStore opens a fresh SQLite store in t.TempDir() and closes it at
// cleanup.
func MustOpenStore(t testing.TB) collections.Store {
	t.Helper()
	return apptest.OpenSQLite(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
}

// MustStartServer serves a new Server over store on 127.0.0.1:0 via Serve,
// and shuts it down at cleanup (before the store closes), checking that
// Serve returned nil.
func MustStartServer(t testing.TB, store collections.Store, cfg server.Config) *testEnv {
	t.Helper()
	if cfg.AdminKey == "" {
		cfg.AdminKey = testAdminKey
	}
	srv, err := server.New(store, cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	env := &testEnv{
		Store:  store,
		Server: srv,
		URL:    "http://" + ln.Addr().String(),
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}},
		stop:   cancel,
		served: make(chan error, 1),
	}
	go func() { env.served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		env.Client.CloseIdleConnections()
		if err := env.WaitServe(t, 15*time.Second); err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	})
	return env
}

// newEnv is a fresh store and server (cfg), seeded with
// testdata/seed.json.
func newEnv(t testing.TB, cfg server.Config) *testEnv {
	t.Helper()
	env := MustStartServer(t, MustOpenStore(t), cfg)
	env.MustSeed(t, "testdata/seed.json")
	return env
}

// response is one HTTP response, body read.
type response = apptest.Response

// Do sends one request with the admin key (unless headers set
// Authorization or X-API-Key, or anonymous is true).
func (e *testEnv) Do(t testing.TB, method, url string, body string, headers map[string]string) *response {
	t.Helper()
	return apptest.Send(t, e.Client, e.URL+url, method, body, headers)
}

// MustDo is Do that fails unless the status is want.
func (e *testEnv) MustDo(t testing.TB, want int, method, url, body string) *response {
	t.Helper()
	r := e.Do(t, method, url, body, nil)
	if r.Status != want {
		t.Fatalf("%s %s: status=%d, want %d; body %s", method, url, r.Status, want, r.Body)
	}
	return r
}

// Head is the store's change-log head.
func (e *testEnv) Head(t testing.TB) int64 {
	t.Helper()
	h, err := e.Store.Head(context.Background())
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}

// MustSeed writes the fixture documents through the public API (PUT), so
// the same fixtures work for any engine.
func (e *testEnv) MustSeed(t testing.TB, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	var docs []struct {
		Path string          `json:"path"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &docs); err != nil {
		t.Fatalf("fixture %s: %v", file, err)
	}
	for _, d := range docs {
		e.MustDo(t, http.StatusCreated, "PUT", api+"/documents/"+d.Path, `{"doc":`+string(d.Data)+`}`)
	}
}

// scenario is one HTTP request against a fresh seeded server and what must
// come back (modelled on PocketBase's ApiScenario).
type scenario struct {
	Name    string
	Method  string
	URL     string
	Body    string
	Headers map[string]string // "" value removes a header; setting Authorization or X-API-Key replaces the default admin key
	// Anonymous sends no credentials at all.
	Anonymous bool
	// Config configures the server (zero: defaults).
	Config server.Config

	ExpectedStatus int
	// ExpectedContent and NotExpectedContent are substrings of the
	// compacted JSON body (or of the raw body when it is not JSON).
	ExpectedContent    []string
	NotExpectedContent []string
	// ExpectedHeaders must match exactly.
	ExpectedHeaders map[string]string
	// ExpectedChanges is how many change-log entries the request wrote
	// (Head after minus Head before). Zero on every 4xx row proves that
	// bad input changes nothing.
	ExpectedChanges int64
	// StoreClosed marks rows whose Before closes the store: Head cannot be
	// read, so ExpectedChanges is not checked.
	StoreClosed bool

	Before func(t testing.TB, env *testEnv)
	After  func(t testing.TB, env *testEnv, res *response)
}

// runScenarios runs each scenario as a parallel subtest on its own server.
func runScenarios(t *testing.T, scenarios []scenario) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Run(t)
		})
	}
}

// Run executes the scenario against a fresh seeded server.
func (sc *scenario) Run(t *testing.T) {
	t.Helper()
	env := newEnv(t, sc.Config)
	if sc.Before != nil {
		sc.Before(t, env)
	}
	headers := sc.Headers
	if sc.Anonymous {
		headers = map[string]string{"Authorization": ""}
		for k, v := range sc.Headers {
			headers[k] = v
		}
	}
	var before, after int64
	if !sc.StoreClosed {
		before = env.Head(t)
	}
	res := env.Do(t, sc.Method, sc.URL, sc.Body, headers)
	if !sc.StoreClosed {
		after = env.Head(t)
	}

	if res.Status != sc.ExpectedStatus {
		t.Errorf("status=%d, want %d; body %s", res.Status, sc.ExpectedStatus, res.Body)
	}
	if got := after - before; got != sc.ExpectedChanges {
		t.Errorf("changes=%d, want %d", got, sc.ExpectedChanges)
	}
	apptest.CheckContent(t, res, sc.ExpectedContent, sc.NotExpectedContent)
	for k, want := range sc.ExpectedHeaders {
		if got := res.Header.Get(k); got != want {
			t.Errorf("header %s=%q, want %q", k, got, want)
		}
	}
	if res.Status >= 400 {
		checkErrorShape(t, res)
	}
	if sc.After != nil {
		sc.After(t, env, res)
	}
}

// checkErrorShape asserts the error body of README "Errors".
func checkErrorShape(t testing.TB, res *response) {
	t.Helper()
	apptest.CheckErrorShape(t, res)
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// mustGet fetches a document's compacted JSON (status must be want).
func (e *testEnv) mustGet(t testing.TB, path string, want int) string {
	t.Helper()
	return compact(e.MustDo(t, want, "GET", api+"/documents/"+path, "").Body)
}
