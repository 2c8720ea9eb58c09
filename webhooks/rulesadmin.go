package webhooks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

const (
	// RulesAdminPrefix is where the rules admin API is served.
	RulesAdminPrefix = "/admin/v1/agents"
	// switchesTTL is how long the admin's switches are cached: a switch
	// set on another node takes effect here within it (one set here takes
	// effect at once).
	switchesTTL = 5 * time.Second
	// switchesRetry is how long a failed read of the switches is not
	// retried (the last known switches stay in force meanwhile), so a
	// failing store is not asked on every hook.
	switchesRetry = time.Second
	// maxSwitches bounds the switch documents read: one per rule or plugin
	// of the set, which an admin writes.
	maxSwitches = collections.MaxLimit
	// maxReloadError bounds the reload error kept for the admin API (a
	// reload reports every problem it found).
	maxReloadError = 16 << 10
)

// rulesState is the runtime's side of the lifecycle rules beyond the
// engine: the switch cache, the last reload's outcome, the execution log's
// pruning and metrics.
type rulesState struct {
	reloadMu sync.Mutex // one reload at a time
	mu       sync.Mutex // guards last
	last     reloadStatus

	swMu sync.Mutex // one refresh of the switches at a time
	sw   atomic.Pointer[switchCache]

	lastPrune     atomic.Int64 // unix nanoseconds of the last pruning started
	lastUngranted atomic.Int64 // of the last warning that the rules deny the collections
	pruning       atomic.Bool
	logWrites     *prometheus.CounterVec
	logPruned     prometheus.Counter
	reloads       *prometheus.CounterVec

	now func() time.Time
}

// reloadStatus is the last reload's outcome, as the admin API shows it.
type reloadStatus struct {
	At    int64  `json:"at,omitempty"` // unix ms; 0: no reload since start
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// switchCache is the switches as read at a time, valid until expires.
type switchCache struct {
	sw      plugins.Switches
	expires time.Time
}

func newRulesState(reg prometheus.Registerer) (*rulesState, error) {
	s := &rulesState{
		last: reloadStatus{OK: true},
		now:  time.Now,
		logWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_agent_rule_log_writes_total",
			Help: "Execution-log documents of the lifecycle rules by outcome (ok; duplicate: a redelivery's, already written; error: not recorded, the delivery retried unless a retry cannot help).",
		}, []string{"outcome"}),
		logPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loom_agent_rule_log_pruned_total",
			Help: "Execution-log documents deleted past [agents] rule_log_retention.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_agent_rule_reloads_total",
			Help: "Reloads of the rule and plugin files by outcome (ok; error: the previous set stays in force).",
		}, []string{"outcome"}),
	}
	if err := registerAll(reg, s.logWrites, s.logPruned, s.reloads); err != nil {
		return nil, err
	}
	return s, nil
}

// errNoRules answers the rules admin API of a runtime without rules.
var errNoRules = errors.New("lifecycle rules are not configured in this runtime")

// ReloadRules re-reads the rule and plugin files (Config.LoadRules) and puts
// the new set in force; on an error the set in force stays and the error
// (which names the file, the rule and the field) is returned and kept for
// the admin API's status.
func (h *Handlers) ReloadRules(ctx context.Context) error {
	if h.cfg.Rules == nil || h.cfg.LoadRules == nil {
		return errNoRules
	}
	rs := h.rules
	rs.reloadMu.Lock()
	defer rs.reloadMu.Unlock()
	set, err := h.cfg.LoadRules()
	if err == nil && set == nil {
		err = errors.New("the rule loader returned no set")
	}
	st := reloadStatus{At: rs.now().UnixMilli(), OK: err == nil}
	if err != nil {
		st.Error = truncate(err.Error(), maxReloadError)
		rs.reloads.WithLabelValues("error").Inc()
		h.log.Error("rules reload failed; the previous rules stay in force", "err", err)
	} else {
		h.cfg.Rules.Swap(set)
		rs.reloads.WithLabelValues("ok").Inc()
		h.log.Info("rules reloaded", "rules", len(set.Rules), "plugins", len(set.Plugins))
	}
	rs.mu.Lock()
	rs.last = st
	rs.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rules reload: %w", err)
	}
	return nil
}

