package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// shippedTriggersOneAttempt writes the shipped triggers.json with one attempt
// per delivery, so a failing handler's deliveries go dead at once.
func shippedTriggersOneAttempt(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repoTriggers(t))
	if err != nil {
		t.Fatal(err)
	}
	var defs []map[string]any
	if err := json.Unmarshal(b, &defs); err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		d["retryPolicy"] = map[string]any{"maxAttempts": 1}
	}
	out, _ := json.Marshal(defs)
	path := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// `loom serve` marks the shipped triggers (delivering to its own
// /webhooks/) as the built-in handlers': with the strictest auto-disable
// settings, on-user-message deliveries going dead (the model is down) do
// not switch the agent runtime off.
func TestServe_BuiltinTriggersNeverAutoDisabled(t *testing.T) {
	down := llmtest.NewServer(t)
	down.Match(func(map[string]any) llmtest.Step { return llmtest.Step{Status: 500, Content: "model down"} })
	cfg := agentConfig(t, "disable_after_dead = 1\ndisable_after_dead_origins = 1\n\n[llm]\nbase_url = \""+down.URL+"\"\napi_key = \"k\"\nmodel = \"m\"\n")
	p := startAgentProc(t, "serve", listenRE, []string{"LOOM_ADMIN_KEY=k"},
		"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--config", cfg, "--triggers", shippedTriggersOneAttempt(t))
	token, uid := chatUser(t, p.url)
	sayInChat(t, p.url, token, uid, "What is 6*7?")

	// The trigger's dead count goes up after the streak was counted (and
	// the trigger would have been switched off).
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, tr := request(t, "GET", p.url+"/admin/v1/triggers/on-user-message", "k", nil)
		counts, _ := tr["counts"].(map[string]any)
		if dead, _ := counts["dead"].(float64); code == 200 && dead >= 1 {
			if tr["status"] != "enabled" {
				t.Fatalf("on-user-message after a dead delivery: %v", tr)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery did not go dead: %d %v; deliveries %+v", code, tr, listDeliveries(t, p.url, ""))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
