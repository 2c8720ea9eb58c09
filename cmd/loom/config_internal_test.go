package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/tools"
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

// The engine gets the agent runtime's indexes, the configured ones and the
// trigger outbox's, each once.
func TestStoreIndexes(t *testing.T) {
	own := collections.Index{Collection: "rooms/*/messages", Fields: []string{"sender"}}
	cfg := config.Default()
	cfg.Indexes = []collections.Index{webhooks.Indexes[0], own}
	got := storeIndexes(cfg)
	want := append(append(append([]collections.Index{}, webhooks.Indexes...), own), triggers.Indexes...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("indexes=%v, want %v", got, want)
	}
}

// [[tool]] entries become tool definitions field for field; a field added
// to one type and not the other fails here.
func TestToolDefs(t *testing.T) {
	for _, pair := range [][2]any{{config.Tool{}, tools.Def{}}, {config.ToolExecution{}, tools.HTTPExecution{}}} {
		if a, b := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1]); a.NumField() != b.NumField() {
			t.Fatalf("%v has %d fields, %v %d", a, a.NumField(), b, b.NumField())
		}
	}
	in := []config.Tool{
		{Name: "now", ExecutionType: "builtin"},
		{Name: "weather", Description: "d", InputSchema: map[string]any{"type": "object"}, ExecutionType: "http", Visibility: "hidden",
			Execution: &config.ToolExecution{URL: "https://x/{{input.city}}", Method: "POST", Headers: map[string]string{"A": "b"}, Body: "{}", Timeout: 5}},
	}
	want := []tools.Def{
		{Name: "now", ExecutionType: "builtin"},
		{Name: "weather", Description: "d", InputSchema: map[string]any{"type": "object"}, ExecutionType: "http", Visibility: "hidden",
			Execution: &tools.HTTPExecution{URL: "https://x/{{input.city}}", Method: "POST", Headers: map[string]string{"A": "b"}, Body: "{}", Timeout: 5}},
	}
	if got := toolDefs(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("defs=%+v, want %+v", got, want)
	}
}