// lastReload is the last reload's outcome.
func (h *Handlers) lastReload() reloadStatus {
	h.rules.mu.Lock()
	defer h.rules.mu.Unlock()
	return h.rules.last
}

// switches returns the admin's switches in force (cached briefly: another
// node's switch takes effect within switchesTTL). On a failed read it
// returns the last known switches (nil at first) with the error.
func (h *Handlers) switches(ctx context.Context) (plugins.Switches, error) {
	rs := h.rules
	if c := rs.sw.Load(); c != nil && rs.now().Before(c.expires) {
		return c.sw, nil
	}
	rs.swMu.Lock()
	defer rs.swMu.Unlock()
	prev := rs.sw.Load()
	if prev != nil && rs.now().Before(prev.expires) {
		return prev.sw, nil // refreshed while we waited
	}
	var stale plugins.Switches
	if prev != nil {
		stale = prev.sw
	}
	sw, err := h.readSwitches(ctx)
	if forbidden(err) {
		// Security rules written before the switches existed: the rules
		// run as their files say rather than not at all.
		h.warnUngranted(switchesCollection, err)
		sw, err = plugins.Switches{}, nil
	}
	if err != nil {
		rs.sw.Store(&switchCache{sw: stale, expires: rs.now().Add(switchesRetry)})
		return stale, err
	}
	rs.sw.Store(&switchCache{sw: sw, expires: rs.now().Add(switchesTTL)})
	return sw, nil
}

// readSwitches reads the switch documents. A malformed one (written around
// the admin API) is skipped and logged: it cannot switch anything.
func (h *Handlers) readSwitches(ctx context.Context) (plugins.Switches, error) {
	docs, err := h.docs.Query(ctx, collections.Query{Collection: switchesCollection, Limit: maxSwitches})
	if err != nil {
		return nil, fmt.Errorf("read the rule switches: %w", err)
	}
	sw := make(plugins.Switches, len(docs))
	for _, d := range docs {
		key, _ := d.Data["key"].(string)
		on, ok := d.Data["enabled"].(bool)
		if key == "" || !ok || d.ID != switchID(key) {
			h.log.Warn("ignoring a malformed rule switch document", "path", d.Path)
			continue
		}
		sw[key] = on
	}
	return sw, nil
}

// forbidden reports whether err is the security rules refusing the
// runtime's service key, in process (access.Denied) or over REST
// (loomclient.HTTPError 403).
func forbidden(err error) bool {
	var f interface{ Forbidden() bool }
	return err != nil && errors.As(err, &f) && f.Forbidden()
}

// ungrantedHelp says what to do when the security rules do not grant the
// service role the rules' top-level collections.
const ungrantedHelp = "grant the service role read and write on agent-rules/{id} and agent-rule-log/{id} (as the shipped rules/security.toml does)"

// warnUngranted logs, at most once per switchesTTL, that the security rules
// keep the runtime from coll.
func (h *Handlers) warnUngranted(coll string, err error) {
	now := h.rules.now().UnixNano()
	last := h.rules.lastUngranted.Load()
	if now-last < int64(switchesTTL) || !h.rules.lastUngranted.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("the security rules do not let the agent runtime use "+coll+"; "+ungrantedHelp, "err", err)
}

// switchID is the id of the switch document of key (a rule key, which
// holds a "/" for a plugin's rule, or "plugin:<id>").
func switchID(key string) string { return deriveID(key) }

// pluginSwitch is the switch key of a whole plugin.
func pluginSwitch(id string) string { return "plugin:" + id }

