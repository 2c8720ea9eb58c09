package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

// Bounds of what one rule's action may write: a user's documents reach the
// context and the templates, so a rule's output is bounded like any other
// input the runtime stores.
const (
	// maxActionText bounds a notification message and an event payload
	// (encoded as JSON).
	maxActionText = 16 << 10
	// maxStateBytes bounds a plugin's state values (encoded as JSON) for
	// one user and chat: a set_state that would go beyond it fails and
	// writes nothing.
	maxStateBytes = 64 << 10
	// maxContextText bounds each text of the user's (a message, a tool
	// result) as the rules' context carries it.
	maxContextText = 8 << 10
	// maxHistoryMessages is how many recent messages history.messages holds.
	maxHistoryMessages = 50
)

// hookCall is one occurrence of a hook point: where it happens and the
// parts of the context its caller knows. The rest (history, user, project,
// state) is read by runHook only when a rule at the hook reads it.
type hookCall struct {
	hook plugins.Hook
	c    chat
	// site identifies the occurrence (the document that triggered it and
	// the step), the same on every redelivery: the ids of the documents
	// the actions write derive from it, the hook and the rule key.
	site string
	// target receives the notifications of a hook that does not build a
	// prompt itself (a sub-agent id, or "orchestrator").
	target string
	// fill sets the parts of the context the caller knows (turn, event,
	// result, and history when needs asks for it). It runs only when a rule
	// at the hook can run.
	fill func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error
}

// promptHook reports whether notify_self at h goes straight into the
// prompt being built (no document): the hooks that run right before a
// model call.
func promptHook(h plugins.Hook) bool {
	return h == plugins.OnQueryStart || h == plugins.OnTurnStart
}

