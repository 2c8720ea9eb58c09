package main

import (
	"bytes"
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
