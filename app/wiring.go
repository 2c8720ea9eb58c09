package app

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/mongo"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/console"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
)

// This file turns the configuration, which only describes, into what the
// packages take: config imports no feature package, so the joins happen
// here.

// openStore opens the configured engine: the one place that picks one.
func openStore(ctx context.Context, cfg config.Config, logger *slog.Logger, reg prometheus.Registerer) (collections.Store, error) {
	switch cfg.Engine {
	case "sqlite":
		return sqlite.Open(ctx, sqlite.Config{
			Path:             filepath.Join(cfg.Data, "loom.db"),
			Retention:        cfg.Changes.Retention.Duration,
			MaxDocumentBytes: cfg.Limits.MaxDocumentBytes,
			Indexes:          StoreIndexes(cfg),
			Logger:           logger.With("component", "sqlite"),
			Registerer:       reg,
		})
	case "mongo":
		// Every node on the database opens it the same way; config.Load
		// has refused a start without the settings the nodes share.
		store, err := mongo.Open(ctx, mongo.Config{
			URI:              cfg.Mongo.URI,
			Database:         cfg.Mongo.Database,
			Retention:        cfg.Changes.Retention.Duration,
			MaxDocumentBytes: cfg.Limits.MaxDocumentBytes,
			Indexes:          StoreIndexes(cfg),
			Logger:           logger.With("component", "mongo"),
			Registerer:       reg,
		})
		if err != nil { // a nil *mongo.Store must not become a non-nil Store
			return nil, err
		}
		logger.Info("engine open", "engine", "mongo", "uri", mongo.RedactURI(cfg.Mongo.URI), "database", cfg.Mongo.Database)
		return store, nil
	}
	return nil, fmt.Errorf("unknown engine %q", cfg.Engine)
}

// StoreIndexes are the engine indexes: the agent runtime's, then those the
// configuration declares, then the trigger outbox's; a duplicate is kept
// once.
func StoreIndexes(cfg config.Config) []collections.Index {
	var out []collections.Index
	seen := map[string]bool{}
	for _, set := range [][]collections.Index{webhooks.Indexes, cfg.Indexes, triggers.Indexes} {
		for _, ix := range set {
			key := ix.Collection + "|" + strings.Join(ix.Fields, ",")
			if !seen[key] {
				seen[key] = true
				out = append(out, ix)
			}
		}
	}
	return out
}

// openAuth starts user authentication. The token signing secret comes from
// [auth] jwt_secret / LOOM_JWT_SECRET, else it is generated once into the
// data directory. bcryptCost 0 is the auth default.
func openAuth(ctx context.Context, cfg config.Config, store collections.Store, bcryptCost int, logger *slog.Logger, reg prometheus.Registerer) (*auth.Service, error) {
	secret := []byte(cfg.Auth.JWTSecret)
	if len(secret) == 0 {
		var err error
		if secret, err = auth.LoadOrCreateSecret(filepath.Join(cfg.Data, jwtSecretFile)); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	svc, err := auth.New(ctx, store, auth.Config{
		DB:         "default",
		Secret:     secret,
		JWKSURL:    cfg.Auth.JWKSURL,
		Issuer:     cfg.Auth.Issuer,
		Audience:   cfg.Auth.Audience,
		BcryptCost: bcryptCost,
		LoginLimit: auth.Limit{
			Failures:        cfg.Auth.LoginFailures,
			Window:          cfg.Auth.LoginWindow.Duration,
			AddressFailures: cfg.Auth.LoginAddressFailures,
			UserFailures:    cfg.Auth.LoginUserFailures,
		},
		MaxConcurrentHashes: cfg.Auth.MaxConcurrentHashes,
		MinPasswordLength:   cfg.Auth.MinPasswordLength,
		Console:             consoleConfig(cfg.Console),
		Registerer:          reg,
		Logger:              logger.With("component", "auth"),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return svc, nil
}

// triggerOptions are what openTriggers takes beyond the configuration.
type triggerOptions struct {
	// envDefaults fill in ${VAR}s the process environment lacks
	// (LOOM_URL, LOOM_WEBHOOK_SECRET).
	envDefaults  map[string]string
	pollInterval time.Duration // 0: the triggers default
	drainTimeout time.Duration // 0: the triggers default
	version      string
	// auth signs the preIssuedToken of triggers with "format": "syntrix"
	// (nil: such triggers are refused).
	auth *auth.Service
}

// openTriggers loads the triggers (a bad file refuses to start; see
// triggersSource) and builds the delivery pipeline with the SSRF guard from
// [delivery] (selfTransport for the built-in handlers' own). ${VAR} in the
// triggers expands from the process environment, opts.envDefaults filling
// in.
func openTriggers(ctx context.Context, cfg config.Config, store collections.Store, opts triggerOptions, logger *slog.Logger, reg prometheus.Registerer) (*triggers.Service, error) {
	guard, err := ssrf.New(cfg.Delivery.AllowHosts, cfg.Delivery.AllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("config [delivery]: %w", err)
	}
	node, err := loadNodeID(cfg.Data)
	if err != nil {
		return nil, err
	}
	// The built-in handlers' triggers are the ones delivering under
	// ${LOOM_URL}/webhooks/ while this server serves the agent runtime.
	expand := triggers.EnvExpander(os.LookupEnv, opts.envDefaults)
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
		PollInterval:     opts.pollInterval,
		DrainTimeout:     opts.drainTimeout,
		Registerer:       reg,
		Logger:           logger,
		Version:          opts.version,
		IssueToken:       triggerTokenIssuer(opts.auth),
	})
	if err != nil {
		return nil, err
	}
	logger.Info("triggers loaded", "file", triggersName(file, shipped), "triggers", svc.Len())
	return svc, nil
}

// triggerTokenIssuer mints the preIssuedToken of Syntrix-format webhooks
// with svc (internal/auth/triggertoken.go); nil without one.
func triggerTokenIssuer(svc *auth.Service) func(triggers.TokenRequest) (string, error) {
	if svc == nil {
		return nil
	}
	return func(r triggers.TokenRequest) (string, error) {
		return svc.IssueTriggerToken(auth.TriggerGrant{
			TriggerID: r.TriggerID,
			Database:  r.Database,
			Scope:     r.Scope,
			Delivery:  r.Delivery,
		}, r.TTL)
	}
}

// serverConfig is the part of server.Config that comes from the
// configuration alone; New adds the objects it opened.
func serverConfig(cfg config.Config) server.Config {
	return server.Config{
		MaxRequestBytes: cfg.Limits.MaxRequestBytes,
		CORSOrigins:     cfg.Security.CORSOrigins,
		RateLimit:       cfg.Limits.RateLimit,
		RateBurst:       cfg.Limits.RateBurst,
		SignupRate:      cfg.Auth.SignupRate,
		SignupBurst:     cfg.Auth.SignupBurst,
		TrustedProxies:  cfg.Server.TrustedProxies,
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
		SyntrixCompat:        cfg.Compat.Syntrix,
		Console:              consoleFS(cfg.Console),
	}
}

// consoleFS is the embedded console, or nil when [console] enabled is off
// (the server then answers 404 on /console and /admin/v1/console).
func consoleFS(c config.Console) fs.FS {
	if !c.Enabled {
		return nil
	}
	return console.FS()
}

// consoleConfig is the console session lifetimes in force.
func consoleConfig(c config.Console) auth.ConsoleConfig {
	session, idle, token := c.TTLs()
	return auth.ConsoleConfig{SessionTTL: session, IdleTTL: idle, TokenTTL: token}
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
