package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/config"
)

// A deprecated section loads and the root logs the warning config returns,
// at the level LOOM_LOG_LEVEL names.
func TestLoadConfig_LogsWarnings(t *testing.T) {
	p := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(p, []byte("[webhooks]\nworkers = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	getenv := func(k string) string { return map[string]string{"LOOM_LOG_LEVEL": "warn"}[k] }
	cfg, logger, err := loadConfig(config.Flags{Config: p}, getenv, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delivery.Workers != 3 {
		t.Errorf("workers=%d, want 3 from [webhooks]", cfg.Delivery.Workers)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "[delivery]") {
		t.Errorf("log=%q, want a warning naming [delivery]", got)
	}
	logger.Info("hidden")
	if strings.Contains(logs.String(), "hidden") {
		t.Error("LOOM_LOG_LEVEL=warn still logs info")
	}
}

// loom serve --engine mongo --mongo-uri reaches the configuration, and a
// node that would generate its own shared secrets is refused with the
// settings to set named.
func TestServeFlags_Mongo(t *testing.T) {
	t.Chdir(t.TempDir())
	f, err := serveFlags([]string{"--engine", "mongo", "--mongo-uri", "mongodb://db1,db2/?replicaSet=rs0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string]string{
		"LOOM_ADMIN_KEY": "k", "LOOM_JWT_SECRET": strings.Repeat("j", 32),
		"LOOM_CURSOR_KEY": strings.Repeat("c", 32), "LOOM_WEBHOOK_SECRET": "whsec_dGVzdA==",
	}
	cfg, _, err := loadConfig(f, func(k string) string { return shared[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine != "mongo" || cfg.Mongo.URI != "mongodb://db1,db2/?replicaSet=rs0" || cfg.Mongo.Database != "loom" {
		t.Errorf("engine=%q mongo=%+v", cfg.Engine, cfg.Mongo)
	}
	delete(shared, "LOOM_JWT_SECRET")
	_, _, err = loadConfig(f, func(k string) string { return shared[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LOOM_JWT_SECRET") || strings.Contains(err.Error(), "LOOM_CURSOR_KEY") {
		t.Errorf("err=%v, want a refusal naming LOOM_JWT_SECRET only", err)
	}
}
