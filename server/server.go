// Package server is Loom's HTTP surface: the REST document API, queries,
// batches and the operational endpoints (health, readiness, metrics).
//
// It talks to storage only through collections.Store, so it runs unchanged on
// every engine. Route groups live in their own files (documents.go, query.go,
// batch.go, ops.go); every error reaches the client through toAPIError
// (errors.go) and every access decision through package access (the
// Service this server builds, see Access).
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/triggers"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultMaxRequestBytes bounds a request body (10 MiB, as the README
	// states under Documents). The whole body is buffered in memory, so this
	// is also the per-request memory cost an attacker can force.
	DefaultMaxRequestBytes = 10 << 20
	// DefaultShutdownTimeout bounds how long Serve waits for in-flight
	// requests after its context is cancelled before cutting connections.
	DefaultShutdownTimeout = 10 * time.Second
	// readHeaderTimeout stops slow-loris clients from holding connections.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request's line and headers (net/http's
	// default is 1 MB): tokens and cookies fit many times over, and what a
	// slow or hostile client can make a connection hold is 16 times less.
	// Larger heads get 431.
	maxHeaderBytes = 64 << 10
	// DefaultReadTimeout bounds how long a request's headers and body may
	// take to arrive: a client that trickles its body is cut off. It ends
	// when the body has been read, so it bounds neither handlers nor
	// streams.
	DefaultReadTimeout = time.Minute
	// DefaultIdleTimeout closes idle keep-alive connections.
	DefaultIdleTimeout = 2 * time.Minute
)

