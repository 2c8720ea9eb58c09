package plugins

import (
	"io/fs"
	"strings"
	"testing"
)

// seedRule is seed 001's rule file, verbatim.
const seedRule = `# rules/token-budget-warning.toml

[rule]
id = "token-budget-warning"
name = "Token Budget Warning"
description = "Warn when token usage exceeds 80%"
version = "1.0.0"
trigger = "on_turn_start"
priority = 100
enabled = true
core = true

[condition]
expression = "context.turn.token_usage > 0.8"
# OR: script = "scripts/check_token_budget.lua"

[action]
type = "notify_self"
message = "Token budget at {{ (context.turn.token_usage * 100) | int }}%. Consider wrapping up or summarizing."
category = "warning"
priority = "high"
deliver_at = "turn_start"
`

func TestBuiltinSeedRuleVerbatim(t *testing.T) {
	b, err := fs.ReadFile(Builtin(), "plugins/token-budget/rules/token-budget-warning.toml")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != seedRule {
		t.Fatalf("the shipped token-budget-warning is not the seed's text:\n%s", b)
	}
	r, errs := parseRule("seed.toml", seedRule)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a := r.Action
	if r.Trigger != OnTurnStart || r.Priority != 100 || !r.Core || a.Category != "warning" || a.Priority != "high" || a.DeliverAt != "turn_start" {
		t.Fatalf("parsed %+v", r)
	}
	c := &Context{Turn: Turn{TokenUsage: 0.92}}
	got, err := a.render(c.Map())
	if err != nil || got.Message != "Token budget at 92%. Consider wrapping up or summarizing." {
		t.Fatalf("%q %v", got.Message, err)
	}
}

func TestBuiltinLoads(t *testing.T) {
	useFakeConditions(t)
	set, err := Load(LoadOptions{Builtin: Builtin(), Capabilities: []string{"http_get"}})
	if err != nil {
		t.Fatal(err)
	}
	loop := set.Rule("tool-failure-loop")
	if loop == nil || !loop.Core || !loop.Enabled || loop.Trigger != OnToolFailure || loop.Action.Priority != "high" {
		t.Fatalf("tool-failure-loop %+v", loop)
	}
	for _, id := range []string{"token-budget", "research-assistant"} {
		p := set.Plugin(id)
		if p == nil || p.Enabled || !p.Builtin {
			t.Fatalf("plugin %s: %+v", id, p)
		}
	}
	ra := set.Plugin("research-assistant")
	if len(ra.Rules) != 2 || ra.Settings["max_sources"].Default != int64(10) || ra.Settings["auto_summarize"].Default != true {
		t.Fatalf("research-assistant %+v", ra)
	}
	if set.Rule("research-assistant/enough-sources").Script == "" {
		t.Fatal("the shipped set has no Lua rule")
	}
	// Without http_get the research assistant is unavailable.
	set, err = Load(LoadOptions{Builtin: Builtin()})
	if err != nil {
		t.Fatal(err)
	}
	if m := set.Plugin("research-assistant").Missing; len(m) != 1 || m[0] != "http_get" {
		t.Fatalf("missing %v", m)
	}
}

// seedManifest is seed 001's plugin manifest, verbatim.
const seedManifest = `# plugins/research-assistant/manifest.toml

[plugin]
id = "research-assistant"
name = "Research Assistant"
version = "1.0.0"
description = "Enhanced research workflow with multi-step guidance"

[capabilities]
requires = ["vault_search", "web_search"]

[rules]
# Rules are loaded from ./rules/*.toml
include = ["rules/*.toml"]

[settings]
# User-configurable settings

[settings.max_sources]
type = "integer"
default = 10
min = 1
max = 50
description = "Maximum sources to gather before synthesizing"

[settings.auto_summarize]
type = "boolean"
default = true
description = "Automatically summarize large result sets"
`

// The seed's manifest loads as written (from plugins_dir); Loom has
// neither of the tools it requires, so it is unavailable.
func TestSeedManifestLoads(t *testing.T) {
	useFakeConditions(t)
	set, err := Load(LoadOptions{PluginsDir: writeTree(t, map[string]string{
		"research-assistant/manifest.toml":   seedManifest,
		"research-assistant/rules/seed.toml": strings.Replace(seedRule, "token-budget-warning", "budget", 1),
	}), Capabilities: []string{"http_get", "web_search"}})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Plugin("research-assistant")
	if !p.Enabled || len(p.Missing) != 1 || p.Missing[0] != "vault_search" || p.Settings["max_sources"].Max == nil || *p.Settings["max_sources"].Max != 50 {
		t.Fatalf("plugin %+v", p)
	}
	e, _ := NewEngine(set, EngineOptions{})
	if e.Active(OnTurnStart, nil) {
		t.Fatal("a plugin missing a capability is active")
	}
}
