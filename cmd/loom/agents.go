package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/loomclient"
)

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
	h, err := app.NewAgents(cfg, docs, app.AgentOptions{Secret: cfg.WebhookSecret, Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", h)
	// The rules admin API, for the remote Loom's admins only.
	mux.Handle(webhooks.RulesAdminPrefix+"/", newRemoteAdmin(remote.URL).wrap(h.RulesAdmin()))
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "Loom agents %s serving http://%s/webhooks/* (and the rules admin API) for %s\n", version, ln.Addr(), remote.URL)
	hctx, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go reloadOnHUP(hctx, h.ReloadRules)
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
