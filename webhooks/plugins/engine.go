package plugins

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Engine evaluates the rules of the set in force. Swap replaces the set
// (a reload); evaluations in progress finish with the set they started
// with. Safe for concurrent use.
type Engine struct {
	set atomic.Pointer[Set]
	log *slog.Logger
	m   *engineMetrics
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	Logger *slog.Logger
	// Registerer receives the engine's metrics (nil: not exported).
	Registerer prometheus.Registerer
}

// NewEngine returns an engine evaluating set (nil: no rules).
func NewEngine(set *Set, opts EngineOptions) (*Engine, error) {
	panic("plugins: NewEngine not written yet")
}

// Swap puts set in force.
func (e *Engine) Swap(set *Set) { e.set.Store(set) }

// Set returns the set in force (never nil).
func (e *Engine) Set() *Set { return e.set.Load() }

// Switches are the admin's enable/disable overrides: by rule key, and by
// "plugin:<id>" for a whole plugin. Absent: the file's enabled stands.
type Switches map[string]bool

// Scope is whose run a hook belongs to.
type Scope struct {
	// Disabled are the rules the user disabled (by key; core rules are
	// never in it: Set.UserScope drops them).
	Disabled map[string]bool
	// Settings are the user's plugin setting overrides, by plugin id.
	Settings map[string]map[string]any
	// State returns a plugin's state for this user and chat (pluginID "" is
	// the standalone rules' state); nil: empty state everywhere.
	State func(pluginID string) map[string]any
	// Switches are the admin's overrides in force.
	Switches Switches
}

// Active reports whether any rule at h could run for someone: enabled by
// its file or an admin switch, in an available plugin. When false the
// runtime skips building the context.
func (e *Engine) Active(h Hook, sw Switches) bool {
	panic("plugins: Active not written yet")
}

// Needs is which parts of the context the rules at h read (conservatively:
// a Lua script needs everything), so the runtime reads only those.
type Needs struct {
	History, User, Project, State bool
}

// Needs returns what the rules at h read.
func (e *Engine) Needs(h Hook) Needs {
	panic("plugins: Needs not written yet")
}

// Fired is a rule whose condition held, with its action rendered.
type Fired struct {
	Rule   *Rule
	Action Rendered
	// Eval is the index of the rule's Evaluation (the runtime sets its
	// Executed and Err once it carried the action out).
	Eval int
}

// Rendered is an action with its templates rendered.
type Rendered struct {
	Type      ActionType
	Message   string
	Category  string
	Priority  string
	DeliverAt string
	Level     string
	Key       string
	Value     any
	EventType string
	Payload   map[string]any
}

// Evaluation is the record of one rule's evaluation (the execution log).
type Evaluation struct {
	Rule     string // key
	PluginID string
	Hook     Hook
	// Matched is the condition's result (false on an error).
	Matched bool
	// Executed: the action was carried out (set by the runtime).
	Executed bool
	Duration time.Duration
	// Err says why the condition or the action's rendering failed, or (set
	// by the runtime) why the action failed.
	Err string
}

// Evaluate runs the rules at h for scope in order (priority descending,
// then key): skipped are rules disabled by their file, an admin switch or
// the user (core rules ignore the user), and rules of disabled or
// unavailable plugins. For each rule it sets c.State and c.Settings to its
// plugin's, evaluates the condition and, when it holds, renders the action.
// A condition or rendering error counts as no match and is logged. It
// returns the fired actions in order and one Evaluation per rule run.
func (e *Engine) Evaluate(ctx context.Context, h Hook, c *Context, scope Scope) ([]Fired, []Evaluation) {
	panic("plugins: Evaluate not written yet")
}

type engineMetrics struct{}
