// Package app is Loom's composition root: it turns a configuration into one
// running node — the engine, auth, the security rules, the trigger service,
// the agent runtime's handlers and the HTTP server — and owns the order in
// which they start and stop. loom serve, loom bench's embedded server and
// the tests that need a whole node build it the same way, through New.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/llm"
)

// Options are what a caller sets beyond the configuration: tests and
// benchmarks.
type Options struct {
	// Listener is where the server serves (nil: listen on cfg.Addr). The
	// server closes it when Run returns; Close closes it only if New
	// opened it.
	Listener net.Listener
	// Store is a store to share (nil: open cfg.Engine in cfg.Data, and
	// close it in Close). A shared store is never closed by the App.
	Store collections.Store
	// Model replaces the model [llm] configures (tests pass a scripted
	// fake).
	Model llm.Model
	// TriggerPollInterval is how often delivery looks for due retries and
	// expired leases (0: the triggers default).
	TriggerPollInterval time.Duration
	// BcryptCost is the password hashing cost (0: the auth default; tests
	// use bcrypt.MinCost).
	BcryptCost int
	// DeliveryDrainTimeout bounds how long Run's shutdown lets deliveries
	// in flight finish (0: the triggers default); ShutdownTimeout bounds
	// the HTTP server's graceful shutdown after that (0: the server
	// default). Tests that restart nodes shorten them.
	DeliveryDrainTimeout time.Duration
	ShutdownTimeout      time.Duration
	// Logger receives every component's logs (nil: a text logger on stderr
	// at cfg.LogLevel).
	Logger *slog.Logger
	// Version is what the server logs and the trigger deliveries report.
	Version string
}

// App is one Loom node wired from a Config. Fields are read-only after New.
type App struct {
	Config   config.Config
	Store    collections.Store
	Auth     *auth.Service
	Access   *access.Service // shared by the server and the agent runtime
	Triggers *triggers.Service
	Server   *server.Server
	Agents   *webhooks.Handlers // nil when [agents] is off
	Registry *prometheus.Registry
	Logger   *slog.Logger
	URL      string   // the server's own base URL (LOOM_URL default)
	Addr     net.Addr // where it listens
	// AdminKey is the admin key generated on this first start ("" on any
	// other start, or when the configuration sets one): only its hash is
	// kept, so this is the one chance to show it.
	AdminKey string

	settings  *settingsRules // checks users' agent settings when the runtime runs elsewhere
	ln        net.Listener
	ownsLn    bool
	ownsStore bool
	closeOnce sync.Once
	closeErr  error
}

