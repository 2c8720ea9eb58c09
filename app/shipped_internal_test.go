package app

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom"
	"github.com/loomdb/loom/internal/config"
)

const oneRule = "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"true\"\n"

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadIn runs config.Load as `loom serve` started in dir would, with flags
// and no environment.
func loadIn(t *testing.T, dir string, f config.Flags) config.Config {
	t.Helper()
	t.Chdir(dir)
	cfg, err := config.Load(f, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The rules: a configured file wins, else ./rules/security.toml when
// present, else the built-in rules (a nil set and no file); a configured
// file that is missing or bad is an error.
func TestLoadRules_Precedence(t *testing.T) {
	own := writeFile(t, filepath.Join(t.TempDir(), "own.toml"), oneRule)
	withCwdFile := t.TempDir()
	writeFile(t, filepath.Join(withCwdFile, "rules", "security.toml"), oneRule+oneRule)
	configured := func(rulesFile string) config.Flags {
		return config.Flags{Config: writeFile(t, filepath.Join(t.TempDir(), "loom.toml"), "[security]\nrules_file = \""+rulesFile+"\"\n")}
	}
	bad := writeFile(t, filepath.Join(t.TempDir(), "bad.toml"), "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"nope(\"\n")

	for _, tt := range []struct {
		name     string
		dir      string
		flags    config.Flags
		file     string
		optional bool
		rules    int // 0: the built-in rules
		errorHas string
	}{
		{name: "configured", dir: withCwdFile, flags: configured(own), file: own, rules: 1},
		{name: "working directory", dir: withCwdFile, file: "rules/security.toml", rules: 2},
		{name: "built-in", dir: t.TempDir(), file: "rules/security.toml", optional: true},
		{name: "configured but missing", dir: t.TempDir(), flags: configured(filepath.Join(withCwdFile, "nope.toml")), errorHas: "nope.toml"},
		{name: "bad", dir: withCwdFile, flags: configured(bad), errorHas: "rule 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			set, file, optional, err := loadRules(loadIn(t, tt.dir, tt.flags), slog.New(slog.NewTextHandler(&log, nil)))
			if tt.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errorHas) {
					t.Fatalf("err=%v, want one naming %q", err, tt.errorHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if file != tt.file || optional != tt.optional {
				t.Errorf("file=%q optional=%v, want %q %v", file, optional, tt.file, tt.optional)
			}
			switch {
			case tt.rules == 0 && set != nil:
				t.Errorf("set of %d rules, want nil (the built-in rules)", set.Len())
			case tt.rules != 0 && (set == nil || set.Len() != tt.rules):
				t.Errorf("set %v, want %d rules", set, tt.rules)
			}
			want := "file=" + tt.file
			if tt.optional {
				want = "file=built-in"
			}
			if !strings.Contains(log.String(), want) {
				t.Errorf("log %q lacks %s", log.String(), want)
			}
		})
	}
}

// The triggers: a file given by flag wins, else ./triggers.json when
// present, else the shipped triggers while the agent runtime is served,
// else none.
func TestTriggersSource_Precedence(t *testing.T) {
	own := writeFile(t, filepath.Join(t.TempDir(), "own.json"), "[]")
	withCwdFile := t.TempDir()
	writeFile(t, filepath.Join(withCwdFile, "triggers.json"), "[]")
	agentsOff := config.Flags{Config: writeFile(t, filepath.Join(t.TempDir(), "loom.toml"), "[agents]\nenabled = false\n")}

	for _, tt := range []struct {
		name    string
		dir     string
		flags   config.Flags
		file    string
		shipped bool
		logName string
	}{
		{name: "flag", dir: withCwdFile, flags: config.Flags{Triggers: own}, file: own, logName: own},
		{name: "working directory", dir: withCwdFile, file: config.DefaultTriggersFile, logName: config.DefaultTriggersFile},
		{name: "built-in", dir: t.TempDir(), shipped: true, logName: "built-in"},
		{name: "agents disabled", dir: t.TempDir(), flags: agentsOff, logName: "none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file, shipped := triggersSource(loadIn(t, tt.dir, tt.flags))
			if file != tt.file || (shipped != nil) != tt.shipped {
				t.Errorf("file=%q shipped=%v, want %q %v", file, shipped != nil, tt.file, tt.shipped)
			}
			if tt.shipped && !bytes.Equal(shipped, loom.Triggers()) {
				t.Error("the shipped triggers are not loom.Triggers()")
			}
			if n := triggersName(file, shipped); n != tt.logName {
				t.Errorf("triggersName=%q, want %q", n, tt.logName)
			}
		})
	}
}