// setSwitch stores the admin's switch for key and puts it in force here at
// once.
func (h *Handlers) setSwitch(ctx context.Context, key string, on bool) error {
	path := switchesCollection + "/" + switchID(key)
	data := map[string]any{"key": key, "enabled": on, "updatedAt": h.rules.now().UnixMilli()}
	// An upsert: update, else create, else (created meanwhile) update.
	_, err := h.docs.Update(ctx, path, data, 0)
	if errors.Is(err, collections.ErrNotFound) {
		if _, err = h.docs.Create(ctx, path, data); errors.Is(err, collections.ErrAlreadyExists) {
			_, err = h.docs.Update(ctx, path, data, 0)
		}
	}
	if err != nil {
		return fmt.Errorf("write the switch of %s: %w", key, err)
	}
	rs := h.rules
	rs.swMu.Lock()
	defer rs.swMu.Unlock()
	// Without switches read before (a node just started), this one is not
	// all there are: the cache stays expired, so the next use reads them
	// all, this one included.
	c := &switchCache{sw: plugins.Switches{}}
	if prev := rs.sw.Load(); prev != nil {
		maps.Copy(c.sw, prev.sw) // copied: callers may hold the previous map
		c.expires = prev.expires
	}
	c.sw[key] = on
	rs.sw.Store(c)
	return nil
}

// pluginOn reports whether p's rules may run: enabled by its manifest or
// the admin's switch, and every capability it requires present.
func pluginOn(p *plugins.Plugin, sw plugins.Switches) bool {
	on := p.Enabled
	if v, ok := sw[pluginSwitch(p.ID)]; ok {
		on = v
	}
	return on && len(p.Missing) == 0
}

// ruleOn reports whether r runs for users who did not disable it: enabled
// by its file or the admin's switch, in a plugin that is on.
func ruleOn(set *plugins.Set, r *plugins.Rule, sw plugins.Switches) bool {
	on := r.Enabled
	if v, ok := sw[r.Key()]; ok {
		on = v
	}
	if r.PluginID != "" {
		p := set.Plugin(r.PluginID)
		on = on && p != nil && pluginOn(p, sw)
	}
	return on
}

// RulesAdmin serves the admin API under /admin/v1/agents/ (the caller is
// an admin: the server checked it):
//
//	GET  /admin/v1/agents/rules                  rules and plugins, status, recent executions
//	POST /admin/v1/agents/rules/{key}/enable     (and /disable) an admin switch
//	POST /admin/v1/agents/plugins/{id}/enable    (and /disable)
//	POST /admin/v1/agents/reload                 re-read the files
//	GET  /admin/v1/agents/executions?rule=&user=&limit=
func (h *Handlers) RulesAdmin() http.Handler {
	return http.HandlerFunc(h.serveRulesAdmin)
}

// adminError is an error answer of the rules admin API, in the server's
// error shape.
type adminError struct {
	status        int
	code, message string
}

func (e *adminError) Error() string { return e.message }

