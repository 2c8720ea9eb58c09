package apptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks/llm"
)

// Fixed credentials every stack uses, so a test (and its failure output)
// can name them.
const (
	// AdminKey is the stack's admin API key ([auth] admin_key).
	AdminKey = "test-admin-key-0123456789"
	// WebhookSecret signs the built-in triggers' deliveries and is what the
	// agent handlers verify (LOOM_WEBHOOK_SECRET). Tests also write it into
	// their own triggers as a fixed Standard Webhooks secret.
	WebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// Password is the password SignUp gives every user.
	Password = "correct horse battery"
	// JWTSecret signs the access tokens of a node on MongoDB ([auth]
	// jwt_secret), and CursorKey its query cursors ([security]
	// cursor_key): nodes on one database must share them (loom serve
	// --engine mongo refuses to start without them), so every node the kit
	// starts on MongoDB has these.
	JWTSecret = "test-jwt-secret-shared-by-every-node-0123456789"
	CursorKey = "test-cursor-key-shared-by-every-node-0123456789"
)

// WaitTimeout bounds every wait of the kit: a condition that does not hold
// by then fails the test.
const WaitTimeout = 20 * time.Second

// pollInterval is the trigger pipeline's retry and lease poll in tests
// (the default, a second, would make every retry test slow).
const pollInterval = 50 * time.Millisecond

// shutdownTimeout bounds a stopping node's graceful HTTP shutdown: streams
// a test left open should not hold every test up for the default 5 s.
const shutdownTimeout = time.Second

// Options shape a Stack. The zero value is a node with the built-in rules,
// no triggers and the agent runtime off.
type Options struct {
	// Triggers is the content of triggers.json, written to the data
	// directory ("": none, or with Agents the shipped triggers).
	Triggers string
	// Rules is the content of the security rules file ("": the shipped
	// rules).
	Rules string
	// Agents turns the agent runtime on ([agents] enabled).
	Agents bool
	// Model is the agent runtime's model (nil: the one [llm] configures,
	// the offline model by default).
	Model llm.Model
	// Config changes the configuration last, after the kit's test
	// settings.
	Config func(*config.Config)
	// Store is a store to share (nil: the node opens its own in the data
	// directory and closes it when it stops). Two stacks on one store are
	// two nodes; see OpenStore.
	Store collections.Store
	// DataDir is the data directory ("": a new t.TempDir()). A restart
	// passes the stopped stack's DataDir (and Store).
	DataDir string
	// Logger receives the node's logs (nil: discarded).
	Logger *slog.Logger
	// DrainTimeout bounds how long stopping lets deliveries in flight
	// finish (0: the triggers default, 10 s); restart tests that leave a
	// receiver hanging shorten it.
	DrainTimeout time.Duration
	// Mongo runs the node on MongoDB (engine mongo) with its own Store on
	// that database, as loom serve --engine mongo does, instead of SQLite
	// in the data directory; the shared settings are the kit's fixed
	// AdminKey, WebhookSecret, JWTSecret and CursorKey. Nodes started with
	// the same Mongo are nodes of one deployment. nil: SQLite (or Store).
	Mongo *Mongo
}

// Mongo names the database a node runs on: collections/mongo/mongotest's
// Database gives a fresh one (or skips the test when there is no server).
type Mongo struct {
	URI      string
	Database string
}

// Stack is one whole Loom node built by the composition root (app.New)
// and running (App.Run) on 127.0.0.1 with a fresh data directory. The
// embedded App gives the test its parts: Store, Auth, Triggers, Server,
// Agents, Registry, URL.
type Stack struct {
	*app.App
	// DataDir is the node's data directory.
	DataDir string
	// TriggersFile is the triggers.json the node loaded ("" when none):
	// rewrite it and reload to change the triggers.
	TriggersFile string
	// Client is what Do sends with.
	Client *http.Client

	cancel   context.CancelFunc
	ran      chan error
	stopOnce sync.Once
	stopErr  error
}

