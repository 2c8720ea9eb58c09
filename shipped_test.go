package loom_test

import (
	"testing"

	"github.com/loomdb/loom"
	"github.com/loomdb/loom/triggers"
)

// TestTriggers_Compile: the embedded triggers.json compiles, with the
// built-in agent triggers.
func TestTriggers_Compile(t *testing.T) {
	expand := triggers.EnvExpander(func(string) (string, bool) { return "", false }, map[string]string{"LOOM_URL": "http://127.0.0.1:1", "LOOM_WEBHOOK_SECRET": triggers.NewSecret()})
	list, err := triggers.ParseFile(loom.Triggers(), expand)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"on-user-message", "on-new-task", "on-sub-agent-message", "on-sub-agent-tool", "on-client-tool-result", "on-client-tool-timeout", "on-task-completed", "on-task-waiting", "on-chat-cancel", "on-wait-timeout", "on-chat-idle", "on-chat-closed"}
	if len(list) != len(want) {
		t.Fatalf("%d triggers, want %d", len(list), len(want))
	}
	for i, c := range list {
		if c.Def.ID != want[i] {
			t.Errorf("trigger %d is %q, want %q", i+1, c.Def.ID, want[i])
		}
	}
}
