package plugins

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func settingsFixture(t *testing.T) *Set {
	t.Helper()
	useFakeConditions(t)
	set, err := Load(LoadOptions{Builtin: Builtin(), RulesDir: writeTree(t, map[string]string{
		"mine.toml": ruleTOML("mine", "on_turn_start", 1, "true"),
	}), PluginsDir: writeTree(t, map[string]string{
		"p/manifest.toml": pluginManifest("p", true, `
[settings.ratio]
type = "float"
default = 0.5
min = 0
max = 1
[settings.mode]
type = "string"
default = "short"
options = ["short", "long"]
[settings.note]
type = "string"
default = ""
`),
		"p/rules/r.toml": ruleTOML("r", "on_turn_start", 1, "true"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestValidateUserSettings(t *testing.T) {
	set := settingsFixture(t)
	ra := func(v any) map[string]any {
		return map[string]any{"plugins": map[string]any{"research-assistant": map[string]any{"max_sources": v}}}
	}
	cases := []struct {
		name    string
		doc     map[string]any
		setting string // "" when valid
		msg     string
	}{
		{"empty", map[string]any{}, "", ""},
		{"own fields pass", map[string]any{"theme": "dark"}, "", ""},
		{"json.Number", ra(json.Number("12")), "", ""},
		{"float64 integral", ra(float64(12)), "", ""},
		{"int64", ra(int64(12)), "", ""},
		{"json.Number 12.0", ra(json.Number("12.0")), "", ""},
		{"above max", ra(json.Number("60")), "plugins.research-assistant.max_sources", "60 is above the maximum 50"},
		{"below min", ra(float64(0)), "plugins.research-assistant.max_sources", "0 is below the minimum 1"},
		{"fraction", ra(2.5), "plugins.research-assistant.max_sources", "2.5 is not an integer"},
		{"fraction json.Number", ra(json.Number("2.5")), "plugins.research-assistant.max_sources", "2.5 is not an integer"},
		{"string for integer", ra("12"), "plugins.research-assistant.max_sources", "must be an integer"},
		{"bool setting", map[string]any{"plugins": map[string]any{"research-assistant": map[string]any{"auto_summarize": "yes"}}}, "plugins.research-assistant.auto_summarize", "must be a boolean"},
		{"float ok", map[string]any{"plugins": map[string]any{"p": map[string]any{"ratio": json.Number("0.25")}}}, "", ""},
		{"float above", map[string]any{"plugins": map[string]any{"p": map[string]any{"ratio": 1.5}}}, "plugins.p.ratio", "1.5 is above the maximum 1"},
		{"option ok", map[string]any{"plugins": map[string]any{"p": map[string]any{"mode": "long"}}}, "", ""},
		{"option bad", map[string]any{"plugins": map[string]any{"p": map[string]any{"mode": "medium"}}}, "plugins.p.mode", "not one of the options"},
		{"string too long", map[string]any{"plugins": map[string]any{"p": map[string]any{"note": strings.Repeat("x", maxSettingString+1)}}}, "plugins.p.note", "longer than"},
		{"unknown plugin", map[string]any{"plugins": map[string]any{"nope": map[string]any{}}}, "plugins.nope", "no plugin"},
		{"unknown setting", map[string]any{"plugins": map[string]any{"p": map[string]any{"colour": 1}}}, "plugins.p.colour", "no setting"},
		{"plugins not object", map[string]any{"plugins": []any{}}, "plugins", "must be an object"},
		{"plugin not object", map[string]any{"plugins": map[string]any{"p": 3}}, "plugins.p", "must be an object"},
		{"disable rule", map[string]any{"disabledRules": []any{"p/r", "mine", "research-assistant/enough-sources"}}, "", ""},
		{"disable unknown", map[string]any{"disabledRules": []any{"mine", "p/nope"}}, "disabledRules[1]", "no rule"},
		{"disable core", map[string]any{"disabledRules": []any{"tool-failure-loop"}}, "disabledRules[0]", "core rule"},
		{"disabled not strings", map[string]any{"disabledRules": []any{1}}, "disabledRules", "list of rule keys"},
		{"disabled not list", map[string]any{"disabledRules": "mine"}, "disabledRules", "list of rule keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := set.ValidateUserSettings(tc.doc)
			if tc.setting == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *SettingError
			if !errors.As(err, &se) || se.Setting != tc.setting || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("got %v, want %s: …%s", err, tc.setting, tc.msg)
			}
		})
	}
	// The message the user sees names the setting and the bound.
	err := set.ValidateUserSettings(ra(60))
	if err == nil || err.Error() != "plugins.research-assistant.max_sources: 60 is above the maximum 50" {
		t.Fatalf("message %v", err)
	}
}

func TestUserScope(t *testing.T) {
	set := settingsFixture(t)
	doc := map[string]any{
		"disabledRules": []any{"mine", "tool-failure-loop", "gone"},
		"plugins": map[string]any{
			"research-assistant": map[string]any{"max_sources": float64(20), "auto_summarize": "no"},
			"p":                  map[string]any{"ratio": json.Number("0.1"), "mode": "huge"},
			"nope":               map[string]any{"x": 1},
		},
	}
	disabled, settings, bad := set.UserScope(doc)
	if !reflect.DeepEqual(disabled, map[string]bool{"mine": true}) {
		t.Fatalf("disabled %v", disabled)
	}
	want := map[string]map[string]any{
		"research-assistant": {"max_sources": int64(20)},
		"p":                  {"ratio": 0.1},
	}
	if !reflect.DeepEqual(settings, want) {
		t.Fatalf("settings %#v", settings)
	}
	if len(bad) != 5 {
		t.Fatalf("bad %q", bad)
	}
	// The overrides reach the context over the defaults.
	if got := set.pluginSettings("research-assistant", settings["research-assistant"]); got["max_sources"] != int64(20) || got["auto_summarize"] != true {
		t.Fatalf("merged %v", got)
	}
}

// TestUserScopeBadBounded: the runtime logs what UserScope dropped on
// every hook; a document written around the server's check (or before a
// plugin went away) with thousands of bad entries must not make every
// hook log thousands of lines.
func TestUserScopeBadBounded(t *testing.T) {
	set := settingsFixture(t)
	plugins := map[string]any{}
	for i := range 5000 {
		plugins["nope-"+strconv.Itoa(i)] = map[string]any{}
	}
	_, _, bad := set.UserScope(map[string]any{"plugins": plugins})
	if len(bad) > maxBadSettingsReported+1 || !strings.Contains(bad[len(bad)-1], "more") {
		t.Fatalf("%d reported, last %q", len(bad), bad[len(bad)-1])
	}
}
