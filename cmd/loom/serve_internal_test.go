package main

import (
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks/loomclient"
)

func TestSelfURL(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, "http://127.0.0.1:80"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1}, "http://[::1]:1"},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9}, "http://10.1.2.3:9"},
	} {
		if got := selfURL(tt.addr); got != tt.want {
			t.Errorf("selfURL(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestBuildAgentsRoles(t *testing.T) {
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
	if _, err := buildAgents(cfg, docs, secret, log, nil); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Fatalf("a missing configured tools file: %v", err)
	}
	cfg.Agents.ToolsFile = ""
	if _, err := buildAgents(cfg, docs, secret, log, nil); err != nil {
		t.Fatalf("a new role: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"writer": {Tools: []string{"current_time"}}}
	if _, err := buildAgents(cfg, docs, secret, log, nil); err == nil || !strings.Contains(err.Error(), "system_prompt") {
		t.Fatalf("a new role without a prompt: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"researcher": {SystemPrompt: "Be brief."}}
	if _, err := buildAgents(cfg, docs, secret, log, nil); err != nil {
		t.Fatalf("overriding a built-in prompt: %v", err)
	}
	cfg.Agents.Roles = map[string]config.AgentRole{"researcher": {Tools: []string{"no_such_tool"}}}
	if _, err := buildAgents(cfg, docs, secret, log, nil); err == nil || !strings.Contains(err.Error(), "no_such_tool") {
		t.Fatalf("an unknown tool: %v", err)
	}
}
