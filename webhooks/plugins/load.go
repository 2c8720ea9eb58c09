package plugins

import (
	"errors"
	"fmt"
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
	// defaults are each plugin's setting defaults, by plugin id.
	defaults map[string]map[string]any
	// needs is what the rules at each hook read.
	needs map[Hook]Needs
}

// Load reads, validates and compiles the rules and plugins opts names. On
// any error it returns none of them: a caller keeps its previous set.
func Load(opts LoadOptions) (*Set, error) {
	l := &loader{opts: opts, standalone: map[string]string{}, pluginIDs: map[string]string{}}
	if opts.Builtin != nil {
		l.loadRulesDir(opts.Builtin, "rules", "builtin:rules", true)
		l.loadPluginsDir(opts.Builtin, "plugins", "builtin:plugins", true)
	}
	if opts.RulesDir != "" {
		if root, ok := l.openDir(opts.RulesDir); ok {
			l.loadRulesDir(root.FS(), ".", opts.RulesDir, false)
			root.Close()
		}
	}
	if opts.PluginsDir != "" {
		if root, ok := l.openDir(opts.PluginsDir); ok {
			l.loadPluginsDir(root.FS(), ".", opts.PluginsDir, false)
			root.Close()
		}
	}
	if n := len(l.rules); n > maxRules {
		l.errs = append(l.errs, &LoadError{File: "(all)", Msg: fmt.Sprintf("%d rules are more than the limit of %d", n, maxRules)})
	}
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return newSet(l.rules, l.plugins, opts.Capabilities), nil
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
