package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/server"
)

const adminKeyFile = "admin.key"

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("loom serve", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var f config.Flags
	fset.StringVar(&f.Addr, "addr", "", "listen address (env LOOM_ADDR, default "+config.DefaultAddr+")")
	fset.StringVar(&f.Data, "data", "", "data directory (env LOOM_DATA, default "+config.DefaultData+")")
	fset.StringVar(&f.Config, "config", "", "TOML config file (env LOOM_CONFIG, default ./loom.toml when present)")
	fset.StringVar(&f.Triggers, "triggers", "", "triggers file (env LOOM_TRIGGERS, default ./triggers.json when present)")
	fset.StringVar(&f.Engine, "engine", "", "storage engine: sqlite (env LOOM_ENGINE)")
	fset.StringVar(&f.MongoURI, "mongo-uri", "", "MongoDB URI for the mongo engine (env LOOM_MONGO_URI)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(f, os.Getenv)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, os.Getenv("LOOM_LOG_LEVEL"))

	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	adminKey, generated, err := loadAdminKey(cfg)
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

	srv, err := server.New(store, server.Config{
		AdminKey:        adminKey,
		MaxRequestBytes: cfg.Limits.MaxRequestBytes,
		Logger:          logger,
		Registry:        reg,
		Version:         version,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if generated {
		fmt.Fprintf(stdout, "Admin API key (shown once; saved in %s):\n\n    %s\n\n",
			filepath.Join(cfg.Data, adminKeyFile), adminKey)
	}
	fmt.Fprintf(stdout, "Loom %s listening on http://%s (engine %s, data %s)\n", version, ln.Addr(), cfg.Engine, cfg.Data)
	logger.Info("serving", "addr", ln.Addr().String(), "engine", cfg.Engine, "data", cfg.Data, "config", cfg.File)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	logger.Info("shut down cleanly")
	return nil
}

func openStore(ctx context.Context, cfg config.Config, logger *slog.Logger, reg prometheus.Registerer) (collections.Store, error) {
	switch cfg.Engine {
	case "sqlite":
		return sqlite.Open(ctx, sqlite.Config{
			Path:             filepath.Join(cfg.Data, "loom.db"),
			Retention:        cfg.Changes.Retention.Duration,
			MaxDocumentBytes: cfg.Limits.MaxDocumentBytes,
			Indexes:          cfg.Indexes,
			Logger:           logger.With("component", "sqlite"),
			Registerer:       reg,
		})
	}
	return nil, fmt.Errorf("unknown engine %q", cfg.Engine)
}

// loadAdminKey returns the admin API key: LOOM_ADMIN_KEY / [auth] admin_key
// when set, else the key generated on first start. generated is true only on
// that first start, the one time the key is printed.
func loadAdminKey(cfg config.Config) (key string, generated bool, err error) {
	if cfg.Auth.AdminKey != "" {
		return cfg.Auth.AdminKey, false, nil
	}
	path := filepath.Join(cfg.Data, adminKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("admin key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("admin key: %w", err)
	}
	key = "loom_admin_" + base64.RawURLEncoding.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("admin key: %w", err)
	}
	return key, true, nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
