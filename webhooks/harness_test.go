package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/loomclient"
	"github.com/loomdb/loom/webhooks/tools"
)

const (
	adminKey   = "test-admin-key-0123456789"
	hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// stack is a whole Loom on loopback: a real SQLite store, auth, the
// trigger pipeline with the shipped triggers.json, the agent handlers
// (talking to the server over HTTP with a service key) and the server.
type stack struct {
	t     testing.TB
	store collections.Store
	trig  *triggers.Service
	URL   string
	user  string               // the signed-up user's uid
	token string               // and access token
	reg   *prometheus.Registry // the agent runtime's metrics
	stop  func()
}

type stackOpts struct {
	model         llm.Model
	maxIterations int
	tokenBudget   int
	// rules, when set, is the server's rules file (default: the shipped
	// rules).
	rules string
	// Per-user limits (0: the runtime's defaults).
	userTokensPerDay, userConcurrentRuns int
}

func startStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), sqlite.Config{
		Path:    filepath.Join(dir, "loom.db"),
		Indexes: append(slices.Clone(webhooks.Indexes), triggers.Indexes...),
	})
	if err != nil {
		t.Fatal(err)
	}
	authSvc, err := auth.New(context.Background(), st, auth.Config{Secret: []byte("0123456789abcdef0123456789abcdef-test"), BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	guard, err := ssrf.New([]string{"127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LOOM_URL": url, "LOOM_WEBHOOK_SECRET": hookSecret}
	trig, err := triggers.New(context.Background(), triggers.Config{
		Store:        st,
		File:         filepath.Join("..", "triggers.json"), // the shipped file
		Expand:       func(name string) (string, error) { return env[name], nil },
		Transport:    guard.Transport(),
		NodeID:       "test",
		PollInterval: 50 * time.Millisecond,
		BuiltinURL:   url + "/webhooks/", // as cmd/loom serve sets it
	})
	if err != nil {
		t.Fatal(err)
	}
	key, err := authSvc.CreateServiceKey(context.Background(), "agents", []string{"service"})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := loomclient.New(loomclient.Config{BaseURL: url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.New(nil, tools.Deps{Query: docs.Query, Transport: guard.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	model := o.model
	if model == nil {
		model = llm.Offline()
	}
	metrics := prometheus.NewRegistry()
	h, err := webhooks.New(webhooks.Config{Docs: docs, Model: model, Tools: reg, Secret: hookSecret, Registerer: metrics,
		MaxIterations: o.maxIterations, TokenBudget: o.tokenBudget,
		UserTokensPerDay: o.userTokensPerDay, UserConcurrentRuns: o.userConcurrentRuns})
	if err != nil {
		t.Fatal(err)
	}
	var ruleSet *rules.Set // nil: rules.Default(), the shipped rules
	if o.rules != "" {
		file := filepath.Join(dir, "security.toml")
		if err := os.WriteFile(file, []byte(o.rules), 0o600); err != nil {
			t.Fatal(err)
		}
		if ruleSet, err = rules.Load(file); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := server.New(st, server.Config{AdminKey: adminKey, Auth: authSvc, Triggers: trig, Webhooks: h, RateLimit: -1, Registry: metrics, Rules: ruleSet,
		// Idle keep-alive connections that never carried a request hold a
		// graceful shutdown for 5 s (net/http StateNew): do not wait that long.
		ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	tctx, tcancel := context.WithCancel(context.Background())
	tdone := make(chan struct{})
	go func() { defer close(tdone); _ = trig.Run(tctx) }()
	s := &stack{t: t, store: st, trig: trig, URL: url, reg: metrics}
	s.stop = func() {
		cancel()
		<-served
		tcancel()
		<-tdone
		authSvc.Close()
		_ = st.Close()
	}
	t.Cleanup(s.stop)
	s.signup("alice")
	return s
}

// do calls the REST API with the given bearer token.
func (s *stack) do(method, path, token, body string) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
}

func (s *stack) signup(name string) {
	s.t.Helper()
	code, m := s.do("POST", "/auth/v1/signup", "", fmt.Sprintf(`{"username":%q,"password":"correct horse battery"}`, name))
	if code != 200 {
		s.t.Fatalf("signup: %d %v", code, m)
	}
	s.token, _ = m["access_token"].(string)
	code, me := s.do("GET", "/auth/v1/me", s.token, "")
	if code != 200 {
		s.t.Fatalf("me: %d %v", code, me)
	}
	s.user, _ = me["uid"].(string)
}

func (s *stack) chat(id string) string { return "users/" + s.user + "/orch-chats/" + id }

// say writes a user message into a chat as the user (over REST, subject to
// the security rules) and returns its id.
func (s *stack) say(chatID, msgID, text string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"doc": map[string]any{"role": "user", "content": text, "userId": s.user, "chatId": chatID}})
	code, m := s.do("PUT", "/api/v1/databases/default/documents/"+s.chat(chatID)+"/messages/"+msgID, s.token, string(body))
	if code != 201 {
		s.t.Fatalf("say: %d %v", code, m)
	}
}

// docs returns the live documents of a collection (or pattern), in path
// order.
func (s *stack) docs(coll string) []*collections.Document {
	s.t.Helper()
	q := collections.Query{Collection: coll, Limit: 1000}
	if err := q.Normalize(); err != nil {
		s.t.Fatal(err)
	}
	res, err := s.store.Query(context.Background(), "default", q)
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Docs
}

// waitFor polls until cond holds (bounded), then returns.
func (s *stack) waitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s\n%s", what, s.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get returns a document or nil.
func (s *stack) get(path string) *collections.Document {
	d, err := s.store.Get(context.Background(), "default", path)
	if errors.Is(err, collections.ErrNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

// dump lists every agent document, for failure messages.
func (s *stack) dump() string {
	var b strings.Builder
	for _, coll := range []string{"users/*/orch-chats/*/messages", "users/*/orch-chats/*/tasks", "users/*/orch-chats/*/sub-agents", "users/*/orch-chats/*/sub-agents/*/messages", "users/*/orch-chats/*/sub-agents/*/tool-calls"} {
		for _, d := range s.docs(coll) {
			j, _ := json.Marshal(d.Data)
			fmt.Fprintf(&b, "%s v%d %s\n", d.Path, d.Version, j)
		}
	}
	ds, _, _ := s.trig.Deliveries(context.Background(), triggers.DeliveryQuery{Limit: 50})
	for _, d := range ds {
		last := ""
		if n := len(d.Attempts); n > 0 {
			last = fmt.Sprintf("%d %s %s", d.Attempts[n-1].Status, d.Attempts[n-1].Error, d.Attempts[n-1].Response)
		}
		fmt.Fprintf(&b, "delivery %s %s %s attempts=%d %s\n", d.TriggerID, d.ID, d.Status, len(d.Attempts), last)
	}
	return b.String()
}

// field reads a string field.
func field(d *collections.Document, f string) string {
	if d == nil {
		return ""
	}
	s, _ := d.Data[f].(string)
	return s
}
