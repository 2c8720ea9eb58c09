package config_test

import (
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/config"
)

// [runtime] loads as written; bad values stop startup with the key named.
func TestLoad_Runtime(t *testing.T) {
	t.Chdir(t.TempDir())
	def, err := config.Load(config.Flags{}, env(nil))
	if err != nil || def.Runtime != (config.Runtime{}) {
		t.Fatalf("defaults: runtime=%+v err=%v, want zero (the defaults apply in loom serve)", def.Runtime, err)
	}
	cfg, err := config.Load(config.Flags{Config: writeFile(t, "[runtime]\ngc_percent = 200\nmemory_limit = \"2GiB\"\n")}, env(nil))
	if err != nil || cfg.Runtime.GCPercent != 200 || cfg.Runtime.MemoryLimit != "2GiB" {
		t.Fatalf("runtime=%+v err=%v", cfg.Runtime, err)
	}
	for _, body := range []string{
		"gc_percent = -1\nmemory_limit = \"512MiB\"",
		"gc_percent = 10\nmemory_limit = \"off\"",
		"gc_percent = 10000\nmemory_limit = \"100%\"",
		"memory_limit = \"1%\"",
		"memory_limit = \"67108864\"",
	} {
		if _, err := config.Load(config.Flags{Config: writeFile(t, "[runtime]\n"+body+"\n")}, env(nil)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	for _, c := range []struct{ body, want string }{
		{"gc_percent = 5", "[runtime] gc_percent"},
		{"gc_percent = 10001", "[runtime] gc_percent"},
		{"memory_limit = \"512\"", "[runtime] memory_limit"}, // bytes: a forgotten unit
		{"memory_limit = \"2GB\"", "[runtime] memory_limit"},
		{"memory_limit = \"0%\"", "[runtime] memory_limit"},
		{"memory_limit = \"101%\"", "[runtime] memory_limit"},
		{"memory_limit = \"half\"", "[runtime] memory_limit"},
		{"memory_limit = \"-1GiB\"", "[runtime] memory_limit"},
		{"memory_limit = \"99999999999TiB\"", "[runtime] memory_limit"},
		{"gc_percent = -1\nmemory_limit = \"off\"", "memory_limit"},
		{"gc_pct = 100", "runtime.gc_pct"},
	} {
		_, err := config.Load(config.Flags{Config: writeFile(t, "[runtime]\n"+c.body+"\n")}, env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err=%v, want an error naming %s", c.body, err, c.want)
		}
	}
}

func TestParseMemoryLimit(t *testing.T) {
	for s, want := range map[string]config.MemoryLimit{
		"":           {Percent: 50},
		"off":        {Off: true},
		"25%":        {Percent: 25},
		"64MiB":      {Bytes: 64 << 20},
		"2GiB":       {Bytes: 2 << 30},
		"1TiB":       {Bytes: 1 << 40},
		"65536KiB":   {Bytes: 64 << 20},
		"100000000B": {Bytes: 100000000},
	} {
		if got, err := config.ParseMemoryLimit(s); err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
}
