package plugins

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func pluginManifest(id string, enabled bool, extra string) string {
	e := "true"
	if !enabled {
		e = "false"
	}
	return "[plugin]\nid = \"" + id + "\"\nenabled = " + e + "\n[rules]\ninclude = [\"rules/*.toml\"]\n" + extra
}

func TestLoadDirectories(t *testing.T) {
	useFakeConditions(t)
	rules := writeTree(t, map[string]string{
		"a.toml":        ruleTOML("a", "on_turn_start", 100, "true"),
		"README.md":     "not a rule",
		"lua.toml":      "[rule]\nid = \"lua\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"scripts/x.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n",
		"scripts/x.lua": "true",
	})
	plugs := writeTree(t, map[string]string{
		"p/manifest.toml":    pluginManifest("p", true, "[capabilities]\nrequires = [\"http_get\", \"vault\"]\n"),
		"p/rules/one.toml":   ruleTOML("one", "on_turn_start", 5, "true"),
		"p/rules/two.toml":   "[rule]\nid = \"two\"\ntrigger = \"on_tool_call\"\n[condition]\nscript = \"../scripts/two.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n",
		"p/scripts/two.lua":  "false",
		"notes.txt":          "ignored",
		".git/manifest.toml": "ignored",
	})
	set, err := Load(LoadOptions{RulesDir: rules, PluginsDir: plugs, Builtin: Builtin(), Capabilities: []string{"http_get"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "lua", "p/one", "p/two", "tool-failure-loop", "token-budget/token-budget-warning", "research-assistant/enough-sources"} {
		if set.Rule(key) == nil {
			t.Errorf("rule %s not loaded", key)
		}
	}
	p := set.Plugin("p")
	if p == nil || len(p.Missing) != 1 || p.Missing[0] != "vault" || p.Builtin {
		t.Fatalf("plugin p: %+v", p)
	}
	if ra := set.Plugin("research-assistant"); ra == nil || len(ra.Missing) != 0 || !ra.Builtin || ra.Enabled {
		t.Fatalf("research-assistant: %+v", ra)
	}
	if got := set.Rule("a").Source; !strings.HasSuffix(got, "/a.toml") {
		t.Errorf("source %q", got)
	}
	if got := set.Rule("tool-failure-loop").Source; got != "builtin:rules/tool-failure-loop.toml" {
		t.Errorf("builtin source %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	useFakeConditions(t)
	cases := []struct {
		name         string
		rules, plugs map[string]string
		file, field  string
		msg          string
	}{
		{"duplicate standalone", map[string]string{"a.toml": ruleTOML("a", "on_turn_start", 1, "true"), "b.toml": ruleTOML("a", "on_turn_end", 1, "true")}, nil,
			"b.toml", "rule.id", "already in"},
		{"standalone reuses builtin id", map[string]string{"t.toml": ruleTOML("tool-failure-loop", "on_turn_start", 1, "true")}, nil,
			"t.toml", "rule.id", "already in builtin:rules/tool-failure-loop.toml"},
		{"duplicate in plugin", nil, map[string]string{"p/manifest.toml": pluginManifest("p", true, ""), "p/rules/a.toml": ruleTOML("x", "on_turn_start", 1, "true"), "p/rules/b.toml": ruleTOML("x", "on_turn_start", 1, "true")},
			"p/rules/b.toml", "rule.id", "already has"},
		{"plugin reuses builtin id", nil, map[string]string{"token-budget/manifest.toml": pluginManifest("token-budget", true, ""), "token-budget/rules/a.toml": ruleTOML("x", "on_turn_start", 1, "true")},
			"token-budget/manifest.toml", "plugin.id", "already defined by builtin:plugins/token-budget/manifest.toml"},
		{"glob matches nothing", nil, map[string]string{"p/manifest.toml": pluginManifest("p", true, "")},
			"p/manifest.toml", "rules.include[0]", "matches no file"},
		{"no manifest", nil, map[string]string{"p/rules/a.toml": ruleTOML("x", "on_turn_start", 1, "true")},
			"p/manifest.toml", "", "cannot read"},
		{"script escapes rules dir", map[string]string{"a.toml": "[rule]\nid = \"a\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"../x.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n"}, nil,
			"a.toml", "condition.script", "must stay inside"},
		{"script escapes plugin", nil, map[string]string{"p/manifest.toml": pluginManifest("p", true, ""), "p/rules/a.toml": "[rule]\nid = \"a\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"../../q/x.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n"},
			"p/rules/a.toml", "condition.script", "must stay inside"},
		{"script missing", map[string]string{"a.toml": "[rule]\nid = \"a\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"x.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n"}, nil,
			"a.toml", "condition.script", "cannot read x.lua"},
		{"condition compile error", map[string]string{"a.toml": ruleTOML("a", "on_turn_start", 1, "bad")}, nil,
			"a.toml", "condition.expression", "fake compile error"},
		{"lua compile error", map[string]string{"a.toml": "[rule]\nid = \"a\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"x.lua\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n", "x.lua": "bad"}, nil,
			"a.toml", "condition.script", "fake lua compile error"},
		{"file too large", map[string]string{"a.toml": ruleTOML("a", "on_turn_start", 1, "true") + "#" + strings.Repeat("x", maxFileBytes)}, nil,
			"a.toml", "", "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := LoadOptions{Builtin: Builtin()}
			var base string
			if tc.rules != nil {
				opts.RulesDir = writeTree(t, tc.rules)
				base = opts.RulesDir
			}
			if tc.plugs != nil {
				opts.PluginsDir = writeTree(t, tc.plugs)
				base = opts.PluginsDir
			}
			set, err := Load(opts)
			if set != nil || err == nil {
				t.Fatal("loaded")
			}
			var found bool
			for _, e := range unjoin(err) {
				var le *LoadError
				if errors.As(e, &le) && le.File == base+"/"+tc.file && le.Field == tc.field && strings.Contains(le.Msg, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want %s %s %q; got %v", tc.file, tc.field, tc.msg, err)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// A plugin may keep its rules next to its manifest: include = ["*.toml"]
// does not read the manifest as a rule, and two globs matching one file
// load it once.
func TestLoadIncludeOverlap(t *testing.T) {
	useFakeConditions(t)
	set, err := Load(LoadOptions{PluginsDir: writeTree(t, map[string]string{
		"p/manifest.toml": "[plugin]\nid = \"p\"\n[rules]\ninclude = [\"*.toml\", \"a*.toml\"]\n",
		"p/a.toml":        ruleTOML("a", "on_turn_start", 1, "true"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	if rules := set.Plugin("p").Rules; len(rules) != 1 || rules[0].Key() != "p/a" {
		t.Fatalf("rules %v", rules)
	}
}

func TestLoadMissingDir(t *testing.T) {
	_, err := Load(LoadOptions{RulesDir: t.TempDir() + "/nope"})
	if err == nil || !strings.Contains(err.Error(), "cannot read the directory") {
		t.Fatalf("got %v", err)
	}
}

func TestLoadTooManyRules(t *testing.T) {
	useFakeConditions(t)
	files := map[string]string{}
	for i := 0; i <= maxRules; i++ {
		id := "r" + strconv.Itoa(i)
		files[id+".toml"] = ruleTOML(id, "on_turn_start", 1, "true")
	}
	_, err := Load(LoadOptions{RulesDir: writeTree(t, files)})
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 1000") {
		t.Fatalf("got %v", err)
	}
}

// TestLoadStaysInDirectories: a symlink out of the rules or plugins
// directory is not followed (a rule, script or manifest reading
// /etc/passwd or another tenant's files), one inside it is; a FIFO does
// not hang the loader.
func TestLoadStaysInDirectories(t *testing.T) {
	useFakeConditions(t)
	outside := writeTree(t, map[string]string{
		"evil.toml":     ruleTOML("evil", "on_turn_start", 1, "true"),
		"evil.lua":      "true",
		"manifest.toml": pluginManifest("q", true, ""),
	})
	lua := "[rule]\nid = \"%s\"\ntrigger = \"on_turn_end\"\n[condition]\nscript = \"%s\"\n[action]\ntype = \"log\"\nmessage = \"m\"\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		links map[string]string // link → target (relative to the tree, or absolute)
		fifo  string
		want  string // "" loads
	}{
		{name: "rule symlink out", links: map[string]string{"evil.toml": outside + "/evil.toml"}, want: "evil.toml"},
		{name: "script symlink out",
			files: map[string]string{"s.toml": strings.ReplaceAll(strings.Replace(lua, "%s", "s", 1), "%s", "x.lua")},
			links: map[string]string{"x.lua": outside + "/evil.lua"}, want: "condition.script"},
		{name: "directory symlink out",
			files: map[string]string{"s.toml": strings.ReplaceAll(strings.Replace(lua, "%s", "s", 1), "%s", "d/evil.lua")},
			links: map[string]string{"d": outside}, want: "condition.script"},
		{name: "symlink inside",
			files: map[string]string{"real/a.txt": ruleTOML("a", "on_turn_start", 1, "true")},
			links: map[string]string{"a.toml": "real/a.txt"}},
		{name: "fifo", fifo: "f.toml", want: "f.toml"},
	} {
		dir := writeTree(t, tc.files)
		for link, target := range tc.links {
			if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
		if tc.fifo != "" {
			if err := syscall.Mkfifo(filepath.Join(dir, tc.fifo), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() {
			_, err := Load(LoadOptions{RulesDir: dir})
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Load hangs", tc.name)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	// A plugin directory linked from outside.
	plugs := writeTree(t, nil)
	if err := os.Symlink(outside, filepath.Join(plugs, "q")); err != nil {
		t.Fatal(err)
	}
	if set, err := Load(LoadOptions{PluginsDir: plugs}); err == nil && set.Plugin("q") != nil {
		t.Errorf("plugin directory symlinked from outside loaded")
	}
}
