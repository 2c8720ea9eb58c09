package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks/llm"
)

const (
	adminKey   = apptest.AdminKey
	hookSecret = apptest.WebhookSecret
)

// stack is a whole Loom node on loopback (apptest.Start, through the
// composition root) with the agent runtime on: a real SQLite store, auth,
// the trigger pipeline with the shipped triggers, the agent handlers
// (reading and writing through the node's access service, as loom serve
// wires them) and the server; and a signed-up user.
type stack struct {
	t     testing.TB
	node  *apptest.Stack
	store collections.Store
	trig  *triggers.Service
	URL   string
	user  string               // the signed-up user's uid
	token string               // and access token
	reg   *prometheus.Registry // the node's metrics, the agent runtime's among them
}

type stackOpts struct {
	model         llm.Model
	maxIterations int
	tokenBudget   int
	// rules, when set, is the server's rules file (default: the shipped
	// rules).
	rules string
	// rulesDir is [agents] rules_dir: standalone lifecycle rule files
	// (with the shipped rules and plugins).
	rulesDir string
	// Per-user limits (0: the runtime's defaults).
	userTokensPerDay, userConcurrentRuns int
	// waitTimeout and maxChildTasks are [agents] wait_timeout and
	// max_child_tasks (0: the defaults).
	waitTimeout   time.Duration
	maxChildTasks int
	// dataDir is the node's data directory ("": a new one); a restart
	// passes the stopped node's.
	dataDir string
	// configure, when set, adjusts the node's configuration last.
	configure func(*config.Config)
}

func startStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	s := startNode(t, o)
	s.signup("alice")
	return s
}

// startNode starts the node of a stack, without a user (a restart keeps
// the stopped node's).
func startNode(t testing.TB, o stackOpts) *stack {
	t.Helper()
	node := apptest.Start(t, apptest.Options{Agents: true, Model: o.model, Rules: o.rules, DataDir: o.dataDir, Config: func(c *config.Config) {
		// The tools' HTTP may reach the test servers on loopback.
		c.Agents.AllowHosts = []string{"127.0.0.1"}
		c.Agents.MaxIterations, c.Agents.TokenBudget = o.maxIterations, o.tokenBudget
		c.Agents.RulesDir = o.rulesDir
		c.Agents.UserTokensPerDay, c.Agents.UserConcurrentRuns = o.userTokensPerDay, o.userConcurrentRuns
		c.Agents.WaitTimeout.Duration, c.Agents.MaxChildTasks = o.waitTimeout, o.maxChildTasks
		if o.configure != nil {
			o.configure(c)
		}
	}})
	return &stack{t: t, node: node, store: node.Store, trig: node.Triggers, URL: node.URL, reg: node.Registry}
}

// signup signs up name and makes it the stack's user.
func (s *stack) signup(name string) {
	s.t.Helper()
	u := s.node.SignUp(s.t, name)
	s.user, s.token = u.UID, u.Token
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
	res, err := s.node.Client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
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
