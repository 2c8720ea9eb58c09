package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/internal/config"
)

// serve runs `loom serve`: flags and configuration, then the node app
// wires, announced on stdout, until ctx is done.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := serveFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, logger, err := loadConfig(f, os.Getenv, stderr)
	if err != nil {
		return err
	}
	// Only loom serve tunes the collector: its request path allocates on
	// every request. loom agents mostly waits on the model and on HTTP, and
	// loom bench is a client.
	gc, err := decideGC(cfg.Runtime, os.Getenv, availableMemory(os.DirFS("/")))
	if err != nil {
		return err
	}
	applyGC(logger, gc, os.Getenv)
	a, err := app.New(ctx, cfg, app.Options{Logger: logger, Version: version})
	if err != nil {
		return err
	}
	defer func() {
		if err := a.Close(); err != nil {
			logger.Error("close", "err", err)
		}
	}()
	announce(stdout, a)
	hctx, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go reloadOnHUP(hctx, a.Triggers.Reload, a.ReloadAgentRules)
	return a.Run(ctx)
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
	fset.StringVar(&f.Engine, "engine", "", "storage engine: sqlite (embedded, default) or mongo (several nodes on one replica set; env LOOM_ENGINE)")
	fset.StringVar(&f.MongoURI, "mongo-uri", "", "MongoDB connection string for --engine mongo (env LOOM_MONGO_URI, or [mongo] uri)")
	return f, fset.Parse(args)
}

// announce prints a generated admin key (the only time it is shown) and
// where the server listens.
func announce(stdout io.Writer, a *app.App) {
	cfg := a.Config
	if a.AdminKey != "" {
		fmt.Fprintf(stdout, "Admin API key (shown once, only its hash is kept in %s):\n\n    %s\n\n",
			filepath.Join(cfg.Data, app.AdminKeyFile), a.AdminKey)
	}
	fmt.Fprintf(stdout, "Loom %s listening on http://%s (engine %s, data %s)\n", version, a.Addr, cfg.Engine, cfg.Data)
	if cfg.Console.Enabled {
		// a.URL, not a.Addr: a wildcard listen address ("[::]:8080") is
		// not one a browser opens.
		fmt.Fprintf(stdout, "Console: %s/console/ (sign in with the admin key)\n", a.URL)
	}
	a.Logger.Info("serving", "addr", a.Addr.String(), "engine", cfg.Engine, "data", cfg.Data, "config", cfg.File)
}

// reloadOnHUP runs the reloads on SIGHUP: triggers.json, and the agent
// rule and plugin files (a bad file keeps what is in force; each reload
// logs why). Process signals belong to the binary.
func reloadOnHUP(ctx context.Context, reloads ...func(context.Context) error) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for _, reload := range reloads {
				_ = reload(ctx)
			}
		}
	}
}

// loadConfig loads the configuration and builds the logger it names, which
// then reports what the file should change (a deprecated section).
func loadConfig(flags config.Flags, getenv func(string) string, stderr io.Writer) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(flags, getenv)
	if err != nil {
		return config.Config{}, nil, err
	}
	logger := app.NewLogger(stderr, cfg.LogLevel)
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	return cfg, logger, nil
}
