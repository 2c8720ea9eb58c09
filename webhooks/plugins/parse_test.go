package plugins

import (
	"errors"
	"strings"
	"testing"
)

const validRule = `
[rule]
id = "r1"
trigger = "on_turn_start"

[condition]
expression = "true"

[action]
type = "notify_self"
message = "hi"
`

// TestParseRuleErrors: each validation names the file, the rule and the
// field of the problem.
func TestParseRuleErrors(t *testing.T) {
	useFakeConditions(t)
	head := "[rule]\nid = \"r1\"\ntrigger = \"on_turn_start\"\n"
	cond := "[condition]\nexpression = \"true\"\n"
	notify := "[action]\ntype = \"notify_self\"\nmessage = \"hi\"\n"
	cases := []struct {
		name, src, rule, field, msg string
	}{
		{"toml syntax", "[rule\nid=", "", "", "invalid TOML"},
		{"toml type", "[rule]\nid = 3\n", "", "", "invalid TOML"},
		{"no rule table", cond + notify, "", "rule", "missing [rule]"},
		{"missing id", "[rule]\ntrigger = \"on_turn_start\"\n" + cond + notify, "", "rule.id", "missing"},
		{"id not kebab", strings.Replace(head, "r1", "R_1", 1) + cond + notify, "", "rule.id", "kebab-case"},
		{"id double dash", strings.Replace(head, "r1", "a--b", 1) + cond + notify, "", "rule.id", "kebab-case"},
		{"unknown hook", strings.Replace(head, "on_turn_start", "on_lunch", 1) + cond + notify, "r1", "rule.trigger", "unknown hook"},
		{"missing trigger", "[rule]\nid = \"r1\"\n" + cond + notify, "r1", "rule.trigger", "missing"},
		{"priority 0", head + "priority = 0\n" + cond + notify, "r1", "rule.priority", "outside 1–1000"},
		{"priority 1001", head + "priority = 1001\n" + cond + notify, "r1", "rule.priority", "outside 1–1000"},
		{"unknown rule key", head + "colour = \"red\"\n" + cond + notify, "r1", "rule.colour", "unknown key"},
		{"unknown table", head + cond + notify + "[extra]\nx = 1\n", "r1", "extra.x", "unknown key"},
		{"both condition and script", head + cond + "script = \"a.lua\"\n" + notify, "r1", "condition", "both"},
		{"neither", head + "[condition]\n" + notify, "r1", "condition", "needs an expression or a script"},
		{"empty expression", head + "[condition]\nexpression = \" \"\n" + notify, "r1", "condition.expression", "empty"},
		{"absolute script", head + "[condition]\nscript = \"/etc/x.lua\"\n" + notify, "r1", "condition.script", "relative"},
		{"unknown action", head + cond + "[action]\ntype = \"explode\"\n", "r1", "action.type", "unknown action"},
		{"missing action type", head + cond + "[action]\nmessage = \"x\"\n", "r1", "action.type", "missing"},
		{"notify without message", head + cond + "[action]\ntype = \"notify_self\"\n", "r1", "action.message", "required by notify_self"},
		{"log without message", head + cond + "[action]\ntype = \"log\"\n", "r1", "action.message", "required by log"},
		{"set_state without key", head + cond + "[action]\ntype = \"set_state\"\nvalue = 1\n", "r1", "action.key", "required by set_state"},
		{"set_state without value", head + cond + "[action]\ntype = \"set_state\"\nkey = \"k\"\n", "r1", "action.value", "required by set_state"},
		{"emit without event_type", head + cond + "[action]\ntype = \"emit_event\"\n", "r1", "action.event_type", "required by emit_event"},
		{"field of another action", head + cond + notify + "level = \"info\"\n", "r1", "action.level", "not used by notify_self"},
		{"bad priority enum", head + cond + notify + "priority = \"urgent\"\n", "r1", "action.priority", "not one of low, normal, high, critical"},
		{"bad deliver_at", head + cond + notify + "deliver_at = \"later\"\n", "r1", "action.deliver_at", "not one of turn_start, immediately"},
		{"bad level", head + cond + "[action]\ntype = \"log\"\nmessage = \"m\"\nlevel = \"loud\"\n", "r1", "action.level", "not one of debug, info, warning, error"},
		{"bad category", head + cond + notify + "category = \"two words\"\n", "r1", "action.category", "must be a word"},
		{"bad event type", head + cond + "[action]\ntype = \"emit_event\"\nevent_type = \"a b\"\n", "r1", "action.event_type", "must be a word"},
		{"bad template", head + cond + "[action]\ntype = \"notify_self\"\nmessage = \"{{ x \"\n", "r1", "action.message", "parse"},
		{"include refused", head + cond + "[action]\ntype = \"notify_self\"\nmessage = \"{% include 'x' %}\"\n", "r1", "action.message", "include"},
		{"bad payload template", head + cond + "[action]\ntype = \"emit_event\"\nevent_type = \"e\"\n[action.payload]\nx = [\"{% if %}\"]\n", "r1", "action.payload.x[0]", "parse"},
		{"empty message", head + cond + "[action]\ntype = \"notify_self\"\nmessage = \"\"\n", "r1", "action.message", "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := parseRule("rules/x.toml", tc.src)
			err := firstField(errs, tc.field)
			if err == nil {
				t.Fatalf("no error on field %q; got %v", tc.field, errors.Join(errs...))
			}
			if err.File != "rules/x.toml" || err.Rule != tc.rule || !strings.Contains(err.Msg, tc.msg) {
				t.Fatalf("got %+v, want file rules/x.toml rule %q msg containing %q", *err, tc.rule, tc.msg)
			}
		})
	}
	if _, errs := parseRule("rules/x.toml", validRule); len(errs) > 0 {
		t.Fatalf("valid rule refused: %v", errors.Join(errs...))
	}
}

