package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks/loomclient"
)

const adminKeyFile = "admin.key"

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := serveFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, logger, err := loadConfig(f, os.Getenv, stderr)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	admin, err := loadAdminKey(cfg)
	if err != nil {
		return err
	}

	ruleSet, rulesFile, err := loadRules(cfg, logger)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	store, err := openStore(ctx, cfg, logger, reg)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			logger.Error("close store", "err", err)
		}
	}()

	authSvc, err := openAuth(ctx, cfg, store, logger, reg)
	if err != nil {
		return err
	}
	defer authSvc.Close()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	self := selfURL(ln.Addr())
	guard, err := ssrf.New(cfg.Delivery.AllowHosts, cfg.Delivery.AllowCIDRs)
	if err != nil {
		return fmt.Errorf("config [delivery]: %w", err)
	}
	whSecret, err := loadWebhookSecret(cfg)
	if err != nil {
		return err
	}
	trig, err := openTriggers(ctx, cfg, store, guard, map[string]string{"LOOM_URL": self, "LOOM_WEBHOOK_SECRET": whSecret}, logger, reg)
	if err != nil {
		return err
	}
	agentHandlers, err := openAgentHandlers(ctx, cfg, authSvc, self, whSecret, logger, reg)
	if err != nil {
		return err
	}

	cursorKey, err := loadCursorKey(cfg)
	if err != nil {
		return err
	}
	scfg := serverConfig(cfg)
	scfg.AdminKeySHA256 = admin.hash
	scfg.Auth = authSvc
	scfg.Rules = ruleSet
	scfg.RulesFile = rulesFile
	scfg.Logger = logger
	scfg.Registry = reg
	scfg.Triggers = trig
	scfg.Webhooks = agentHandlers
	scfg.CursorKey = cursorKey
	srv, err := server.New(store, scfg)
	if err != nil {
		return err
	}
	announce(stdout, logger, cfg, admin, ln.Addr())
	return runServer(ctx, srv, trig, ln, logger)
}