func adminErrorf(status int, code, format string, args ...any) *adminError {
	return &adminError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// writeAdminError answers err; an error that is not an *adminError is a
// 500 whose detail goes to the log only.
func (h *Handlers) writeAdminError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *adminError
	if !errors.As(err, &ae) && forbidden(err) {
		// The admin's own configuration is in the way: say which.
		h.log.Error("rules admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = adminErrorf(http.StatusInternalServerError, "INTERNAL", "The security rules do not let the agent runtime's service key use its documents: %s.", ungrantedHelp)
	}
	if ae == nil {
		h.log.Error("rules admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = adminErrorf(http.StatusInternalServerError, "INTERNAL", "Internal server error.")
	}
	writeJSON(w, ae.status, map[string]any{"code": ae.code, "message": ae.message})
}

func (h *Handlers) serveRulesAdmin(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, RulesAdminPrefix)
	if !ok {
		p = r.URL.Path // mounted with the prefix stripped
	}
	p = strings.Trim(p, "/")
	var err error
	switch {
	case h.cfg.Rules == nil:
		err = adminErrorf(http.StatusNotFound, "NOT_FOUND", "Lifecycle rules are not enabled on this server.")
	case p == "rules":
		err = h.adminOnly(w, r, http.MethodGet, h.adminListRules)
	case p == "reload":
		err = h.adminOnly(w, r, http.MethodPost, h.adminReload)
	case p == "executions":
		err = h.adminOnly(w, r, http.MethodGet, h.adminExecutions)
	case strings.HasPrefix(p, "rules/") || strings.HasPrefix(p, "plugins/"):
		err = h.adminOnly(w, r, http.MethodPost, h.adminSwitch(p))
	default:
		err = adminErrorf(http.StatusNotFound, "NOT_FOUND", "No rules admin route %s.", truncate(r.URL.Path, 200))
	}
	if err != nil {
		h.writeAdminError(w, r, err)
	}
}

// adminOnly runs fn for method, else answers 405.
func (h *Handlers) adminOnly(w http.ResponseWriter, r *http.Request, method string, fn func(http.ResponseWriter, *http.Request) error) error {
	if r.Method != method {
		w.Header().Set("Allow", method)
		return adminErrorf(http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "Use %s.", method)
	}
	return fn(w, r)
}

// ruleView is a rule in GET /admin/v1/agents/rules.
type ruleView struct {
	Key         string `json:"key"`
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version,omitempty"`
	Plugin      string `json:"plugin,omitempty"`
	Hook        string `json:"hook"`
	Priority    int    `json:"priority"`
	Core        bool   `json:"core"`
	Condition   string `json:"condition"` // "cel" or "lua"
	Action      string `json:"action"`
	Source      string `json:"source"`
	// FileEnabled is the file's enabled; Switch the admin's (nil: none);
	// Effective whether the rule runs (its plugin on too).
	FileEnabled bool  `json:"fileEnabled"`
	Switch      *bool `json:"switch"`
	Effective   bool  `json:"effective"`
}

// pluginView is a plugin in GET /admin/v1/agents/rules.
type pluginView struct {
	ID          string                 `json:"id"`
	Name        string                 `json:"name,omitempty"`
	Version     string                 `json:"version,omitempty"`
	Description string                 `json:"description,omitempty"`
	Dir         string                 `json:"dir"`
	Builtin     bool                   `json:"builtin"`
	Requires    []string               `json:"requires"`
	Missing     []string               `json:"missing"`
	Available   bool                   `json:"available"`
	FileEnabled bool                   `json:"fileEnabled"`
	Switch      *bool                  `json:"switch"`
	Effective   bool                   `json:"effective"`
	Rules       []string               `json:"rules"`
	Settings    map[string]settingView `json:"settings"`
}

// settingView is a plugin's setting in GET /admin/v1/agents/rules.
type settingView struct {
	Type        string   `json:"type"`
	Default     any      `json:"default"`
	Description string   `json:"description,omitempty"`
	Min         *float64 `json:"min,omitempty"`
	Max         *float64 `json:"max,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// recentExecutions is how many executions GET /admin/v1/agents/rules shows.
const recentExecutions = 20

func (h *Handlers) adminListRules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	set := h.cfg.Rules.Set()
	sw, err := h.switches(ctx)
	if err != nil {
		return err
	}
	switchOf := func(key string) *bool {
		if v, ok := sw[key]; ok {
			return &v
		}
		return nil
	}
	rules := make([]ruleView, 0, len(set.Rules))
	for _, rl := range set.Rules {
		cond := "cel"
		if rl.Script != "" {
			cond = "lua"
		}
		rules = append(rules, ruleView{
			Key: rl.Key(), ID: rl.ID, Name: rl.Name, Description: rl.Description, Version: rl.Version,
			Plugin: rl.PluginID, Hook: string(rl.Trigger), Priority: rl.Priority, Core: rl.Core,
			Condition: cond, Action: string(rl.Action.Type), Source: rl.Source,
			FileEnabled: rl.Enabled, Switch: switchOf(rl.Key()), Effective: ruleOn(set, rl, sw),
		})
	}
	plugs := make([]pluginView, 0, len(set.Plugins))
	for _, p := range set.Plugins {
		keys := make([]string, len(p.Rules))
		for i, rl := range p.Rules {
			keys[i] = rl.Key()
		}
		plugs = append(plugs, pluginView{
			ID: p.ID, Name: p.Name, Version: p.Version, Description: p.Description, Dir: p.Dir, Builtin: p.Builtin,
			Requires: nonNil(p.Requires), Missing: nonNil(p.Missing), Available: len(p.Missing) == 0,
			FileEnabled: p.Enabled, Switch: switchOf(pluginSwitch(p.ID)), Effective: pluginOn(p, sw),
			Rules: keys, Settings: settingViews(p.Settings),
		})
	}
	out := map[string]any{"rules": rules, "plugins": plugs, "lastReload": h.lastReload()}
	recent, err := h.listExecutions(ctx, "", "", recentExecutions)
	switch {
	case forbidden(err):
		// The rules and switches are worth showing without the log.
		recent = []map[string]any{}
		out["recentExecutionsError"] = "the security rules do not let the runtime read agent-rule-log: " + ungrantedHelp
	case err != nil:
		return err
	}
	out["recentExecutions"] = recent
	writeJSON(w, http.StatusOK, out)
	return nil
}

func settingViews(in map[string]plugins.Setting) map[string]settingView {
	out := make(map[string]settingView, len(in))
	for name, st := range in {
		out[name] = settingView{Type: st.Type, Default: st.Default, Description: st.Description, Min: st.Min, Max: st.Max, Options: st.Options}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (h *Handlers) adminReload(w http.ResponseWriter, r *http.Request) error {
	if h.cfg.LoadRules == nil {
		return adminErrorf(http.StatusNotFound, "NOT_FOUND", "This runtime has no rule files to reload.")
	}
	if err := h.ReloadRules(r.Context()); err != nil {
		// The files are the admin's: say what is wrong in them.
		return adminErrorf(http.StatusBadRequest, "BAD_REQUEST", "The rules did not reload; the previous rules stay in force: %s",
			h.lastReload().Error)
	}
	set := h.cfg.Rules.Set()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "rules": len(set.Rules), "plugins": len(set.Plugins)})
	return nil
}

// adminSwitch serves POST .../rules/{key}/enable|disable and
// .../plugins/{id}/enable|disable (p without the prefix). A rule key holds
// a "/" for a plugin's rule: everything between "rules/" and the last
// segment is the key.
func (h *Handlers) adminSwitch(p string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		i := strings.LastIndexByte(p, '/')
		kind, rest, _ := strings.Cut(p[:i], "/")
		var on bool
		switch p[i+1:] {
		case "enable":
			on = true
		case "disable":
		default:
			return adminErrorf(http.StatusNotFound, "NOT_FOUND", "Use .../enable or .../disable.")
		}
		if rest == "" {
			return adminErrorf(http.StatusNotFound, "NOT_FOUND", "Name a %s.", strings.TrimSuffix(kind, "s"))
		}
		set := h.cfg.Rules.Set()
		var key string
		var missing []string
		var owner string
		switch kind {
		case "rules":
			rl := set.Rule(rest)
			if rl == nil {
				return adminErrorf(http.StatusNotFound, "NOT_FOUND", "No rule %q.", truncate(rest, 200))
			}
			key = rl.Key()
			if p := set.Plugin(rl.PluginID); p != nil {
				missing, owner = p.Missing, "its plugin "+p.ID
			}
		default: // plugins
			pl := set.Plugin(rest)
			if pl == nil {
				return adminErrorf(http.StatusNotFound, "NOT_FOUND", "No plugin %q.", truncate(rest, 200))
			}
			key, missing, owner = pluginSwitch(pl.ID), pl.Missing, "plugin "+pl.ID
		}
		if on && len(missing) > 0 {
			return adminErrorf(http.StatusConflict, "CONFLICT",
				"%s cannot run: %s requires capabilities this runtime lacks: %s (add the tools, then reload).",
				rest, owner, strings.Join(missing, ", "))
		}
		if err := h.setSwitch(r.Context(), key, on); err != nil {
			return err
		}
		h.log.Info("rule switch set by an admin", "key", key, "enabled", on)
		out := map[string]any{"key": key, "enabled": on}
		sw, _ := h.switches(r.Context())
		if kind == "rules" {
			out["effective"] = ruleOn(set, set.Rule(rest), sw)
		} else {
			out["effective"] = pluginOn(set.Plugin(rest), sw)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}
