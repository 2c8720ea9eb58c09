package triggers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
)

// Defaults for Config.
const (
	DefaultWorkers          = 64
	DefaultLeaseSlack       = 30 * time.Second
	DefaultPollInterval     = time.Second
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultDisableAfterDead = 20
	DefaultMaxHeld          = 10000
	DefaultRotationOverlap  = 24 * time.Hour
	DefaultDrainTimeout     = 10 * time.Second
)

// DefaultDisableOrigins: the dead deliveries of a streak must come from
// this many top-level documents (tenants) before it disables the trigger.
const DefaultDisableOrigins = 5

// Config configures a Service.
type Config struct {
	Store collections.Store
	// File is triggers.json ("" = no file triggers unless Builtin).
	File string
	// Builtin is a triggers.json used when File is "": the shipped
	// triggers of the built-in handlers. It cannot change, so Reload keeps
	// it. Its triggers are file triggers like File's.
	Builtin []byte
	// Expand resolves ${VAR} in url, headers and secret; the caller gives
	// the environment (EnvExpander). Nil: no variable is set, so every
	// ${VAR} is an error.
	Expand Expander
	// Transport sends the webhooks. It should be an SSRF-guarded transport
	// (internal/ssrf); nil means http.DefaultTransport (tests only).
	Transport http.RoundTripper
	// BuiltinTransport sends the deliveries under BuiltinURL, to this
	// server itself, whose address (often loopback) Transport's guard may
	// refuse for the other triggers. Nil means Transport.
	BuiltinTransport http.RoundTripper
	// NodeID names this process in delivery leases. It must be stable
	// across restarts of the same node (so its own leases are taken back
	// at once after a crash) and unique among nodes sharing a store.
	NodeID string
	// Workers bounds concurrent webhook requests. One trigger keeps at
	// most 3/4 of them busy and one origin (see DisableOrigins) 1/4, so a
	// receiver hanging on one trigger's or one tenant's deliveries leaves
	// workers for the others.
	Workers int
	// LeaseSlack is added to a trigger's timeout to make a delivery lease.
	LeaseSlack time.Duration
	// PollInterval is how often due retries and expired leases are looked
	// for.
	PollInterval time.Duration
	// Retention keeps delivered and dead outbox rows this long.
	Retention time.Duration
	// DisableAfterDead disables a trigger after this many dead deliveries
	// in a row (negative: never).
	DisableAfterDead int
	// DisableOrigins is how many distinct origins the dead deliveries of
	// such a streak must come from. A delivery's origin is
	// the top-level document its document lives under (users/alice for
	// users/alice/orch-chats/c1/messages/m1: the owner, in the usual
	// layout), so one user's documents, however many, cannot disable a
	// trigger for everyone. 1: any streak disables.
	DisableOrigins int
	// BuiltinURL is the URL prefix of this server's own webhook handlers
	// (the agent runtime, "${LOOM_URL}/webhooks/"; "" = none). A trigger
	// delivering there is never disabled automatically, neither by dead
	// deliveries nor by a 410: its receiver records a document's failure
	// itself, and its deliveries going dead means a fault an admin must
	// see, not a receiver that went away. The admin can still disable it.
	BuiltinURL string
	// MaxHeld bounds deliveries held in memory (in flight, queued behind
	// their ordering key, or a key's head waiting for its retry); beyond it
	// new matches wait in the outbox for the poller. One ordering key holds
	// at most max(16, MaxHeld/100) of them, one origin max(that,
	// MaxHeld/25) and one trigger a quarter (at least two origins' worth),
	// so no key, tenant or trigger can take the room the others need;
	// their further rows wait in the outbox, in order, until there is room.
	MaxHeld int
	// RotationOverlap is how long the previous secret keeps signing after
	// a rotation.
	RotationOverlap time.Duration
	// DrainTimeout is how long Run, once its context ends, lets requests
	// in flight finish and record their outcome (default 10 s).
	DrainTimeout time.Duration
	// IssueToken mints the preIssuedToken of each attempt of a trigger
	// with "format": "syntrix" (syntrixformat.go); the composition root
	// wires it to the auth service. Nil: such triggers are refused (at
	// load, reload and registration).
	IssueToken func(TokenRequest) (string, error)
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Version    string
}

