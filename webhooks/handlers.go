package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
	"github.com/loomdb/loom/webhooks/tools"
)

// Defaults for Config.
const (
	DefaultMaxIterations = 10
	DefaultTokenBudget   = 8000
	DefaultHistory       = 20
	DefaultMaxBody       = 4 << 20
	// DefaultRuleLogRetention is how long the rules' execution log is kept.
	DefaultRuleLogRetention = 24 * time.Hour
)

// Role is a sub-agent role: its system prompt and the tools it is offered
// (besides ask_user), and what it overrides of the runtime's defaults.
type Role struct {
	SystemPrompt string
	Tools        []string
	// Model is the LLM model of the role's steps and compressions ("":
	// the configured one); Temperature their sampling temperature (nil:
	// the provider's default).
	Model       string
	Temperature *float64
	// MaxIterations and TokenBudget override Config.MaxIterations and
	// Config.TokenBudget for the role (0: those).
	MaxIterations int
	TokenBudget   int
}

// DefaultRoles are the roles the orchestrator can delegate to.
func DefaultRoles() map[string]Role {
	return map[string]Role{
		"researcher": {
			SystemPrompt: "You are a careful researcher working for a user. Use the tools to find facts, then answer concisely with what you found. If the request is ambiguous, ask the user with ask_user.",
			Tools:        []string{"current_time", "calculator", "http_get", "query_documents"},
		},
		"general": {
			SystemPrompt: "You are a helpful assistant working on one task for a user. Use tools when they help, then give a short final answer. If you need more information, ask the user with ask_user.",
			Tools:        []string{"current_time", "calculator", "query_documents"},
		},
	}
}

// Config configures the handlers.
type Config struct {
	Docs  Docs
	Model llm.Model
	Tools *tools.Registry
	// Secret verifies the Standard Webhooks signature of every delivery.
	Secret string
	Roles  map[string]Role // nil: DefaultRoles
	// MaxIterations bounds LLM steps per sub-agent (default 10).
	MaxIterations int
	// TokenBudget is a sub-agent's context budget (prompt tokens): above
	// it older messages are compressed into a summary, and a context still
	// over TokenBudget × 1.1 fails the task (default 8000; MinTokenBudget
	// to MaxTokenBudget). A role's TokenBudget overrides it.
	TokenBudget int
	// OrchestratorModel and OrchestratorTemperature are the model ("":
	// the configured one) and temperature (nil: the provider's default)
	// of the orchestrator's decisions and of finalize's summaries.
	OrchestratorModel       string
	OrchestratorTemperature *float64
	// History is how many recent chat messages the orchestrator reads
	// verbatim ([agents] chat_history, default 20); older ones are folded
	// into the chat's summary (memory.go).
	History int
	// ChatSuspendAfter suspends a chat after that long without a user
	// message (default DefaultChatSuspendAfter); ChatCleanupAfter deletes a
	// suspended or closed chat's documents that long after (0:
	// DefaultChatCleanupAfter; negative: never). See chatidle.go.
	ChatSuspendAfter time.Duration
	ChatCleanupAfter time.Duration
	// MaxBody bounds a delivery's body (default and minimum 4 MiB). It must
	// hold the largest event, a document and its previous state, or that
	// document's deliveries are refused on every attempt.
	MaxBody int64
	// UserTokensPerDay bounds the LLM tokens one user's runs use per UTC
	// day (0: DefaultUserTokensPerDay; negative: no limit, so one user can
	// spend without bound).
	UserTokensPerDay int
	// UserConcurrentRuns bounds a user's queries in progress at once (0:
	// DefaultUserConcurrentRuns; negative: no limit).
	UserConcurrentRuns int
	// WaitTimeout is how long an ask_user or send_message wait lasts unless
	// the model asks for another time (0: DefaultWaitTimeout).
	WaitTimeout time.Duration
	// MaxChildTasks bounds the tasks one task starts with send_message to
	// agent roles (0: DefaultMaxChildTasks).
	MaxChildTasks int

	// Rules evaluates the lifecycle rules at the hook points (nil: none).
	Rules *plugins.Engine
	// LoadRules re-reads the rule and plugin files for ReloadRules (nil:
	// nothing to reload).
	LoadRules func() (*plugins.Set, error)
	// RuleLogRetention is how long execution-log documents are kept
	// (default DefaultRuleLogRetention).
	RuleLogRetention time.Duration

	Logger *slog.Logger
	// Registerer receives the runtime's metrics (nil: not exported).
	Registerer prometheus.Registerer
}

// Handlers serves the agent runtime's webhooks.
type Handlers struct {
	cfg    Config
	docs   Docs
	model  llm.Model
	tools  *tools.Registry
	wh     *standardwebhooks.Webhook
	log    *slog.Logger
	m      *metrics
	seals  sealer
	routes map[string]func(context.Context, *Event) error
	rules  *rulesState // lifecycle rules: switches, reloads, execution log (rulesadmin.go)
}