// Config configures a Server.
type Config struct {
	// AdminKey is the admin API key. Callers present it as
	// "Authorization: Bearer <key>" or "X-API-Key: <key>". One of AdminKey
	// and AdminKeySHA256 is required.
	AdminKey string
	// AdminKeySHA256 is the SHA-256 of the admin key, for deployments that
	// keep only the hash (the generated key in the data directory). Used
	// when AdminKey is empty.
	AdminKeySHA256 [32]byte
	// MaxRequestBytes bounds a request body; larger bodies get 413
	// REQUEST_TOO_LARGE. Zero means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// ReadTimeout bounds how long a request's headers and body may take to
	// arrive (zero: DefaultReadTimeout); a body that has not arrived by
	// then is cut (400). Handlers and streams are not bounded by it.
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (zero:
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxBodyBytesInFlight bounds the request body bytes all requests hold
	// at once; a body read beyond it is refused with 503 UNAVAILABLE and
	// Retry-After (zero: DefaultMaxBodyBytesInFlight, or MaxRequestBytes
	// when that is larger; it may not be below MaxRequestBytes).
	MaxBodyBytesInFlight int64
	// ShutdownTimeout bounds the graceful part of Serve's shutdown. Zero
	// means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives request logs (Debug) and internal errors (Error). Nil
	// discards.
	Logger *slog.Logger
	// Registry is where the server registers its collectors and what
	// /metrics serves. Nil means a new registry.
	Registry *prometheus.Registry
	// MetricsRequireKey makes GET /metrics require the admin key or a
	// credential with the "metrics" role (401/403 otherwise). Off: /metrics
	// is public (its labels come from fixed sets either way).
	MetricsRequireKey bool
	// Version is reported in logs.
	Version string
	// CORSOrigins are the browser origins allowed to call the API ("*"
	// allows any). Same-origin requests are always allowed.
	CORSOrigins []string
	// RateLimit is the per-client request rate (requests/second; the
	// caller's uid, or its IP when anonymous). Zero means DefaultRateLimit;
	// negative disables rate limiting. The admin key is never limited.
	RateLimit float64
	// RateBurst is the bucket size; zero means DefaultRateBurst (or
	// RateLimit when that is set).
	RateBurst int
	// SignupRate is the signups per minute allowed from one client address
	// ([auth] signup_rate); zero means DefaultSignupRate, negative disables
	// the limit. SignupBurst is its bucket size (zero: DefaultSignupBurst).
	SignupRate  float64
	SignupBurst int
	// TrustedProxies ([server] trusted_proxies) are the addresses or CIDRs
	// of reverse proxies whose X-Forwarded-For / X-Real-IP name the client
	// (see clientAddr). Empty: the peer address is the client and those
	// headers are ignored.
	TrustedProxies []string
	// Auth authenticates users, OIDC tokens and service keys, and serves
	// /auth/v1. Nil: only the admin key authenticates and /auth/v1 is 404.
	Auth *auth.Service
	// Rules are the security rules; nil means the built-in rules
	// (rules.Default()).
	Rules *rules.Set
	// RulesFile is re-read by POST /admin/v1/rules/reload. "": with nil
	// Rules the reload keeps the built-in rules, else it is unavailable.
	RulesFile string
	// RulesFileOptional (with nil Rules): RulesFile does not exist yet, so
	// the built-in rules are in force until a reload finds the file (the
	// default rules/security.toml, created after start). A reload while it
	// is still absent keeps the built-in rules.
	RulesFileOptional bool
	// Realtime tunes /realtime/ws and /realtime/sse (zero values are the
	// defaults).
	Realtime RealtimeConfig
	// RxDB tunes /replication/rxdb (zero values are the defaults).
	RxDB RxDBConfig
	// Triggers serves the triggers admin API (/admin/v1/triggers,
	// /admin/v1/deliveries); nil: those routes answer 404.
	Triggers *triggers.Service
	// Webhooks serves /webhooks/* (the agent runtime's handlers, which
	// authenticate deliveries by their signature); nil: 404.
	Webhooks http.Handler
	// AgentsAdmin serves the agent runtime's rules admin API under
	// /admin/v1/agents/ (webhooks.Handlers.RulesAdmin) behind admin
	// authentication; nil: 404.
	AgentsAdmin http.Handler
	// CursorKey seals the query cursors handed to clients (at least
	// access.MinCursorKeyBytes; see access/cursor.go). Every node serving
	// the same data must use the same key, or a cursor from one node is
	// refused by another. Nil: a random key per process (cursors do not
	// survive a restart).
	CursorKey []byte
	// SyntrixCompat ([compat] syntrix) answers as Syntrix where Loom's
	// wire format differs, for Syntrix's unchanged clients: error codes
	// renamed (Loom's code in details.code; not on /replication/rxdb), a
	// query answers a bare array with the next cursor in X-Next-Cursor and
	// a missing limit means the maximum, a PUT that creates answers 200,
	// and /auth/v1 bodies may carry unknown fields (docs/syntrix.md, "The
	// compatibility switch"). Off: Loom's formats, exactly.
	SyntrixCompat bool
	// Access is the rules-pinned read/write protocol the server uses. Nil:
	// one built from Rules and CursorKey. The composition root passes the
	// one it shares with the agent runtime's in-process path, so a rules
	// reload reaches both; it then holds the rules and the cursor key, and
	// CursorKey is unused here (Rules and RulesFile still tell the rules
	// reload whether a file or the built-in rules are in force).
	Access *access.Service
	// Console is the web console's built files (console.FS()), served
	// under /console/; it also enables the console session API
	// (/admin/v1/console, which needs Auth too). Nil: both answer 404
	// ([console] enabled = false).
	Console fs.FS
}

// Server is the HTTP surface over one Store.
type Server struct {
	store           collections.Store
	log             *slog.Logger
	adminKeyHash    [32]byte
	maxRequestBytes int64
	readTimeout     time.Duration
	idleTimeout     time.Duration
	bodies          *bodyBudget
	shutdownTimeout time.Duration
	version         string
	registry        *prometheus.Registry
	corsOrigins     []string
	limits          *limiters // nil: no rate limit
	signups         *limiters // per client address; nil: no signup limit
	proxyWarning    sync.Once // logs X-Forwarded-For seen without trusted proxies
	auth            *auth.Service
	access          *access.Service
	rulesFile       string
	// rulesBuiltin: the built-in rules are in force (no file, or an
	// optional file not there yet). Cleared when a reload loads the file.
	rulesBuiltin atomic.Bool
	metrics      *httpMetrics
	metricsAuth  bool
	rt           *realtimeServer
	rxdb         RxDBConfig
	triggers     *triggers.Service
	webhooks     http.Handler
	agentsAdmin  http.Handler
	engine       *gin.Engine
	// console is Config.Console (nil: off).
	console fs.FS
	// trustedProxies is Config.TrustedProxies parsed, for
	// requestIsHTTPS.
	trustedProxies []netip.Prefix
	// syntrix is Config.SyntrixCompat.
	syntrix bool
	// rulesReload is the outcome of the last POST /admin/v1/rules/reload
	// (GET /admin/v1/rules shows it).
	rulesReload lastReload
}

// New builds a Server. It registers the server's metrics on cfg.Registry; it
// starts nothing (see Serve).
func New(store collections.Store, cfg Config) (*Server, error) {
	if store == nil {
		return nil, errors.New("server: nil store")
	}
	keyHash := cfg.AdminKeySHA256
	if cfg.AdminKey != "" {
		keyHash = hashKey(cfg.AdminKey)
	}
	if keyHash == ([32]byte{}) {
		return nil, errors.New("server: an admin key is required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		store:           store,
		log:             cfg.Logger.With("component", "server"),
		adminKeyHash:    keyHash,
		maxRequestBytes: cfg.MaxRequestBytes,
		readTimeout:     cfg.ReadTimeout,
		idleTimeout:     cfg.IdleTimeout,
		bodies:          newBodyBudget(cfg.MaxBodyBytesInFlight, bodyShare(cfg.MaxBodyBytesInFlight, cfg.MaxRequestBytes)),
		shutdownTimeout: cfg.ShutdownTimeout,
		version:         cfg.Version,
		registry:        cfg.Registry,
		corsOrigins:     cfg.CORSOrigins,
		auth:            cfg.Auth,
		rulesFile:       cfg.RulesFile,
		rxdb:            cfg.RxDB,
		triggers:        cfg.Triggers,
		webhooks:        cfg.Webhooks,
		agentsAdmin:     cfg.AgentsAdmin,
		metricsAuth:     cfg.MetricsRequireKey,
		limits:          requestLimiters(cfg),
		signups:         signupLimiters(cfg),
		syntrix:         cfg.SyntrixCompat,
		console:         cfg.Console,
		trustedProxies:  parseProxies(cfg.TrustedProxies),
	}
	s.rulesBuiltin.Store(cfg.Rules == nil && (cfg.RulesFile == "" || cfg.RulesFileOptional))
	s.access = cfg.Access
	if s.access == nil {
		if s.access, err = access.New(access.Config{Store: store, Rules: cfg.Rules, CursorKey: cfg.CursorKey}); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	m, err := newHTTPMetrics(cfg.Registry, store)
	if err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	s.metrics = m
	if err := newBodyMetrics(cfg.Registry, s.bodies); err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	if s.rt, err = newRealtimeServer(s, cfg.Realtime, cfg.Registry); err != nil {
		return nil, fmt.Errorf("server: realtime: %w", err)
	}
	s.engine = s.routes()
	if err := s.trustProxies(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	return s, nil
}

// withDefaults fills in the Default* values of the zero fields, a discard
// logger and a fresh registry, and refuses a body budget that could never
// hold a largest request.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxBodyBytesInFlight <= 0 {
		cfg.MaxBodyBytesInFlight = max(DefaultMaxBodyBytesInFlight, cfg.MaxRequestBytes)
	}
	if cfg.MaxBodyBytesInFlight < cfg.MaxRequestBytes {
		return cfg, fmt.Errorf("server: MaxBodyBytesInFlight (%d) is below MaxRequestBytes (%d): a largest request could never be read", cfg.MaxBodyBytesInFlight, cfg.MaxRequestBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	return cfg, nil
}

// requestLimiters is the per-client request rate limit: the default for 0,
// none (nil) for a negative RateLimit.
func requestLimiters(cfg Config) *limiters {
	switch {
	case cfg.RateLimit == 0:
		return newLimiters(DefaultRateLimit, DefaultRateBurst)
	case cfg.RateLimit > 0:
		return newLimiters(cfg.RateLimit, cfg.RateBurst)
	default:
		return nil
	}
}

// signupLimiters is the per-address signup limit (SignupRate is per
// minute): the default for 0, none (nil) for a negative SignupRate.
func signupLimiters(cfg Config) *limiters {
	switch {
	case cfg.SignupRate == 0:
		return newLimiters(DefaultSignupRate/60.0, DefaultSignupBurst)
	case cfg.SignupRate > 0:
		burst := cfg.SignupBurst
		if burst <= 0 {
			burst = DefaultSignupBurst
		}
		return newLimiters(cfg.SignupRate/60, burst)
	default:
		return nil
	}
}

// Handler returns the server's http.Handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.engine }

// Serve serves HTTP on ln until ctx is cancelled, then shuts down
// gracefully: it stops accepting, lets in-flight requests finish (bounded by
// Config.ShutdownTimeout) and returns nil. It returns an error when serving
// fails, or when in-flight requests had to be cut off at the timeout. Serve
// closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// ReadTimeout bounds the arrival of a request's headers and body only:
	// net/http lifts it once the body has been read to its end (at once
	// for a request without one), so handlers and streams run as long as
	// they need (TestBodies_ReadTimeoutSparesSlowHandlers).
	srv := &http.Server{
		Handler:           s.engine,
		ReadHeaderTimeout: min(readHeaderTimeout, s.readTimeout),
		ReadTimeout:       s.readTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       s.idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// Requests must outlive ctx so that shutdown can let them finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	s.log.Info("serving", "addr", ln.Addr().String(), "version", s.version)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		// Serve failed on its own (never ErrServerClosed: nobody called
		// Shutdown yet).
		return fmt.Errorf("server: serve: %w", err)
	case <-ctx.Done():
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	// Realtime streams never finish on their own: end them first (close
	// frames for WebSockets, which Shutdown does not track).
	s.rt.shutdown(sctx)
	err := srv.Shutdown(sctx)
	<-errc // Serve returns ErrServerClosed as soon as Shutdown starts.
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("server: shutdown: in-flight requests cut off: %w", err)
	}
	s.log.Info("stopped")
	return nil
}