func firstField(errs []error, field string) *LoadError {
	for _, e := range errs {
		var le *LoadError
		if errors.As(e, &le) && le.Field == field {
			return le
		}
	}
	return nil
}

func TestParseRuleDefaults(t *testing.T) {
	r, errs := parseRule("x.toml", validRule)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if r.Priority != 100 || !r.Enabled || r.Core || r.Version != "1.0.0" || r.Name != "r1" {
		t.Fatalf("defaults: %+v", r)
	}
	a := r.Action
	if a.Category != "info" || a.Priority != "normal" || a.DeliverAt != "turn_start" {
		t.Fatalf("action defaults: %+v", a)
	}
}

func TestParseManifestErrors(t *testing.T) {
	head := "[plugin]\nid = \"p\"\n[rules]\ninclude = [\"rules/*.toml\"]\n"
	cases := []struct{ name, src, field, msg string }{
		{"toml", "[plugin", "", "invalid TOML"},
		{"no plugin table", "[rules]\ninclude = [\"r/*.toml\"]\n", "plugin", "missing"},
		{"bad id", strings.Replace(head, "\"p\"", "\"P!\"", 1), "plugin.id", "kebab-case"},
		{"id not dir", strings.Replace(head, "\"p\"", "\"q\"", 1), "plugin.id", "must match its directory name"},
		{"unknown key", head + "[capabilities]\nrequires = []\nwants = 1\n", "capabilities.wants", "unknown key"},
		{"no include", "[plugin]\nid = \"p\"\n", "rules.include", "names no rule files"},
		{"include escapes", "[plugin]\nid = \"p\"\n[rules]\ninclude = [\"../x/*.toml\"]\n", "rules.include[0]", "inside the plugin"},
		{"include absolute", "[plugin]\nid = \"p\"\n[rules]\ninclude = [\"/etc/*.toml\"]\n", "rules.include[0]", "relative"},
		{"requires twice", head + "[capabilities]\nrequires = [\"a\", \"a\"]\n", "capabilities.requires[1]", "twice"},
		{"setting name", head + "[settings.Max]\ntype = \"integer\"\ndefault = 1\n", "settings.Max", "lower-case"},
		{"setting type", head + "[settings.s]\ntype = \"list\"\ndefault = 1\n", "settings.s.type", "unknown type"},
		{"setting no type", head + "[settings.s]\ndefault = 1\n", "settings.s.type", "missing"},
		{"setting no default", head + "[settings.s]\ntype = \"integer\"\n", "settings.s.default", "missing"},
		{"integer default float", head + "[settings.s]\ntype = \"integer\"\ndefault = 2.5\n", "settings.s.default", "must be an integer"},
		{"integer default 10.0", head + "[settings.s]\ntype = \"integer\"\ndefault = 10.0\n", "settings.s.default", "must be an integer"},
		{"boolean default", head + "[settings.s]\ntype = \"boolean\"\ndefault = \"yes\"\n", "settings.s.default", "must be a boolean"},
		{"default below min", head + "[settings.s]\ntype = \"integer\"\ndefault = 0\nmin = 1\n", "settings.s.default", "0 is below the minimum 1"},
		{"default above max", head + "[settings.s]\ntype = \"float\"\ndefault = 0.9\nmax = 0.5\n", "settings.s.default", "0.9 is above the maximum 0.5"},
		{"min above max", head + "[settings.s]\ntype = \"integer\"\ndefault = 5\nmin = 9\nmax = 1\n", "settings.s.max", "below min"},
		{"min on string", head + "[settings.s]\ntype = \"string\"\ndefault = \"a\"\nmin = 1\n", "settings.s.min", "only for integer and float"},
		{"integer min fraction", head + "[settings.s]\ntype = \"integer\"\ndefault = 5\nmin = 1.5\n", "settings.s.min", "must be an integer"},
		{"options on integer", head + "[settings.s]\ntype = \"integer\"\ndefault = 5\noptions = [\"a\"]\n", "settings.s.options", "only for string"},
		{"default not an option", head + "[settings.s]\ntype = \"string\"\ndefault = \"c\"\noptions = [\"a\", \"b\"]\n", "settings.s.default", "not one of the options"},
		{"setting unknown key", head + "[settings.s]\ntype = \"boolean\"\ndefault = true\nstep = 1\n", "settings.s.step", "unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := parseManifest("plugins/p/manifest.toml", "p", tc.src)
			err := firstField(errs, tc.field)
			if err == nil {
				t.Fatalf("no error on field %q; got %v", tc.field, errors.Join(errs...))
			}
			if err.File != "plugins/p/manifest.toml" || !strings.Contains(err.Msg, tc.msg) {
				t.Fatalf("got %+v, want msg containing %q", *err, tc.msg)
			}
		})
	}
	good := head + "[settings.n]\ntype = \"integer\"\ndefault = 3\nmin = 1\nmax = 5\n[settings.f]\ntype = \"float\"\ndefault = 1\n[settings.mode]\ntype = \"string\"\ndefault = \"a\"\noptions = [\"a\", \"b\"]\n"
	p, errs := parseManifest("m.toml", "p", good)
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if p.Settings["n"].Default != int64(3) || p.Settings["f"].Default != float64(1) || p.Settings["mode"].Default != "a" || !p.Enabled {
		t.Fatalf("settings: %+v", p)
	}
}