// ErrNotFound: no trigger or delivery with that id.
var ErrNotFound = errors.New("not found")

// ErrConflict: the request conflicts with the trigger's source or state
// (a file trigger cannot be changed through the API; the id exists).
var ErrConflict = errors.New("conflict")

// Service runs the trigger pipeline and answers the admin operations. It
// is three parts with narrow seams between them:
//
//   - the registry (registry.go, admin.go): the trigger definitions, their
//     stored state and counters, and the admin operations on them;
//   - the evaluator (evaluator.go): tails the change log and writes outbox
//     rows, handing the rows it leased to this node to the dispatcher;
//   - the deliverer (delivery.go, dispatch.go, poll.go): holds rows
//     fairly, claims, signs, posts and records each attempt, and polls the
//     outbox for rows that are due.
type Service struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	reg  *registry
	eval *evaluator
	del  *deliverer
}

// New loads the triggers (a bad file is an error) and their state. Call
// Run to start the pipeline.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("triggers: no store")
	}
	cfg.setDefaults()
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "triggers")}
	c := &s.cfg
	s.reg = newRegistry(c, c.Store, s.log)
	s.del = newDeliverer(c, c.Store, s.reg, s.log)
	m, err := newMetrics(c.Registerer, c.Store, s.del.disp.heldCount)
	if err != nil {
		return nil, err
	}
	s.m, s.del.m = m, m // the deliverer makes no attempt before Run
	fileTriggers, err := c.fileTriggers()
	if err != nil {
		return nil, err
	}
	head, err := c.Store.Head(ctx)
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	epoch, err := initEpoch(ctx, c.Store, head)
	if err != nil {
		return nil, err
	}
	s.eval = &evaluator{cfg: c, store: c.Store, reg: s.reg, intake: s.del.disp, log: s.log, m: m, epoch: epoch}
	if err := s.reg.load(ctx, fileTriggers, head); err != nil {
		return nil, err
	}
	return s, nil
}

