package plugins

import (
	"errors"
	"io/fs"
)

// LoadOptions says where rules and plugins come from.
type LoadOptions struct {
	// RulesDir holds standalone rule files (*.toml); "" for none. A
	// directory that does not exist is an error when named.
	RulesDir string
	// PluginsDir holds one directory per plugin, each with a manifest.toml;
	// "" for none.
	PluginsDir string
	// Builtin holds the shipped rules and plugins (Builtin()); nil for none.
	// Same layout: rules/*.toml and plugins/<id>/manifest.toml.
	Builtin fs.FS
	// Capabilities are what plugins may require (the runtime's tool names).
	Capabilities []string
	// Lua bounds every Lua script's runs.
	Lua LuaLimits
}

// LoadError is one problem in a rule or plugin file. Load returns all it
// found, joined (errors.Join); each names the file, the rule (when the
// problem is in one) and the field.
type LoadError struct {
	File  string
	Rule  string // rule id, "" for a manifest-level problem
	Field string // e.g. "rule.priority", "condition", "action.type", "settings.max_sources.max"
	Msg   string
}

func (e *LoadError) Error() string {
	s := e.File
	if e.Rule != "" {
		s += ": rule " + e.Rule
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

// Set is a loaded, validated set of rules and plugins: immutable once
// loaded (a reload builds a new one).
type Set struct {
	Rules   []*Rule   // every rule, in evaluation order (see ByHook)
	Plugins []*Plugin // by id
	byHook  map[Hook][]*Rule
	plugins map[string]*Plugin
	rules   map[string]*Rule // by Key
}

// Load reads, validates and compiles the rules and plugins opts names. On
// any error it returns none of them: a caller keeps its previous set.
func Load(opts LoadOptions) (*Set, error) {
	return nil, errors.New("plugins: Load not written yet")
}

// ByHook returns the rules at h in evaluation order: priority descending,
// then key ascending (deterministic).
func (s *Set) ByHook(h Hook) []*Rule { return s.byHook[h] }

// Plugin returns the plugin with the id, or nil.
func (s *Set) Plugin(id string) *Plugin { return s.plugins[id] }

// Rule returns the rule with the key, or nil.
func (s *Set) Rule(key string) *Rule { return s.rules[key] }

// SettingError is a user's settings value a plugin does not accept.
type SettingError struct {
	// Setting names it: "plugins.<plugin>.<setting>" or
	// "disabledRules[<i>]".
	Setting string
	Msg     string
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Msg }

// ValidateUserSettings checks a user's agent settings document:
//
//	{"disabledRules": ["plugin/rule-id", ...],
//	 "plugins": {"<plugin>": {"<setting>": value, ...}}}
//
// Every disabled rule must exist and not be core; every plugin and setting
// must exist and each value have the setting's type and lie within its
// min/max/options. Other top-level fields are the user's own and pass. It
// returns a *SettingError naming the first bad setting.
func (s *Set) ValidateUserSettings(doc map[string]any) error {
	return errors.New("plugins: ValidateUserSettings not written yet")
}

// UserScope reads a user's settings document (as ValidateUserSettings takes
// it) into what Evaluate needs: the disabled rules (core ones and unknown
// ones dropped) and the valid overrides (a bad value is dropped, so a
// document written around the check can only fall back to defaults). bad
// lists what was dropped, for a log line.
func (s *Set) UserScope(doc map[string]any) (disabled map[string]bool, settings map[string]map[string]any, bad []string) {
	return nil, nil, nil
}

// Builtin returns the shipped rules and plugins (embedded): the core rules
// under rules/ (on by default) and the plugins under plugins/<id>/ (off by
// default).
func Builtin() fs.FS {
	panic("plugins: Builtin not written yet")
}
