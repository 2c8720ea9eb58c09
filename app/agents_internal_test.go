package app

import (
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks/loomclient"
	"github.com/loomdb/loom/webhooks/tools"
)

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
		{Name: "pick", ExecutionType: "client", ClientTimeout: 60000},
	}
	want := []tools.Def{
		{Name: "now", ExecutionType: "builtin"},
		{Name: "weather", Description: "d", InputSchema: map[string]any{"type": "object"}, ExecutionType: "http", Visibility: "hidden",
			Execution: &tools.HTTPExecution{URL: "https://x/{{input.city}}", Method: "POST", Headers: map[string]string{"A": "b"}, Body: "{}", Timeout: 5}},
		{Name: "pick", ExecutionType: "client", ClientTimeout: 60000},
	}
	if got := toolDefs(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("defs=%+v, want %+v", got, want)
	}
}

func TestNewAgents_Roles(t *testing.T) {
	docs, err := loomclient.New(loomclient.Config{BaseURL: "http://127.0.0.1:1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agents.ToolsFile = filepath.Join(t.TempDir(), "none.json")
	t.Chdir(t.TempDir())
	log := slog.New(slog.DiscardHandler)
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

	cfg.Agents.Roles = map[string]config.AgentRole{"writer": {SystemPrompt: "You write.", Tools: []string{"current_time"}}}
	if _, err := NewAgents(cfg, docs, AgentOptions{Secret: secret, Logger: log}); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Fatalf("a missing configured tools file: %v", err)
	}
	cfg.Agents.ToolsFile = ""
	if _, err := NewAgents(cfg, docs, AgentOptions{Secret: secret, Logger: log}); err != nil {
		t.Fatalf("a new role: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"writer": {Tools: []string{"current_time"}}}
	if _, err := NewAgents(cfg, docs, AgentOptions{Secret: secret, Logger: log}); err == nil || !strings.Contains(err.Error(), "system_prompt") {
		t.Fatalf("a new role without a prompt: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"researcher": {SystemPrompt: "Be brief."}}
	if _, err := NewAgents(cfg, docs, AgentOptions{Secret: secret, Logger: log}); err != nil {
		t.Fatalf("overriding a built-in prompt: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"researcher": {Tools: []string{"no_such_tool"}}}
	if _, err := NewAgents(cfg, docs, AgentOptions{Secret: secret, Logger: log}); err == nil || !strings.Contains(err.Error(), "no_such_tool") {
		t.Fatalf("an unknown tool: %v", err)
	}
}
