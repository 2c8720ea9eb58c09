package plugins

// ActionType is what a rule does when its condition holds.
type ActionType string

// The actions.
const (
	// NotifySelf injects a notification into the agent's next prompt.
	NotifySelf ActionType = "notify_self"
	// Log writes a structured log line at the action's level.
	Log ActionType = "log"
	// SetState stores a value in the plugin's state for the user and chat.
	SetState ActionType = "set_state"
	// EmitEvent writes an event document that triggers can route.
	EmitEvent ActionType = "emit_event"
)

// Rule is a loaded, validated rule ([rule], [condition], [action] of a
// rule file).
type Rule struct {
	ID          string
	Name        string
	Description string
	Version     string // default "1.0.0"
	Trigger     Hook
	Priority    int  // 1–1000, default 100; higher runs first
	Enabled     bool // default true
	// Core rules cannot be disabled by a user (an admin still can).
	Core bool
	// Condition is the CEL expression; Script the Lua script's path as
	// written in the file (relative to the rule file). Exactly one is set.
	Condition string
	Script    string
	Action    Action
	// PluginID is the plugin the rule belongs to ("" for a standalone rule
	// of rules_dir).
	PluginID string
	// Source is the file the rule was loaded from ("builtin:<path>" for a
	// shipped one).
	Source string

	cond Condition // compiled
}

// Key names the rule across the set: "plugin/rule-id", or "rule-id" for a
// standalone rule. Users' disabledRules, the admin API and the execution
// log use it.
func (r *Rule) Key() string {
	if r.PluginID == "" {
		return r.ID
	}
	return r.PluginID + "/" + r.ID
}

// Action is a rule's [action]. String fields other than Type, Category,
// Priority, DeliverAt and Level are Jinja templates, rendered with
// `context` when the rule fires; so are the strings inside Value and
// Payload.
type Action struct {
	Type ActionType
	// notify_self
	Message   string
	Category  string // default "info"
	Priority  string // low | normal (default) | high | critical
	DeliverAt string // turn_start (default) | immediately
	// log
	Level string // debug | info (default) | warning | error
	// set_state
	Key   string
	Value any
	// emit_event
	EventType string
	Payload   map[string]any

	tmpl compiledAction
}

// compiledAction holds an action's compiled templates.
type compiledAction struct {
	message *Template
	key     *Template
	value   any // the Value tree with *Template in place of strings
	payload any // likewise for Payload
	// parts are the context fields the templates read (nil: any), the
	// ones rendering copies when mutates says a template may change them.
	parts   []string
	mutates bool
}

// Plugin is a loaded, validated plugin (its manifest and its rules).
type Plugin struct {
	ID          string
	Name        string
	Version     string
	Description string
	// Requires names capabilities (tool names) the plugin needs; a plugin
	// whose requirements the runtime lacks is loaded but unavailable.
	Requires []string
	// Include are the manifest's [rules] include globs, relative to Dir.
	Include  []string
	Settings map[string]Setting
	Rules    []*Rule
	// Enabled is the manifest's [plugin] enabled (default true; the shipped
	// plugins say false). An admin switch overrides it.
	Enabled bool
	// Missing lists the required capabilities the runtime lacks (set by
	// Load from LoadOptions.Capabilities).
	Missing []string
	Dir     string // the plugin's directory ("builtin:<dir>" when shipped)
	Builtin bool
}

// Setting is a plugin's typed, user-configurable setting ([settings.<name>]).
type Setting struct {
	Name        string
	Type        string // integer | float | string | boolean
	Default     any    // int64, float64, string or bool by Type
	Description string
	Min, Max    *float64 // numeric types
	Options     []string // string type: the allowed values (empty: any)
}
