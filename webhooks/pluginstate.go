package webhooks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/loomdb/loom/collections"
)

// A plugin's state for one user and chat lives in
// users/{uid}/orch-chats/{chat}/plugin-state/{pluginId | "standalone"}:
//
//	{"values": {...}, "applied": [effect ids], "runtimeSeal": ...}
//
// sealed over its path, values and applied. Users cannot write below
// orch-chats/ (the default security rules), and a document that fails the
// seal counts as empty state, so a state no rule wrote never reaches a
// condition. "applied" lists the last set_state effects written (their ids
// derive from the hook occurrence and the rule): a redelivered hook finds
// its write done and does not apply it twice (a counter counts once).
var pluginStateSeal = []string{"values", "applied"}

const (
	// stateAppliedKeep is how many recent effect ids a state document
	// remembers for redeliveries.
	stateAppliedKeep = 64
	// stateCASAttempts bounds the evaluations of a hook whose state write
	// lost a race with another of the chat's hooks (then the delivery
	// retries).
	stateCASAttempts = 5
)

// stateKeyRe is what a state key may be: it becomes a field name.
var stateKeyRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func validStateKey(k string) bool { return stateKeyRe.MatchString(k) }

// stateDocID is the state document's id of a plugin ("" is the standalone
// rules').
func stateDocID(pluginID string) string {
	if pluginID == "" {
		return "standalone"
	}
	return pluginID
}

func (c chat) pluginState(pluginID string) string {
	return c.path() + "/plugin-state/" + stateDocID(pluginID)
}

// stateSet is one set_state action of a hook.
type stateSet struct {
	key     string
	value   any
	applied string // the effect's id
	eval    int
}

// readStates reads the state document of each plugin in ids (nil for
// none; stateValues says what the rules see of it).
func (h *Handlers) readStates(ctx context.Context, c chat, ids []string) (map[string]*collections.Document, error) {
	out := make(map[string]*collections.Document, len(ids))
	for _, id := range ids {
		d, err := h.getOpt(ctx, c.pluginState(id))
		if err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, nil
}

// stateValues are a state document's values (empty when there is none or
// it is not the runtime's).
func (h *Handlers) stateValues(d *collections.Document) map[string]any {
	if d == nil {
		return map[string]any{}
	}
	if !h.seals.valid(d, pluginStateSeal) {
		h.log.Warn("rules: ignoring a plugin state the runtime did not write", "path", d.Path)
		return map[string]any{}
	}
	v, _ := d.Data["values"].(map[string]any)
	if v == nil {
		return map[string]any{}
	}
	return plainMap(v)
}

// errStateMoved is a state write that lost a race with another hook of
// the chat (a tool's hooks and another tool's run concurrently): the
// values were rendered from the state before, so the hook's rules are
// evaluated again over the new one.
var errStateMoved = errors.New("plugin state changed while the rules ran")

// writeState merges the set_state actions of one hook into the plugin's
// state d, the document the rules were evaluated over (nil: none), with
// compare-and-swap on it. Actions whose effect id the document lists were
// written by an earlier delivery and are skipped. Over maxStateBytes the
// write fails and nothing is written.
func (h *Handlers) writeState(ctx context.Context, c chat, pluginID string, d *collections.Document, sets []stateSet) error {
	path := c.pluginState(pluginID)
	values := h.stateValues(d)
	var applied []any
	if d != nil && h.seals.valid(d, pluginStateSeal) {
		applied, _ = d.Data["applied"].([]any)
	}
	changed := false
	for _, s := range sets {
		if slices.Contains(applied, any(s.applied)) {
			continue // a redelivery: written before
		}
		values[s.key] = plainValue(s.value)
		applied = append(applied, s.applied)
		changed = true
	}
	if !changed {
		return nil
	}
	if len(applied) > stateAppliedKeep {
		applied = applied[len(applied)-stateAppliedKeep:]
	}
	b, err := canonicalJSON(values)
	if err != nil {
		return fmt.Errorf("%w: state is not JSON: %v", errActionRefused, err)
	}
	if len(b) > maxStateBytes {
		return fmt.Errorf("%w: state of %d bytes would be over the %d-byte limit", errActionRefused, len(b), maxStateBytes)
	}
	sealed := h.seals.seal(path, map[string]any{"values": values, "applied": applied}, pluginStateSeal)
	if d == nil {
		_, err = h.docs.Create(ctx, path, map[string]any{
			"userId": c.uid, "chatId": c.id, "pluginId": pluginID,
			"values": values, "applied": applied, sealField: sealed[sealField],
		})
	} else {
		// An update deep-merges: drop the old values, then set each
		// (keys hold no dots), so the stored values are exactly the
		// sealed ones.
		patch := map[string]any{"values": nil, "applied": applied, sealField: sealed[sealField]}
		for k, v := range values {
			patch["values."+k] = v
		}
		_, err = h.docs.Update(ctx, path, patch, d.Version)
	}
	if errors.Is(err, collections.ErrAlreadyExists) || errors.Is(err, collections.ErrPreconditionFailed) {
		return fmt.Errorf("plugin state %s: %w", path, errStateMoved)
	}
	return err
}
