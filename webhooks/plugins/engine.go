package plugins

import (
	"context"
	"errors"
	"fmt"
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
	if set == nil {
		set = newSet(nil, nil, nil)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newEngineMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	e := &Engine{log: log, m: m}
	e.set.Store(set)
	return e, nil
}

// Swap puts set in force.
func (e *Engine) Swap(set *Set) {
	if set == nil {
		set = newSet(nil, nil, nil)
	}
	e.set.Store(set)
}

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
	// Set is the set the caller judged Active and Needs on (nil: the one
	// in force). A reload in between must not hand a rule a context
	// prepared for another set's needs.
	Set *Set
}

// Active reports whether any rule at h could run for someone: enabled by
// its file or an admin switch, in an available plugin. When false the
// runtime skips building the context.
func (e *Engine) Active(h Hook, sw Switches) bool { return e.Set().Active(h, sw) }

// Active reports whether any rule of the set at h could run (see
// Engine.Active).
func (s *Set) Active(h Hook, sw Switches) bool {
	for _, r := range s.ByHook(h) {
		if s.runnable(r, sw) {
			return true
		}
	}
	return false
}

// Needs is which parts of the context the rules at h read (conservatively:
// a Lua script needs everything), so the runtime reads only those.
type Needs struct {
	History, User, Project, State bool
}

// Needs returns what the rules at h read.
func (e *Engine) Needs(h Hook) Needs { return e.Set().Needs(h) }

// Needs returns what the set's rules at h read.
func (s *Set) Needs(h Hook) Needs { return s.needs[h] }

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
	set := scope.Set
	if set == nil {
		set = e.Set()
	}
	rules := set.ByHook(h)
	if len(rules) == 0 {
		return nil, nil
	}
	start := time.Now()
	var (
		fired []Fired
		evals []Evaluation
		// Per plugin ("" standalone), computed once per evaluation.
		states   = map[string]map[string]any{}
		settings = map[string]map[string]any{}
		pid      = "\x00" // no plugin's yet
	)
	// While the engine holds c, Map builds the map once per plugin (State
	// and Settings are the only fields that change).
	c.memoBase, c.memo, c.memoOn = nil, nil, true
	defer func() { c.memoBase, c.memo, c.memoOn = nil, nil, false }()
	for _, r := range rules {
		if ctx.Err() != nil {
			break
		}
		if !set.Runs(r, scope.Switches, scope.Disabled) {
			continue
		}
		if r.PluginID != pid {
			pid = r.PluginID
			if _, ok := states[pid]; !ok {
				states[pid] = pluginState(scope, pid)
				settings[pid] = set.pluginSettings(pid, scope.Settings[pid])
			}
			c.State, c.Settings = states[pid], settings[pid]
			c.memo = nil
		}

		t0 := time.Now()
		ev := Evaluation{Rule: r.Key(), PluginID: pid, Hook: h}
		matched, err := matchSafely(ctx, r.cond, c)
		var act Rendered
		if err == nil && matched {
			act, err = r.Action.render(c.Map())
		}
		ev.Duration = time.Since(t0)
		switch {
		case err != nil:
			ev.Err = clipErr(err)
			e.m.evaluations.WithLabelValues(ev.Rule, "error").Inc()
			e.log.Warn("agent rule failed", "rule", ev.Rule, "hook", string(h), "err", ev.Err)
		case matched:
			ev.Matched = true
			e.m.evaluations.WithLabelValues(ev.Rule, "matched").Inc()
			fired = append(fired, Fired{Rule: r, Action: act, Eval: len(evals)})
		default:
			e.m.evaluations.WithLabelValues(ev.Rule, "unmatched").Inc()
		}
		evals = append(evals, ev)
	}
	if len(evals) > 0 {
		e.m.hookSeconds.WithLabelValues(string(h)).Observe(time.Since(start).Seconds())
	}
	return fired, evals
}

// Runs reports whether Evaluate runs r for a user who disabled the rules
// in disabled (core rules ignore it), under the admin's switches sw: what
// a caller asks to decide what to read before evaluating.
func (s *Set) Runs(r *Rule, sw Switches, disabled map[string]bool) bool {
	return s.runnable(r, sw) && (r.Core || !disabled[r.Key()])
}

// runnable reports whether r may run given the admin's switches: enabled by
// its file or its switch, and, in a plugin, the plugin enabled (file or
// switch) with every capability it requires.
func (s *Set) runnable(r *Rule, sw Switches) bool {
	enabled := r.Enabled
	if v, ok := sw[r.Key()]; ok {
		enabled = v
	}
	if !enabled || r.PluginID == "" {
		return enabled
	}
	p := s.plugins[r.PluginID]
	if p == nil || len(p.Missing) > 0 {
		return false
	}
	if v, ok := sw["plugin:"+p.ID]; ok {
		return v
	}
	return p.Enabled
}

// pluginSettings is a plugin's defaults overlaid by the user's (already
// checked) overrides; a fresh map, so a rule cannot change another's.
func (s *Set) pluginSettings(pid string, overrides map[string]any) map[string]any {
	d := s.defaults[pid]
	out := make(map[string]any, len(d))
	for k, v := range d {
		out[k] = v
	}
	for k, v := range overrides {
		if _, known := d[k]; known {
			out[k] = v
		}
	}
	return out
}

func pluginState(scope Scope, pid string) map[string]any {
	if scope.State == nil {
		return map[string]any{}
	}
	st := scope.State(pid)
	if st == nil {
		return map[string]any{}
	}
	return st
}

// matchSafely runs a condition, turning a panic into an error: one rule's
// bug must not fail the hook (and with it the user's run).
func matchSafely(ctx context.Context, cond Condition, c *Context) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, fmt.Errorf("condition panicked: %v", r)
		}
	}()
	if cond == nil {
		return false, errors.New("condition not compiled")
	}
	return cond.Match(ctx, c)
}

// clipErr bounds an error kept in the execution log.
func clipErr(err error) string {
	return clipN(err.Error(), 500)
}