// serveFlags parses the flags of `loom serve`.
func serveFlags(args []string, stderr io.Writer) (config.Flags, error) {
	fset := flag.NewFlagSet("loom serve", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var f config.Flags
	fset.StringVar(&f.Addr, "addr", "", "listen address (env LOOM_ADDR, default "+config.DefaultAddr+")")
	fset.StringVar(&f.Data, "data", "", "data directory (env LOOM_DATA, default "+config.DefaultData+")")
	fset.StringVar(&f.Config, "config", "", "TOML config file (env LOOM_CONFIG, default ./loom.toml when present)")
	fset.StringVar(&f.Triggers, "triggers", "", "triggers file (env LOOM_TRIGGERS, default ./triggers.json when present, else the built-in agent triggers)")
	fset.StringVar(&f.Engine, "engine", "", "storage engine: sqlite (env LOOM_ENGINE)")
	return f, fset.Parse(args)
}

// openAgentHandlers builds the built-in agent handlers when [agents]
// enables them (nil otherwise). They reach this server at self with a
// fresh service key.
func openAgentHandlers(ctx context.Context, cfg config.Config, authSvc *auth.Service, self, whSecret string, logger *slog.Logger, reg prometheus.Registerer) (http.Handler, error) {
	if !agentsEnabled(cfg) {
		return nil, nil
	}
	key, err := agentsKey(ctx, authSvc)
	if err != nil {
		return nil, err
	}
	docs, err := loomclient.New(loomclient.Config{BaseURL: self, APIKey: key})
	if err != nil {
		return nil, err
	}
	h, err := buildAgents(cfg, docs, whSecret, logger, reg)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// serverConfig is the part of server.Config that comes from the
// configuration alone; serve adds the objects it opened.
func serverConfig(cfg config.Config) server.Config {
	return server.Config{
		MaxRequestBytes: cfg.Limits.MaxRequestBytes,
		CORSOrigins:     cfg.Security.CORSOrigins,
		RateLimit:       cfg.Limits.RateLimit,
		RateBurst:       cfg.Limits.RateBurst,
		SignupRate:      cfg.Auth.SignupRate,
		SignupBurst:     cfg.Auth.SignupBurst,
		TrustedProxies:  cfg.Server.TrustedProxies,
		Version:         version,
		RxDB:            server.RxDBConfig{MinSchemaVersion: cfg.RxDB.MinSchemaVersion},
		Realtime: server.RealtimeConfig{
			MaxStreamsPerIP:         cfg.Limits.MaxStreamsPerIP,
			MaxSubscriptionsPerUser: cfg.Limits.MaxSubscriptionsPerUser,
			MaxSubscriptionsTotal:   cfg.Limits.MaxSubscriptions,
		},
		MetricsRequireKey:    cfg.Metrics.RequireKey,
		MaxBodyBytesInFlight: cfg.Limits.MaxBodyBytesInFlight,
		ReadTimeout:          cfg.Limits.ReadTimeout.Duration,
		IdleTimeout:          cfg.Limits.IdleTimeout.Duration,
	}
}

// announce prints a generated admin key (the only time it is shown) and
// where the server listens.
func announce(stdout io.Writer, logger *slog.Logger, cfg config.Config, admin adminKey, addr net.Addr) {
	if admin.generated != "" {
		fmt.Fprintf(stdout, "Admin API key (shown once, only its hash is kept in %s):\n\n    %s\n\n",
			filepath.Join(cfg.Data, adminKeyFile), admin.generated)
	}
	fmt.Fprintf(stdout, "Loom %s listening on http://%s (engine %s, data %s)\n", version, addr, cfg.Engine, cfg.Data)
	logger.Info("serving", "addr", addr.String(), "engine", cfg.Engine, "data", cfg.Data, "config", cfg.File)
}

// runServer runs the trigger pipeline and the HTTP server on ln until ctx
// is done or the server fails, and shuts both down in order.
//
// At shutdown the trigger pipeline drains first — deliveries in flight
// finish, the built-in handlers among them, which need the HTTP server —
// then the HTTP server shuts down. Changes committed after the drain are
// evaluated at the next start (the cursor is durable).
func runServer(ctx context.Context, srv *server.Server, trig *triggers.Service, ln net.Listener, logger *slog.Logger) error {
	tctx, stopTriggers := context.WithCancel(context.WithoutCancel(ctx))
	tdone := make(chan struct{})
	go func() {
		defer close(tdone)
		_ = trig.Run(tctx)
	}()
	go reloadOnHUP(tctx, trig)
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
	serr := srv.Serve(sctx, ln)
	stopServer()
	stopTriggers()
	<-tdone
	if serr != nil {
		return serr
	}
	logger.Info("shut down cleanly")
	return nil
}

// openTriggers loads the triggers (a bad file refuses to start; see
// triggersSource) and builds the delivery pipeline with the SSRF guard from
// [delivery] (selfTransport for the built-in handlers' own). ${VAR} in the
// triggers expands from the process environment, envDefaults filling in.
func openTriggers(ctx context.Context, cfg config.Config, store collections.Store, guard *ssrf.Guard, envDefaults map[string]string, logger *slog.Logger, reg prometheus.Registerer) (*triggers.Service, error) {
	node, err := loadNodeID(cfg.Data)
	if err != nil {
		return nil, err
	}
	// The built-in handlers' triggers are the ones delivering under
	// ${LOOM_URL}/webhooks/ while this server serves the agent runtime.
	expand := triggers.EnvExpander(os.LookupEnv, envDefaults)
	builtinURL := ""
	var self http.RoundTripper
	if agentsEnabled(cfg) {
		base, err := expand("LOOM_URL")
		if err != nil {
			return nil, fmt.Errorf("LOOM_URL: %w", err)
		}
		builtinURL = base + "/webhooks/"
		if self, err = selfTransport(base); err != nil {
			return nil, err
		}
	}
	file, shipped := triggersSource(cfg)
	svc, err := triggers.New(ctx, triggers.Config{
		Store:            store,
		File:             file,
		Builtin:          shipped,
		Expand:           expand,
		Transport:        guard.Transport(),
		BuiltinTransport: self,
		NodeID:           node,
		Workers:          cfg.Delivery.Workers,
		DisableAfterDead: cfg.Delivery.DisableAfterDead,
		DisableOrigins:   cfg.Delivery.DisableAfterDeadOrigins,
		BuiltinURL:       builtinURL,
		Retention:        cfg.Delivery.Retention.Duration,
		Registerer:       reg,
		Logger:           logger,
		Version:          version,
	})
	if err != nil {
		return nil, err
	}
	logger.Info("triggers loaded", "file", triggersName(file, shipped), "triggers", svc.Len())
	return svc, nil
}

// selfURL is the server's own base URL (LOOM_URL's default): a wildcard
// listen address is reached on IPv4 loopback.
func selfURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		// ":8080" listens on both stacks; 127.0.0.1 is what the shipped
		// [delivery] allow list names.
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// reloadOnHUP re-reads triggers.json on SIGHUP (a bad file keeps the
// current triggers; Reload logs why).
func reloadOnHUP(ctx context.Context, trig *triggers.Service) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = trig.Reload(ctx)
		}
	}
}

// loadNodeID returns this node's id for delivery leases, kept in the data
// directory so a restarted node takes its own leases back at once.
func loadNodeID(dir string) (string, error) {
	id, err := loadOrCreateText(filepath.Join(dir, "node.id"), func() string {
		raw := make([]byte, 8)
		rand.Read(raw) // never fails (crypto/rand crashes the program instead)
		return "node-" + hex.EncodeToString(raw)
	})
	if err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return id, nil
}