// New builds the handlers.
func New(cfg Config) (*Handlers, error) {
	if cfg.Docs == nil || cfg.Model == nil || cfg.Tools == nil {
		return nil, errors.New("webhooks: Docs, Model and Tools are required")
	}
	wh, err := standardwebhooks.NewWebhook(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhooks: secret: %w", err)
	}
	if cfg.Roles == nil {
		cfg.Roles = DefaultRoles()
	}
	for name, r := range cfg.Roles {
		for _, t := range r.Tools {
			if _, ok := cfg.Tools.Get(t); !ok {
				return nil, fmt.Errorf("webhooks: role %s: unknown tool %q", name, t)
			}
		}
	}
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = DefaultMaxIterations
	}
	if cfg.TokenBudget <= 0 {
		cfg.TokenBudget = DefaultTokenBudget
	}
	if err := validateBudgets(cfg); err != nil {
		return nil, err
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	cfg.applyChatDefaults()
	cfg.MaxBody = max(cfg.MaxBody, DefaultMaxBody)
	if cfg.UserTokensPerDay == 0 {
		cfg.UserTokensPerDay = DefaultUserTokensPerDay
	}
	if cfg.UserConcurrentRuns == 0 {
		cfg.UserConcurrentRuns = DefaultUserConcurrentRuns
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	if cfg.MaxChildTasks <= 0 {
		cfg.MaxChildTasks = DefaultMaxChildTasks
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("webhooks: metrics: %w", err)
	}
	h := &Handlers{cfg: cfg, docs: cfg.Docs, model: meteredModel{Model: cfg.Model, m: m}, tools: cfg.Tools, wh: wh,
		log: cfg.Logger.With("component", "agents"), m: m, seals: newSealer(cfg.Secret)}
	if h.rules, err = newRulesState(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("webhooks: metrics: %w", err)
	}
	h.routes = map[string]func(context.Context, *Event) error{
		"orchestrator":          h.orchestrator,
		"agent-init":            h.agentInit,
		"agent-loop":            h.agentLoop,
		"tool-runner":           h.toolRunner,
		"orchestrator-finalize": h.finalize,
		"orchestrator-notify":   h.notify,
		"chat-cancel":           h.chatCancel,
		"wait-timeout":          h.waitTimeout,
		"chat-idle":             h.chatIdle,
	}
	for name, fn := range h.routes {
		h.routes[name] = func(ctx context.Context, ev *Event) error { return fn(withSettingsMemo(ctx), ev) }
	}
	return h, nil
}

// ServeHTTP serves POST /webhooks/{name}.
func (h *Handlers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := cutPrefix(r.URL.Path, "/webhooks/")
	fn := h.routes[name]
	if !ok || fn == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "no webhook handler " + r.URL.Path})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost) // a 405 must name the allowed methods (RFC 9110)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "use POST"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		// Only a body over the limit is too large; one that breaks off
		// (shorter than its Content-Length, a broken chunked encoding, a
		// read that fails) is a bad request.
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large"})
		} else {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unreadable body"})
		}
		return
	}
	if err := h.wh.Verify(body, r.Header); err != nil {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid webhook signature"})
		return
	}
	ev, err := decodeEvent(body)
	if err != nil {
		// A signed body we cannot read will not get better on retry, but
		// a 4xx other than 410 is retried anyway: say so loudly.
		h.log.Error("undecodable webhook", "handler", name, "err", err)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	start := time.Now()
	err = fn(r.Context(), ev)
	outcome, answer := "ok", map[string]any{"ok": true}
	if permanent(err) {
		// The document's content makes this fail on every attempt: record
		// the failure for the user and complete the delivery, rather than
		// answer 5xx until it goes dead (never 410: that would disable the
		// trigger for everyone).
		outcome, answer["failed"] = "failed", failureReason(err) // shown in the delivery log
		err = h.settleFailure(r.Context(), name, ev, err)
	}
	if err != nil {
		h.m.handled.WithLabelValues(name, "error").Observe(time.Since(start).Seconds())
		h.log.Warn("webhook handler failed; the delivery will be retried", "handler", name, "event", ev.EventID, "path", ev.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
		return
	}
	h.m.handled.WithLabelValues(name, outcome).Observe(time.Since(start).Seconds())
	h.log.Debug("webhook handled", "handler", name, "event", ev.EventID, "path", ev.Path, "ms", time.Since(start).Milliseconds())
	writeJSON(w, http.StatusOK, answer)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return "", false
	}
	return s[len(p):], true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Event is the part of a trigger delivery the handlers use.
type Event struct {
	EventID   string
	TriggerID string
	Type      string // create | update | delete
	Path      string
	ID        string
	Params    map[string]string
	Doc       *collections.Document // the document after the change
	Before    *collections.Document // nil on create
}

type wireDoc struct {
	ID         string         `json:"id"`
	Collection string         `json:"collection"`
	Path       string         `json:"path"`
	Version    int64          `json:"version"`
	CreatedAt  int64          `json:"createdAt"`
	UpdatedAt  int64          `json:"updatedAt"`
	Data       map[string]any `json:"data"`
}

func (w *wireDoc) doc() *collections.Document {
	if w == nil {
		return nil
	}
	return &collections.Document{ID: w.ID, Collection: w.Collection, Path: w.Path, Version: w.Version,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt, Data: w.Data}
}

func decodeEvent(body []byte) (*Event, error) {
	var p struct {
		ID        string `json:"id"`
		TriggerID string `json:"triggerId"`
		Event     struct {
			Type     string            `json:"type"`
			Path     string            `json:"path"`
			ID       string            `json:"id"`
			Params   map[string]string `json:"params"`
			Document *wireDoc          `json:"document"`
			Before   *wireDoc          `json:"before"`
		} `json:"event"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("webhook body: %w", err)
	}
	if p.Event.Document == nil || p.Event.Path == "" {
		return nil, errors.New("webhook body has no event document")
	}
	ev := &Event{EventID: p.ID, TriggerID: p.TriggerID, Type: p.Event.Type, Path: p.Event.Path, ID: p.Event.ID,
		Params: p.Event.Params, Doc: p.Event.Document.doc(), Before: p.Event.Before.doc()}
	if ev.Doc.Data == nil {
		ev.Doc.Data = map[string]any{}
	}
	if ev.Doc.Path == "" {
		ev.Doc.Path = ev.Path
	}
	return ev, nil
}