// runHook runs the rules at a hook point and carries out what fires. It
// returns the notify_self notices for the prompt being built (at
// on_query_start and on_turn_start; nil elsewhere). It returns at once
// when no rule at the hook could run.
//
// Errors: a document the hook needs that cannot be read for now (a
// transient error) is returned, so the delivery retries, and so is a
// transient failure to write the execution log; every effect is
// idempotent, so a retry writes nothing twice. A rule's own failure (its
// condition, its rendering, an action over a bound, a write the store
// refuses) is recorded in the execution log and never fails the run.
func (h *Handlers) runHook(ctx context.Context, call hookCall) ([]notice, error) {
	eng := h.cfg.Rules
	if eng == nil {
		return nil, nil
	}
	set := eng.Set()
	if len(set.ByHook(call.hook)) == 0 {
		return nil, nil // no rule at the hook: not even the switches are read
	}
	sw, err := h.switches(ctx)
	if err != nil {
		// The admin's switches are an override: the user's run must not
		// stall on them (a security rules file that does not let the
		// service key read agent-rules would stall every run for good).
		// Go on with the last switches known (none at first), and say so.
		h.log.Warn("rules: the admin's switches could not be read; using the last known", "hook", call.hook,
			"user", call.c.uid, "err", err)
	}
	// One set throughout: a reload in between must not hand rules a
	// context prepared for another set's needs.
	if !set.Active(call.hook, sw) {
		return nil, nil
	}
	needs := set.Needs(call.hook)
	var pc plugins.Context
	if call.fill != nil {
		err := call.fill(ctx, &pc, needs)
		if err = h.hookReadErr(call, "context", err); err != nil {
			return nil, err
		}
	}
	pc.User.ID = call.c.uid
	pc.Project.ID = call.c.id
	if pc.Event == nil {
		pc.Event = map[string]any{}
	}
	pc.Event["hook"] = string(call.hook)

	userDoc, err := h.userRuleSettings(ctx, call.c.uid)
	if err = h.hookReadErr(call, "user settings", err); err != nil {
		return nil, err
	}
	userDoc = plainMap(userDoc)
	if userDoc == nil {
		userDoc = map[string]any{}
	}
	disabled, settings, bad := set.UserScope(userDoc)
	if len(bad) > 0 {
		h.log.Warn("rules: ignoring invalid agent settings of the user", "user", call.c.uid, "dropped", bad)
	}
	if needs.User {
		pc.User.Settings = userDoc
	}
	if needs.Project {
		proj, err := h.projectSettings(ctx, call.c)
		if err = h.hookReadErr(call, "chat", err); err != nil {
			return nil, err
		}
		pc.Project.Settings = proj
	}
	scope := plugins.Scope{Disabled: disabled, Settings: settings, Switches: sw, Set: set}
	readState := needs.State || setsState(set, call.hook)
	for attempt := 1; ; attempt++ {
		var states map[string]*collections.Document
		if readState {
			states, err = h.readStates(ctx, call.c, runningPlugins(set, call.hook, sw, disabled))
			if err = h.hookReadErr(call, "plugin state", err); err != nil {
				return nil, err
			}
			values := make(map[string]map[string]any, len(states))
			for id, d := range states {
				values[id] = h.stateValues(d)
			}
			scope.State = func(pluginID string) map[string]any { return values[pluginID] }
		}
		fired, evals := eng.Evaluate(ctx, call.hook, &pc, scope)
		notices, err := h.carryOut(ctx, call, fired, evals, states)
		if errors.Is(err, errStateMoved) && attempt < stateCASAttempts {
			// Another hook of the chat wrote a state these rules read:
			// their values were rendered from the old one (a counter
			// would count once for both). Evaluate again over the new
			// state; the effects already written are not written twice.
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := h.recordEvaluations(ctx, call.c, call.hook, call.site, evals); err != nil {
			return nil, err
		}
		return notices, nil
	}
}

// rulesAt reports whether the rules loaded now have a rule at hook (its
// switches aside): runHook would run something there.
func (h *Handlers) rulesAt(hook plugins.Hook) bool {
	return h.cfg.Rules != nil && len(h.cfg.Rules.Set().ByHook(hook)) > 0
}

// hookReadErr decides what a failed read of the hook's context means: a
// transient error is returned (the delivery retries); a permanent one (a
// document the store cannot give) is logged and the hook goes on without
// that part, since the user's run must not fail for it.
func (h *Handlers) hookReadErr(call hookCall, what string, err error) error {
	if err == nil {
		return nil
	}
	if permanent(err) {
		h.log.Warn("rules: reading the hook's context failed; going on without it", "hook", call.hook,
			"what", what, "user", call.c.uid, "chat", call.c.id, "err", err)
		return nil
	}
	return fmt.Errorf("rules %s: %s: %w", call.hook, what, err)
}

// carryOut carries out the fired actions in order and sets each one's
// Evaluation (Executed, or Err). set_state writes are gathered per plugin
// and written once per hook (rules later in the same hook saw the state as
// it was at the hook's start: the context is built before any rule runs).
//
// states are the state documents the rules were evaluated over (by plugin
// id; nil: none). A state write fails with errStateMoved when its document
// changed since.
func (h *Handlers) carryOut(ctx context.Context, call hookCall, fired []plugins.Fired, evals []plugins.Evaluation, states map[string]*collections.Document) ([]notice, error) {
	var notices []notice
	sets := map[string][]stateSet{}
	var stateOrder []string
	for _, f := range fired {
		key := f.Rule.Key()
		var err error
		switch f.Action.Type {
		case plugins.NotifySelf:
			var n *notice
			n, err = h.notifySelf(ctx, call, f)
			if n != nil {
				notices = append(notices, *n)
			}
		case plugins.Log:
			h.ruleLog(call, f)
		case plugins.SetState:
			if !validStateKey(f.Action.Key) {
				err = fmt.Errorf("state key %q is not 1–128 letters, digits, '_' or '-'", truncate(f.Action.Key, 64))
				break
			}
			if _, ok := sets[f.Rule.PluginID]; !ok {
				stateOrder = append(stateOrder, f.Rule.PluginID)
			}
			sets[f.Rule.PluginID] = append(sets[f.Rule.PluginID], stateSet{key: f.Action.Key,
				value: f.Action.Value, applied: effectID(call, key), eval: f.Eval})
			continue // settled with the plugin's write below
		case plugins.EmitEvent:
			err = h.emitEvent(ctx, call, f)
		default:
			err = fmt.Errorf("unknown action %q", f.Action.Type)
		}
		if err != nil && !permanent(err) && !errors.Is(err, errActionRefused) {
			return nil, fmt.Errorf("rules %s: rule %s: %w", call.hook, key, err)
		}
		settle(evals, f.Eval, err)
	}
	for _, pluginID := range stateOrder {
		err := h.writeState(ctx, call.c, pluginID, states[pluginID], sets[pluginID])
		if err != nil && !permanent(err) && !errors.Is(err, errActionRefused) {
			return nil, fmt.Errorf("rules %s: state of %s: %w", call.hook, stateDocID(pluginID), err)
		}
		for _, s := range sets[pluginID] {
			settle(evals, s.eval, err)
		}
	}
	return notices, nil
}

// errActionRefused marks an action the runtime does not carry out (over a
// bound, malformed): the rule's failure, recorded, not the run's.
var errActionRefused = errors.New("action refused")

// settle records an action's outcome on its Evaluation.
func settle(evals []plugins.Evaluation, i int, err error) {
	if i < 0 || i >= len(evals) {
		return
	}
	if err != nil {
		evals[i].Err = actionFailure(err)
		return
	}
	evals[i].Executed = true
}

// actionFailure says why an action failed, for the execution log (which
// admins read): the runtime's own wording, or the store's kind of refusal
// without its internals.
func actionFailure(err error) string {
	if errors.Is(err, errActionRefused) {
		return err.Error()
	}
	return "action failed: " + failureReason(err)
}

// effectID is the id of the document an action of rule key writes at the
// hook occurrence call: the same on every redelivery, distinct per hook,
// site and rule.
func effectID(call hookCall, ruleKey string) string {
	sum := sha256.Sum256([]byte(string(call.hook) + "\x00" + call.site + "\x00" + ruleKey))
	return deriveID(string(call.hook), "-", hex.EncodeToString(sum[:])[:idHashHex])
}

// ruleLog is the log action: one line at the rule's level.
func (h *Handlers) ruleLog(call hookCall, f plugins.Fired) {
	level := slog.LevelInfo
	switch f.Action.Level {
	case "debug":
		level = slog.LevelDebug
	case "warning", "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	h.log.Log(context.Background(), level, "rule: "+truncate(f.Action.Message, maxActionText), "rule", f.Rule.Key(),
		"hook", string(call.hook), "user", call.c.uid, "chat", call.c.id)
}

// emitEvent is the emit_event action: an event document in the chat's
// agent-events collection (where a trigger can route it), once per
// occurrence and rule.
func (h *Handlers) emitEvent(ctx context.Context, call hookCall, f plugins.Fired) error {
	payload := plainMap(f.Action.Payload)
	if payload == nil {
		payload = map[string]any{}
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("%w: payload is not JSON: %v", errActionRefused, err)
	}
	if len(b) > maxActionText {
		return fmt.Errorf("%w: payload of %d bytes is over the %d-byte limit", errActionRefused, len(b), maxActionText)
	}
	if f.Action.EventType == "" || len(f.Action.EventType) > 128 {
		return fmt.Errorf("%w: event_type must be 1–128 bytes", errActionRefused)
	}
	path := call.c.events() + "/" + effectID(call, f.Rule.Key())
	_, err = h.createOnce(ctx, path, h.seals.seal(path, map[string]any{
		"type": f.Action.EventType, "payload": payload, "ruleKey": f.Rule.Key(), "pluginId": f.Rule.PluginID,
		"hook": string(call.hook), "userId": call.c.uid, "chatId": call.c.id,
	}, eventSeal))
	return err
}

// runningPlugins are the plugins ("" for the standalone rules) of the rules
// at hook that can run for this user: enabled by their file or the admin,
// in an enabled, available plugin, not disabled by the user (core rules
// ignore that). Only their state is read.
func runningPlugins(set *plugins.Set, hook plugins.Hook, sw plugins.Switches, disabled map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range set.ByHook(hook) {
		if !set.Runs(r, sw, disabled) || seen[r.PluginID] {
			continue
		}
		seen[r.PluginID] = true
		out = append(out, r.PluginID)
	}
	return out
}

// setsState reports whether a set_state rule is at hook: its value
// template may read the state it adds to.
func setsState(set *plugins.Set, hook plugins.Hook) bool {
	for _, r := range set.ByHook(hook) {
		if r.Action.Type == plugins.SetState {
			return true
		}
	}
	return false
}

// projectSettings is the chat document's data without the runtime's
// fields: what context.project.settings shows.
func (h *Handlers) projectSettings(ctx context.Context, c chat) (map[string]any, error) {
	d, err := h.getOpt(ctx, c.path())
	if err != nil || d == nil {
		return map[string]any{}, err
	}
	out := make(map[string]any, len(d.Data))
	for k, v := range d.Data {
		if k == sealField || collections.IsEnvelopeField(k) {
			continue
		}
		out[k] = v
	}
	return plainMap(out), nil
}

// tokenUsage is the share of the user's daily token budget spent (0 when
// unlimited), as checkTokens counts it, with the record it read (nil when
// none was), which the step's model call takes as read.
func (h *Handlers) tokenUsage(ctx context.Context, uid string) (float64, *usageRead, error) {
	limit := h.cfg.UserTokensPerDay
	if limit <= 0 {
		return 0, nil, nil
	}
	read, err := h.readUsage(ctx, uid, nil)
	if err != nil || read.doc == nil {
		return 0, read, err
	}
	n, ok := collections.Int64(read.doc.Data["tokens"])
	if !ok || n < 0 {
		return 1, read, nil // counts as spent (checkTokens)
	}
	return float64(n) / float64(limit), read, nil
}

// plainMap converts a decoded document value (json.Number and the like)
// into the types rules see: int64 or float64 numbers, map[string]any and
// []any. A nil map stays nil.
func plainMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = plainValue(v)
	}
	return out
}

func plainValue(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case int:
		return int64(t)
	case int32:
		return int64(t)
	case float32:
		return float64(t)
	case map[string]any:
		return plainMap(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = plainValue(e)
		}
		return out
	case []string:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = e
		}
		return out
	}
	return v
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