// Start builds a node through app.New, runs it, and stops it at cleanup in
// the root's shutdown order (triggers drain, then the server, then Close).
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	dir := o.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	cfg, trigFile := testConfig(t, dir, o)
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a, err := app.New(context.Background(), cfg, app.Options{
		Store:                o.Store,
		Model:                o.Model,
		TriggerPollInterval:  pollInterval,
		BcryptCost:           bcrypt.MinCost,
		DeliveryDrainTimeout: o.DrainTimeout,
		ShutdownTimeout:      shutdownTimeout,
		Logger:               logger,
		Version:              "test",
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stack{
		App:          a,
		DataDir:      dir,
		TriggersFile: trigFile,
		Client:       &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}},
		cancel:       cancel,
		ran:          make(chan error, 1),
	}
	go func() { s.ran <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// testConfig is the built-in configuration with the test settings: the
// data directory, an ephemeral loopback port, the fixed keys, deliveries
// allowed to loopback (receivers are httptest servers), no request rate
// limit, and the files o names written into dir.
func testConfig(t testing.TB, dir string, o Options) (config.Config, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Addr = "127.0.0.1:0"
	cfg.Data = dir
	cfg.Auth.AdminKey = AdminKey
	cfg.WebhookSecret = WebhookSecret
	cfg.Limits.RateLimit = -1
	cfg.Delivery.AllowHosts = []string{"127.0.0.1"}
	cfg.Agents.Enabled = &o.Agents
	trigFile := ""
	if o.Triggers != "" {
		trigFile = writeFile(t, dir, "triggers.json", o.Triggers)
		cfg.Triggers = trigFile
	}
	if o.Rules != "" {
		cfg.Security.RulesFile = writeFile(t, dir, "security.toml", o.Rules)
	}
	if o.Mongo != nil {
		cfg.Engine = "mongo"
		cfg.Mongo.URI = o.Mongo.URI
		cfg.Mongo.Database = o.Mongo.Database
		cfg.Auth.JWTSecret = JWTSecret
		cfg.Security.CursorKey = CursorKey
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if cfg.Engine == "mongo" {
		// What loom serve checks before it starts a node on MongoDB.
		if err := cfg.Validate(); err != nil {
			t.Fatalf("node configuration: %v", err)
		}
	}
	return cfg, trigFile
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Stop shuts the node down as loom serve does on SIGTERM and releases what
// it opened (a shared Store stays open). It is idempotent; cleanup calls
// it too. Run's and Close's errors are returned.
func (s *Stack) Stop() error {
	s.stopOnce.Do(func() {
		s.Client.CloseIdleConnections()
		s.cancel()
		var runErr error
		select {
		case runErr = <-s.ran:
		case <-time.After(WaitTimeout):
			runErr = errors.New("Run did not return after shutdown")
		}
		s.stopErr = errors.Join(runErr, s.App.Close())
	})
	return s.stopErr
}

// OpenStore opens a SQLite store in dir with the indexes the node's
// features need, closed at cleanup: for tests where the store outlives a
// node (restarts, writes while it is down) or is shared by two nodes.
func OpenStore(t testing.TB, dir string) collections.Store {
	t.Helper()
	return OpenSQLite(t, sqlite.Config{
		Path:    filepath.Join(dir, "loom.db"),
		Indexes: app.StoreIndexes(config.Default()),
	})
}

// OpenSQLite opens a SQLite store with cfg and closes it at cleanup.
func OpenSQLite(t testing.TB, cfg sqlite.Config) collections.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil && !errors.Is(err, collections.ErrClosed) {
			t.Errorf("store Close: %v", err)
		}
	})
	return st
}

// Response is one HTTP response, body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object (numbers as json.Number).
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	m, err := collections.DecodeObject(r.Body)
	if err != nil {
		t.Fatalf("response body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

// Anonymous as Do's headers sends no credentials.
var Anonymous = map[string]string{"Authorization": ""}

// Bearer as Do's headers sends token instead of the admin key.
func Bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// Do sends one request to the node with the admin key, unless headers set
// Authorization or X-API-Key (a "" value removes a header).
func (s *Stack) Do(t testing.TB, method, path, body string, headers map[string]string) *Response {
	t.Helper()
	return Send(t, s.Client, s.URL+path, method, body, headers)
}

// Send sends one request to url with AdminKey, unless headers set
// Authorization or X-API-Key (a "" value removes a header), and reads the
// answer. Harnesses of a lone server use it as Do does.
func Send(t testing.TB, c *http.Client, url, method, body string, headers map[string]string) *Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+AdminKey)
	for k, v := range headers {
		if k == "Authorization" || k == "X-API-Key" {
			req.Header.Del("Authorization")
		}
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return &Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// MustDo is Do with the admin key that fails unless the status is want.
func (s *Stack) MustDo(t testing.TB, want int, method, path, body string) *Response {
	t.Helper()
	r := s.Do(t, method, path, body, nil)
	if r.Status != want {
		t.Fatalf("%s %s: status=%d, want %d; body %s", method, path, r.Status, want, r.Body)
	}
	return r
}

// Put writes a document of the default database through the REST API with
// the admin key; data is its JSON.
func (s *Stack) Put(t testing.TB, path, data string) {
	t.Helper()
	r := s.Do(t, "PUT", "/api/v1/databases/default/documents/"+path, `{"doc":`+data+`}`, nil)
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("PUT %s: status=%d %s", path, r.Status, r.Body)
	}
}

// User is a signed-up user.
type User struct {
	Name  string
	UID   string
	Token string // access token
}

// Header is Do's headers that send the user's access token.
func (u User) Header() map[string]string { return Bearer(u.Token) }

// SignUp signs up name (with Password) and returns the user and its access
// token.
func (s *Stack) SignUp(t testing.TB, name string) User {
	t.Helper()
	r := s.Do(t, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":%q,"password":%q}`, name, Password), Anonymous)
	if r.Status != http.StatusOK {
		t.Fatalf("signup %s: status=%d %s", name, r.Status, r.Body)
	}
	u := User{Name: name}
	u.Token, _ = r.JSON(t)["access_token"].(string)
	me := s.Do(t, "GET", "/auth/v1/me", "", u.Header())
	if me.Status != http.StatusOK {
		t.Fatalf("me %s: status=%d %s", name, me.Status, me.Body)
	}
	u.UID, _ = me.JSON(t)["uid"].(string)
	return u
}

// WaitFor waits until cond holds (up to WaitTimeout), failing the test
// with what otherwise.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Head is the store's change-log head.
func (s *Stack) Head(t testing.TB) int64 {
	t.Helper()
	h, err := s.Store.Head(context.Background())
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}
