package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/internal/config"
)

func TestConsole_DefaultsAndEnv(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg, err := config.Load(config.Flags{}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Console.Enabled {
		t.Fatal("the console is off by default")
	}
	if s, i, k := cfg.Console.TTLs(); s != 8*time.Hour || i != 30*time.Minute || k != 10*time.Minute {
		t.Fatalf("TTLs=%v %v %v, want 8h 30m 10m", s, i, k)
	}
	for v, want := range map[string]bool{"0": false, "false": false, "off": false, "1": true, "true": true} {
		cfg, err := config.Load(config.Flags{}, env(map[string]string{"LOOM_CONSOLE": v}))
		if err != nil || cfg.Console.Enabled != want {
			t.Errorf("LOOM_CONSOLE=%s: enabled=%v err=%v, want %v", v, cfg.Console.Enabled, err, want)
		}
	}
	if _, err := config.Load(config.Flags{}, env(map[string]string{"LOOM_CONSOLE": "maybe"})); err == nil || !strings.Contains(err.Error(), "LOOM_CONSOLE") {
		t.Errorf("LOOM_CONSOLE=maybe: err=%v, want one naming LOOM_CONSOLE", err)
	}
	// The environment wins over the file.
	p := writeFile(t, "[console]\nenabled = true\n")
	cfg, err = config.Load(config.Flags{Config: p}, env(map[string]string{"LOOM_CONSOLE": "0"}))
	if err != nil || cfg.Console.Enabled {
		t.Errorf("file on, env off: enabled=%v err=%v", cfg.Console.Enabled, err)
	}
}

func TestConsole_File(t *testing.T) {
	cfg, err := config.Load(config.Flags{Config: writeFile(t, "[console]\nenabled = false\nsession_ttl = \"2h\"\nidle_ttl = \"1h\"\ntoken_ttl = \"5m\"\n")}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s, i, k := cfg.Console.TTLs(); cfg.Console.Enabled || s != 2*time.Hour || i != time.Hour || k != 5*time.Minute {
		t.Fatalf("console %+v TTLs %v %v %v", cfg.Console, s, i, k)
	}
	// Defaults never exceed a shorter lifetime above them.
	cfg, err = config.Load(config.Flags{Config: writeFile(t, "[console]\nsession_ttl = \"5m\"\n")}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s, i, k := cfg.Console.TTLs(); s != 5*time.Minute || i != 5*time.Minute || k != 5*time.Minute {
		t.Fatalf("TTLs %v %v %v under a 5m session", s, i, k)
	}
}

func TestConsole_Invalid(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"session too short", "session_ttl = \"30s\"", "[console] session_ttl must be at least"},
		{"negative idle", "idle_ttl = \"-5m\"", "console.idle_ttl"},
		{"token too short", "token_ttl = \"1s\"", "[console] token_ttl must be at least"},
		{"session too long", "session_ttl = \"1000h\"", "[console] session_ttl must be at most"},
		{"idle over session", "session_ttl = \"1h\"\nidle_ttl = \"2h\"", "[console] idle_ttl (2h0m0s) must not exceed session_ttl (1h0m0s)"},
		{"token over idle", "idle_ttl = \"5m\"\ntoken_ttl = \"6m\"", "[console] token_ttl (6m0s) must not exceed idle_ttl (5m0s)"},
		{"token over default idle", "token_ttl = \"31m\"", "[console] token_ttl"},
		{"unknown key", "enable = true", "console.enable"},
		{"not a duration", "idle_ttl = \"soon\"", "idle_ttl"},
		{"not a bool", "enabled = \"yes\"", "enabled"},
	} {
		_, err := config.Load(config.Flags{Config: writeFile(t, "[console]\n"+c.body+"\n")}, env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err=%v, want mention of %q", c.name, err, c.want)
		}
	}
}