// New opens everything a node needs, in dependency order, and starts
// nothing (see Run). On error it closes what it opened.
func New(ctx context.Context, cfg config.Config, opts Options) (_ *App, err error) {
	a := &App{Config: cfg, Logger: opts.Logger, Registry: prometheus.NewRegistry()}
	if a.Logger == nil {
		a.Logger = NewLogger(os.Stderr, cfg.LogLevel)
	}
	defer func() {
		if err != nil {
			if cerr := a.Close(); cerr != nil {
				a.Logger.Error("close after a failed start", "err", cerr)
			}
		}
	}()
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	admin, err := loadAdminKey(cfg)
	if err != nil {
		return nil, err
	}
	a.AdminKey = admin.generated
	ruleSet, rulesFile, rulesOptional, err := loadRules(cfg, a.Logger)
	if err != nil {
		return nil, err
	}
	if err := a.openStore(ctx, opts.Store); err != nil {
		return nil, err
	}
	if a.Auth, err = openAuth(ctx, cfg, a.Store, opts.BcryptCost, a.Logger, a.Registry); err != nil {
		return nil, err
	}
	if err := a.listen(opts.Listener); err != nil {
		return nil, err
	}
	whSecret, err := loadWebhookSecret(cfg)
	if err != nil {
		return nil, err
	}
	if a.Triggers, err = openTriggers(ctx, cfg, a.Store, triggerOptions{
		envDefaults:  map[string]string{"LOOM_URL": a.URL, "LOOM_WEBHOOK_SECRET": whSecret},
		pollInterval: opts.TriggerPollInterval,
		drainTimeout: opts.DeliveryDrainTimeout,
		version:      opts.Version,
		auth:         a.Auth,
	}, a.Logger, a.Registry); err != nil {
		return nil, err
	}
	cursorKey, err := loadCursorKey(cfg)
	if err != nil {
		return nil, err
	}
	if a.settings, err = openSettingsRules(cfg, a.Logger); err != nil {
		return nil, err
	}
	if a.Access, err = access.New(access.Config{Store: a.Store, Rules: ruleSet, CursorKey: cursorKey, WriteCheck: a.checkWrite}); err != nil {
		return nil, err
	}
	if a.Agents, err = openAgents(ctx, cfg, a.Auth, a.Access, AgentOptions{
		Secret: whSecret, Model: opts.Model, Logger: a.Logger, Registerer: a.Registry,
	}); err != nil {
		return nil, err
	}
	scfg := serverConfig(cfg)
	scfg.Version = opts.Version
	scfg.ShutdownTimeout = opts.ShutdownTimeout
	scfg.AdminKeySHA256 = admin.hash
	scfg.Auth = a.Auth
	scfg.Rules = ruleSet
	scfg.RulesFile = rulesFile
	scfg.RulesFileOptional = rulesOptional
	scfg.Logger = a.Logger
	scfg.Registry = a.Registry
	scfg.Triggers = a.Triggers
	if a.Agents != nil { // a nil *Handlers in the interface would not be nil
		scfg.Webhooks = a.Agents
		scfg.AgentsAdmin = a.Agents.RulesAdmin()
	}
	scfg.CursorKey = cursorKey
	scfg.Access = a.Access
	if a.Server, err = server.New(a.Store, scfg); err != nil {
		return nil, err
	}
	return a, nil
}

// openStore shares store, or opens the configured engine and owns it.
func (a *App) openStore(ctx context.Context, store collections.Store) error {
	if store != nil {
		a.Store = store
		return nil
	}
	store, err := openStore(ctx, a.Config, a.Logger, a.Registry)
	if err != nil {
		return err
	}
	a.Store, a.ownsStore = store, true
	return nil
}

// listen takes ln, or listens on the configured address, and derives the
// server's own URL from where it listens.
func (a *App) listen(ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", a.Config.Addr); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		a.ownsLn = true
	}
	a.ln, a.Addr, a.URL = ln, ln.Addr(), selfURL(ln.Addr())
	return nil
}

// Run runs the trigger pipeline and the HTTP server until ctx is done or
// the server fails, and shuts both down in the one order. Call it once,
// and Close after it returns.
//
// At shutdown the trigger pipeline drains first — deliveries in flight
// finish, the built-in handlers among them, which need the HTTP server —
// then the HTTP server shuts down. Changes committed after the drain are
// evaluated at the next start (the cursor is durable).
func (a *App) Run(ctx context.Context) error {
	tctx, stopTriggers := context.WithCancel(context.WithoutCancel(ctx))
	tdone := make(chan struct{})
	go func() {
		defer close(tdone)
		_ = a.Triggers.Run(tctx)
	}()
	sctx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			stopTriggers()
			<-tdone
		case <-sctx.Done():
		}
		stopServer()
	}()
	serr := a.Server.Serve(sctx, a.ln)
	stopServer()
	stopTriggers()
	<-tdone
	if serr != nil {
		return serr
	}
	a.Logger.Info("shut down cleanly")
	return nil
}

// Close releases what New opened, the reverse of opening: the listener if
// New opened it, the auth service, and the store unless it was shared. It
// is idempotent.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		var errs []error
		if a.ownsLn {
			if err := a.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, fmt.Errorf("close listener: %w", err))
			}
		}
		if a.Auth != nil {
			a.Auth.Close()
		}
		if a.ownsStore {
			if err := a.Store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close store: %w", err))
			}
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

// NewLogger is the text logger a node logs to: level names LOOM_LOG_LEVEL's
// values (debug, info, warn, error); anything else is info.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