// loadOrCreateText returns the trimmed text of the file at path, or, when
// the file is absent or blank, a new value from gen written there first
// (mode 0600). It keeps what the data directory must remember across
// restarts as text: the node id and the webhook secret. (Binary keys use
// auth.LoadOrCreateSecret.)
func loadOrCreateText(path string, gen func() string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	s := gen()
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", err
	}
	return s, nil
}

func openStore(ctx context.Context, cfg config.Config, logger *slog.Logger, reg prometheus.Registerer) (collections.Store, error) {
	switch cfg.Engine {
	case "sqlite":
		return sqlite.Open(ctx, sqlite.Config{
			Path:             filepath.Join(cfg.Data, "loom.db"),
			Retention:        cfg.Changes.Retention.Duration,
			MaxDocumentBytes: cfg.Limits.MaxDocumentBytes,
			Indexes:          storeIndexes(cfg),
			Logger:           logger.With("component", "sqlite"),
			Registerer:       reg,
		})
	}
	return nil, fmt.Errorf("unknown engine %q", cfg.Engine)
}

// openAuth starts user authentication. The token signing secret comes from
// [auth] jwt_secret / LOOM_JWT_SECRET, else it is generated once into the
// data directory.
func openAuth(ctx context.Context, cfg config.Config, store collections.Store, logger *slog.Logger, reg prometheus.Registerer) (*auth.Service, error) {
	secret := []byte(cfg.Auth.JWTSecret)
	if len(secret) == 0 {
		var err error
		if secret, err = auth.LoadOrCreateSecret(filepath.Join(cfg.Data, jwtSecretFile)); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	svc, err := auth.New(ctx, store, auth.Config{
		DB:       "default",
		Secret:   secret,
		JWKSURL:  cfg.Auth.JWKSURL,
		Issuer:   cfg.Auth.Issuer,
		Audience: cfg.Auth.Audience,
		LoginLimit: auth.Limit{
			Failures:        cfg.Auth.LoginFailures,
			Window:          cfg.Auth.LoginWindow.Duration,
			AddressFailures: cfg.Auth.LoginAddressFailures,
			UserFailures:    cfg.Auth.LoginUserFailures,
		},
		MaxConcurrentHashes: cfg.Auth.MaxConcurrentHashes,
		Registerer:          reg,
		Logger:              logger.With("component", "auth"),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return svc, nil
}

const jwtSecretFile = "jwt.secret"

// loadCursorKey returns the key that seals query cursors: [security]
// cursor_key / LOOM_CURSOR_KEY, else one generated once into the data
// directory (so cursors survive a restart).
func loadCursorKey(cfg config.Config) ([]byte, error) {
	if cfg.Security.CursorKey != "" {
		return []byte(cfg.Security.CursorKey), nil
	}
	key, err := auth.LoadOrCreateSecret(filepath.Join(cfg.Data, cursorKeyFile))
	if err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	return key, nil
}

const cursorKeyFile = "cursor.key"

// adminKey is the admin credential as the server needs it.
type adminKey struct {
	hash      [32]byte
	generated string // the new key, only on the first start
}

// loadAdminKey returns the admin API key: LOOM_ADMIN_KEY / [auth] admin_key
// when set, else the key generated on first start. Only the key's SHA-256 is
// written to the data directory (keys are never stored in clear), so the
// key is printed once and cannot be read back; deleting the file makes the
// next start generate a new one.
func loadAdminKey(cfg config.Config) (adminKey, error) {
	if cfg.Auth.AdminKey != "" {
		return adminKey{hash: sha256.Sum256([]byte(cfg.Auth.AdminKey))}, nil
	}
	path := filepath.Join(cfg.Data, adminKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		return parseAdminKeyFile(path, b)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	key := "loom_admin_" + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(key))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	_, werr := fmt.Fprintf(f, "%s%s\n", adminKeyHashPrefix, hex.EncodeToString(sum[:]))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	return adminKey{hash: sum, generated: key}, nil
}

const adminKeyHashPrefix = "sha256:"

func parseAdminKeyFile(path string, b []byte) (adminKey, error) {
	line := strings.TrimSpace(string(b))
	hexSum, ok := strings.CutPrefix(line, adminKeyHashPrefix)
	raw, err := hex.DecodeString(hexSum)
	if !ok || err != nil || len(raw) != sha256.Size {
		return adminKey{}, fmt.Errorf("admin key: %s is not a %s<hex> key hash; delete it to generate a new key", path, adminKeyHashPrefix)
	}
	var k adminKey
	copy(k.hash[:], raw)
	return k, nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
