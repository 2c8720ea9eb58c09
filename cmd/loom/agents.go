package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/loomclient"
	"github.com/loomdb/loom/webhooks/tools"
)

const (
	webhookSecretFile = "webhook.secret"
	agentsKeyName     = "loom-agents"
	defaultToolsFile  = "./tools.json"
)

// agentsEnabled reports whether loom serve mounts the built-in handlers.
func agentsEnabled(cfg config.Config) bool {
	return cfg.Agents.Enabled == nil || *cfg.Agents.Enabled
}

// buildAgents builds the agent runtime's handlers over docs (Loom's HTTP
// API with a service key). The tools' HTTP goes through its own SSRF guard
// ([agents] allow_hosts / allow_cidrs, default none): the model chooses
// those URLs, so the loopback that [delivery] allows for the built-in
// handlers must not be open to it.
func buildAgents(cfg config.Config, docs webhooks.Docs, secret string, logger *slog.Logger, metrics prometheus.Registerer) (*webhooks.Handlers, error) {
	guard, err := ssrf.New(cfg.Agents.AllowHosts, cfg.Agents.AllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("config [agents]: %w", err)
	}
	transport := guard.Transport()
	model, err := llm.New(llm.Config{
		BaseURL: cfg.LLM.BaseURL,
		APIKey:  cfg.LLM.APIKey,
		Model:   cfg.LLM.Model,
		Timeout: cfg.LLM.Timeout.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("config [llm]: %w", err)
	}
	defs, err := loadTools(cfg)
	if err != nil {
		return nil, err
	}
	reg, err := tools.New(defs, tools.Deps{Query: docs.Query, Transport: transport})
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	if model.Name() == "offline" {
		logger.Warn("no [llm] base_url configured: the agent runtime uses the offline model (deterministic, labelled \"[offline model]\")")
	}
	roles := webhooks.DefaultRoles()
	for name, r := range cfg.Agents.Roles {
		role := roles[name] // an override keeps what it does not set
		if r.SystemPrompt != "" {
			role.SystemPrompt = r.SystemPrompt
		}
		if r.Tools != nil {
			role.Tools = r.Tools
		}
		if role.SystemPrompt == "" {
			return nil, fmt.Errorf("config [agents.roles.%s]: system_prompt is required for a new role", name)
		}
		roles[name] = role
	}
	return webhooks.New(webhooks.Config{
		Docs:               docs,
		Model:              model,
		Tools:              reg,
		Roles:              roles,
		Secret:             secret,
		Registerer:         metrics,
		MaxIterations:      cfg.Agents.MaxIterations,
		TokenBudget:        cfg.Agents.TokenBudget,
		UserTokensPerDay:   cfg.Agents.UserTokensPerDay,
		UserConcurrentRuns: cfg.Agents.UserConcurrentRuns,
		// A delivery carries an outbox row's event: a document, its previous
		// state and the changed field names of both — what the engine lets
		// a system document hold, so no event the evaluator could store is
		// refused by its handler on every attempt.
		MaxBody: sqlite.SystemDocumentFactor*int64(cfg.Limits.MaxDocumentBytes) + sqlite.SystemDocumentSlack,
		Logger:  logger,
	})
}

// loadTools reads the tools file (configured, or ./tools.json when present)
// and appends the [[tool]] entries of the config.
func loadTools(cfg config.Config) ([]tools.Def, error) {
	file, explicit := cfg.Agents.ToolsFile, true
	if file == "" {
		file, explicit = defaultToolsFile, false
	}
	defs, err := tools.LoadFile(file)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			defs = nil
		} else {
			return nil, err
		}
	}
	return append(defs, toolDefs(cfg.Tools)...), nil
}

// loadWebhookSecret returns LOOM_WEBHOOK_SECRET, or the secret kept in the
// data directory (generated on first start). It signs the built-in
// triggers' deliveries and the handlers verify it.
func loadWebhookSecret(cfg config.Config) (string, error) {
	if cfg.WebhookSecret != "" {
		return cfg.WebhookSecret, nil
	}
	s, err := loadOrCreateText(filepath.Join(cfg.Data, webhookSecretFile), triggers.NewSecret)
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return s, nil
}

// agentsKey issues a fresh service key for the built-in handlers (the
// previous one is revoked): only its hash is stored, so each start makes a
// new one.
func agentsKey(ctx context.Context, a *auth.Service) (string, error) {
	key, err := a.CreateServiceKey(ctx, agentsKeyName, []string{"service"})
	if errors.Is(err, auth.ErrServiceKeyExists) {
		if err := a.RevokeServiceKey(ctx, agentsKeyName); err != nil {
			return "", err
		}
		key, err = a.CreateServiceKey(ctx, agentsKeyName, []string{"service"})
	}
	if err != nil {
		return "", fmt.Errorf("agents service key: %w", err)
	}
	return key, nil
}

// agents runs the handlers alone against a remote Loom: `loom agents
// --loom-url URL --api-key KEY`. The remote server's triggers must point
// at this process and sign with the same secret.
func agents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("loom agents", flag.ContinueOnError)
	fset.SetOutput(stderr)
	addr := fset.String("addr", "127.0.0.1:8081", "listen address for /webhooks/*")
	var f config.Flags
	fset.StringVar(&f.LoomURL, "loom-url", "", "Loom base URL (env LOOM_URL)")
	fset.StringVar(&f.APIKey, "api-key", "", "service key with the service role (env LOOM_API_KEY)")
	fset.StringVar(&f.WebhookSecret, "secret", "", "Standard Webhooks secret of the triggers (env LOOM_WEBHOOK_SECRET)")
	fset.StringVar(&f.Config, "config", "", "TOML config for [llm], [agents] and [[tool]] (env LOOM_CONFIG, default ./loom.toml when present)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	cfg, logger, err := loadConfig(f, os.Getenv, stderr)
	if err != nil {
		return err
	}
	remote := cfg.Remote
	if remote.URL == "" || remote.APIKey == "" || cfg.WebhookSecret == "" {
		return errors.New("loom agents needs --loom-url, --api-key and --secret (or LOOM_URL, LOOM_API_KEY, LOOM_WEBHOOK_SECRET)")
	}
	docs, err := loomclient.New(loomclient.Config{BaseURL: remote.URL, APIKey: remote.APIKey})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	h, err := buildAgents(cfg, docs, cfg.WebhookSecret, logger, reg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", h)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "Loom agents %s serving http://%s/webhooks/* for %s\n", version, ln.Addr(), remote.URL)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