// setDefaults fills the unset fields of c.
func (c *Config) setDefaults() {
	if c.Expand == nil {
		c.Expand = EnvExpander(func(string) (string, bool) { return "", false }, nil)
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	if c.BuiltinTransport == nil {
		c.BuiltinTransport = c.Transport
	}
	if c.NodeID == "" {
		c.NodeID = randomHex(8)
	}
	setDefault(&c.Workers, DefaultWorkers)
	setDefault(&c.LeaseSlack, DefaultLeaseSlack)
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.Retention, DefaultRetention)
	if c.DisableAfterDead == 0 { // negative means never
		c.DisableAfterDead = DefaultDisableAfterDead
	}
	setDefault(&c.DisableOrigins, DefaultDisableOrigins)
	setDefault(&c.MaxHeld, DefaultMaxHeld)
	setDefault(&c.RotationOverlap, DefaultRotationOverlap)
	setDefault(&c.DrainTimeout, DefaultDrainTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

// setDefault sets *v to def when it is zero or negative.
func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// fileTriggers compiles the file triggers: File, else Builtin, else none.
func (c *Config) fileTriggers() ([]*Compiled, error) {
	switch {
	case c.File != "":
		list, err := LoadFile(c.File, c.Expand)
		if err == nil {
			if err = c.admitAll(list); err != nil {
				err = fmt.Errorf("triggers: %s: %w", c.File, err)
			}
		}
		return list, err
	case c.Builtin != nil:
		list, err := ParseFile(c.Builtin, c.Expand)
		if err == nil {
			err = c.admitAll(list)
		}
		if err != nil {
			return nil, fmt.Errorf("built-in triggers: %w", err)
		}
		return list, nil
	}
	return nil, nil
}

// builtinSet reports whether the file triggers are Builtin (no file).
func (c *Config) builtinSet() bool { return c.File == "" && c.Builtin != nil }

// Builtin reports whether the file triggers are Config.Builtin (no file).
func (s *Service) Builtin() bool { return s.cfg.builtinSet() }

// EnvExpander resolves ${VAR} with lookup (the process environment:
// os.LookupEnv, given by the caller so that this package reads none);
// defaults supply values for unset variables (LOOM_URL,
// LOOM_WEBHOOK_SECRET).
func EnvExpander(lookup func(name string) (string, bool), defaults map[string]string) Expander {
	return func(name string) (string, error) {
		if v, ok := lookup(name); ok {
			return v, nil
		}
		if v, ok := defaults[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
}

// initEpoch reads the id prefix that keeps event ids unique across stores,
// or, on the very first start, starts the evaluator cursor at the head
// (triggers do not fire for changes committed before Loom had them) and
// then creates the prefix. A crash in between repeats both harmlessly.
func initEpoch(ctx context.Context, store collections.Store, head int64) (string, error) {
	for {
		doc, err := store.Get(ctx, SystemDB, metaPath)
		if err == nil {
			epoch, _ := doc.Data["epoch"].(string)
			if epoch == "" {
				return "", fmt.Errorf("triggers: %s has no epoch", metaPath)
			}
			return epoch, nil
		}
		if !errors.Is(err, collections.ErrNotFound) {
			return "", fmt.Errorf("triggers: %w", err)
		}
		pos, err := store.Cursor(ctx, cursorName)
		if err != nil {
			return "", fmt.Errorf("triggers: %w", err)
		}
		if pos == 0 && head > 0 {
			_, err := store.Commit(ctx, SystemDB, nil, collections.CommitOptions{
				Cursor: &collections.CursorAdvance{Name: cursorName, From: 0, To: head},
			})
			if err != nil && !errors.Is(err, collections.ErrCursorConflict) {
				return "", fmt.Errorf("triggers: %w", err)
			}
		}
		_, err = store.Commit(ctx, SystemDB, []collections.Write{{
			Type: collections.WriteCreate, Path: metaPath,
			Data: map[string]any{"epoch": randomHex(4)},
		}}, collections.CommitOptions{})
		if err != nil && !errors.Is(err, collections.ErrAlreadyExists) {
			return "", fmt.Errorf("triggers: %w", err)
		}
	}
}

// Reload re-reads the triggers file. A bad file keeps the current set and
// returns the error. The built-in triggers (no file) are kept as they are.
func (s *Service) Reload(ctx context.Context) error {
	if s.Builtin() {
		s.log.Info("triggers reload: no triggers file; the built-in triggers stay in force")
		return nil
	}
	if s.cfg.File == "" {
		return fmt.Errorf("%w: no triggers file configured", ErrConflict)
	}
	list, err := s.cfg.fileTriggers()
	if err == nil {
		var head int64
		if head, err = s.cfg.Store.Head(ctx); err == nil {
			err = s.reg.setFileTriggers(ctx, list, nil, head, false)
		}
	}
	s.reg.setFileErr(err)
	if err != nil {
		s.m.reloads.WithLabelValues("error").Inc()
		s.log.Error("triggers reload failed; keeping the current triggers", "file", s.cfg.File, "err", err)
		return fmt.Errorf("%w: the triggers file was not loaded; the previous triggers stay in force: %v", ErrInvalid, err)
	}
	s.m.reloads.WithLabelValues("ok").Inc()
	s.log.Info("triggers reloaded", "file", s.cfg.File, "count", len(list))
	return nil
}

// Run runs the pipeline until ctx is cancelled, then waits for in-flight
// deliveries to stop.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){s.reg.follow, s.eval.run, s.del.poll, s.reg.flushLoop, s.purgeLoop} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	wg.Wait()
	s.del.disp.wait(s.cfg.DrainTimeout)
	// Pooled connections that will carry nothing more: a server shutting
	// down after the drain (the built-in handlers' own) would otherwise
	// wait up to 5 s for a connection that was dialed but never used.
	s.del.client.CloseIdleConnections()
	s.del.builtinClient.CloseIdleConnections()
	// Counters of the last moments.
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.reg.flushCounts(fctx)
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
