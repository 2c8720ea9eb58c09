package config_test

import (
	"testing"
	"time"

	"github.com/loomdb/loom/internal/config"
)

// [agents] chat_history, chat_suspend_after and chat_cleanup_after: absent
// keys stay unset (the runtime's defaults); chat_cleanup_after may be zero
// or negative (never), the others may not.
func TestLoad_ChatMemory(t *testing.T) {
	cfg, err := config.Load(config.Flags{Config: writeFile(t, "[agents]\n")}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Agents; a.ChatHistory != 0 || a.ChatSuspendAfter.Duration != 0 || a.ChatCleanupAfter.Set {
		t.Fatalf("defaults %+v", a)
	}
	for _, tt := range []struct {
		cleanup string
		want    time.Duration
	}{{`"720h"`, 720 * time.Hour}, {`"0s"`, 0}, {`"0"`, 0}, {`"-1h"`, -time.Hour}} {
		cfg, err := config.Load(config.Flags{Config: writeFile(t, "[agents]\nchat_history = 4\nchat_suspend_after = \"1s\"\nchat_cleanup_after = "+tt.cleanup+"\n")}, env(nil))
		if err != nil {
			t.Fatalf("%s: %v", tt.cleanup, err)
		}
		a := cfg.Agents
		if a.ChatHistory != 4 || a.ChatSuspendAfter.Duration != time.Second || !a.ChatCleanupAfter.Set || a.ChatCleanupAfter.Duration != tt.want {
			t.Fatalf("%s: %+v", tt.cleanup, a)
		}
	}
	for _, bad := range []string{"chat_history = -1", "chat_history = 501", `chat_suspend_after = "0s"`, `chat_suspend_after = "-1h"`, `chat_cleanup_after = "soon"`, `chat_suspend_after = "8761h"`, `chat_cleanup_after = "9000h"`} {
		if _, err := config.Load(config.Flags{Config: writeFile(t, "[agents]\n"+bad+"\n")}, env(nil)); err == nil {
			t.Errorf("%s: loaded", bad)
		}
	}
}
