package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/rules"
)

// TestConsoleBrowser drives the console in Debian's Chromium through
// playwright-core (console/test/run.mjs and its scenarios/*.mjs) against a
// whole node started as loom serve starts it: the agent runtime on with the
// offline model, a rules file the scenarios may rewrite and reload, and a
// webhook receiver they control. See console/test/README.md.
//
// Without node or Chromium it skips with one line; LOOM_REQUIRE_BROWSER=1
// (CI, after installing Chromium) makes those skips failures, so a missing
// install step cannot hide the tests behind a green run.
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: runs Chromium and the console's browser scenarios")
	}
	skip := func(msg string) {
		t.Helper()
		if os.Getenv("LOOM_REQUIRE_BROWSER") == "1" {
			t.Fatal(msg + " — failing instead because LOOM_REQUIRE_BROWSER=1")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed: skipping the console browser tests (install Node 20+)")
	}
	chromium := findChromium()
	if chromium == "" {
		skip("chromium not found (LOOM_CHROMIUM, /usr/bin/chromium): skipping the console browser tests (apt-get install chromium)")
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	installDeps(t, dir, skip)

	rulesFile := filepath.Join(t.TempDir(), "security.toml")
	if err := os.WriteFile(rulesFile, []byte(rules.DefaultSource()), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t)
	// Registered before Start, so it runs after the node's Stop: the
	// node's last log lines still reach the test.
	logs := &lineLogger{t: t, prefix: "loom: "}
	t.Cleanup(logs.close)
	s := apptest.Start(t, apptest.Options{
		Agents: true, // the shipped triggers and the offline model: agent runs finish
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Config: func(c *config.Config) {
			c.Security.RulesFile = rulesFile
			// Scenarios sign up users freely from one address; the
			// signup limit (a burst of 10) is not what they test.
			c.Auth.SignupRate = -1
		},
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "run.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LOOM_URL="+s.URL,
		"LOOM_ADMIN_KEY="+apptest.AdminKey,
		"LOOM_RECEIVER="+rc.URL,
		"LOOM_RULES_FILE="+rulesFile,
		"LOOM_CHROMIUM="+chromium,
		// Playwright's errors otherwise carry terminal colour codes into the log.
		"FORCE_COLOR=0",
	)
	out := &lineLogger{t: t, prefix: "node: "}
	cmd.Stdout, cmd.Stderr = out, out
	// On timeout, interrupt first: Playwright then closes the Chromium it
	// launched, which a kill would leave running. WaitDelay kills later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	out.close()
	if err != nil {
		t.Fatalf("node test/run.mjs: %v (ctx: %v)", err, ctx.Err())
	}
	if n := rc.dropped(); n > 0 {
		t.Errorf("the webhook receiver dropped %d requests beyond its %d: a delivery is being retried without end", n, maxHookRequests)
	}
}

// findChromium is $LOOM_CHROMIUM, else Debian's /usr/bin/chromium, else
// chromium on PATH ("" when none is there).
func findChromium() string {
	if p := os.Getenv("LOOM_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		return ""
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// installDeps runs npm ci in dir when playwright-core is not installed
// (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: the tests drive the system Chromium).
func installDeps(t *testing.T, dir string, skip func(string)) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		skip("npm is not installed and console/node_modules is missing: skipping the console browser tests (install Node 20+ and npm)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// lineLogger logs each complete line written to it with t.Log, as it
// arrives (so -v shows progress), until close; later writes are dropped,
// since t.Log after the test ends panics.
type lineLogger struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
	closed bool
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.t.Log(l.prefix + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineLogger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 && !l.closed {
		l.t.Log(l.prefix + string(l.buf))
	}
	l.closed, l.buf = true, nil
}

// receiver is the webhook endpoint the scenarios register triggers with:
// POST /hook records the request and answers the status last set by POST
// /control {"status":N} (200 at first); GET /requests lists what /hook
// received. Scenarios reach it through t.receiver (test/lib.mjs).
type receiver struct {
	URL    string
	mu     sync.Mutex
	status int
	got    []hookRequest
	over   int // requests not kept: beyond maxHookRequests
}

// hookRequest is one recorded /hook request, as GET /requests lists it.
type hookRequest struct {
	N       int               `json:"n"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"` // the JSON sent, or null when it was not JSON
	Status  int               `json:"status"`
	At      time.Time         `json:"at"`
}

// maxHookRequests bounds what the receiver keeps: far more than any
// scenario provokes, so hitting it means a runaway retry loop, which fails
// the test once the scenarios are done.
const maxHookRequests = 10000

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{status: http.StatusOK}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", rc.hook)
	mux.HandleFunc("POST /control", rc.control)
	mux.HandleFunc("GET /requests", rc.requests)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *receiver) hook(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if !json.Valid(raw) {
		raw = []byte("null")
	}
	h := make(map[string]string, len(r.Header))
	for k := range r.Header {
		h[k] = r.Header.Get(k)
	}
	rc.mu.Lock()
	status := rc.status
	if len(rc.got) < maxHookRequests {
		rc.got = append(rc.got, hookRequest{N: len(rc.got) + 1, Path: r.URL.Path, Headers: h, Body: raw, Status: status, At: time.Now()})
	} else {
		rc.over++
	}
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"received":true}`)
}

func (rc *receiver) control(w http.ResponseWriter, r *http.Request) {
	var c struct {
		Status int `json:"status"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&c); err != nil || c.Status < 200 || c.Status > 599 {
		http.Error(w, `want {"status": 200..599}`, http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.status = c.Status
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// dropped is how many /hook requests were not kept.
func (rc *receiver) dropped() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.over
}

func (rc *receiver) requests(w http.ResponseWriter, _ *http.Request) {
	rc.mu.Lock()
	got := append([]hookRequest{}, rc.got...)
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(got)
}
