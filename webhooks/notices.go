package webhooks

import (
	"context"
	"fmt"
	"slices"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
)

// orchestratorTarget is the target of the notifications for the chat's
// next orchestrator decision.
const orchestratorTarget = "orchestrator"

// maxNotices bounds the notifications one prompt carries.
const maxNotices = 20

// notificationSeal are the fields a notification is sealed over: what
// reaches the model.
var notificationSeal = []string{"target", "message", "category", "priority", "deliverAt", "ruleKey"}

// eventSeal are the fields an agent event is sealed over (receivers that
// share the secret's runtime can tell the runtime's events from others).
var eventSeal = []string{"type", "payload", "ruleKey", "pluginId", "hook"}

func (c chat) notifications() string { return c.path() + "/notifications" }
func (c chat) events() string        { return c.path() + "/agent-events" }

// notice is a notify_self notification for a prompt: fired at the hook
// that builds the prompt, or a pending document (id set) of an earlier one.
type notice struct {
	message, category, priority, deliverAt string
	id                                     string // the pending document's id ("" when fired for this prompt)
	createdAt                              int64
}

// notifySelf is the notify_self action: at on_query_start and
// on_turn_start the notice for the prompt being built; at any other hook a
// pending notification document for the target's next prompt (once per
// occurrence and rule).
func (h *Handlers) notifySelf(ctx context.Context, call hookCall, f plugins.Fired) (*notice, error) {
	a := f.Action
	if len(a.Message) > maxActionText {
		return nil, fmt.Errorf("%w: message of %d bytes is over the %d-byte limit", errActionRefused, len(a.Message), maxActionText)
	}
	n := notice{message: a.Message, category: orDefault(a.Category, "info"), priority: orDefault(a.Priority, "normal"),
		deliverAt: orDefault(a.DeliverAt, "turn_start")}
	if len(n.category) > 64 {
		n.category = truncate(n.category, 64)
	}
	if promptHook(call.hook) {
		return &n, nil
	}
	if call.target == "" {
		return nil, fmt.Errorf("%w: no agent to notify at %s", errActionRefused, call.hook)
	}
	path := call.c.notifications() + "/" + effectID(call, f.Rule.Key())
	_, err := h.createOnce(ctx, path, h.seals.seal(path, map[string]any{
		"userId": call.c.uid, "chatId": call.c.id, "target": call.target, "message": n.message,
		"category": n.category, "priority": n.priority, "deliverAt": n.deliverAt, "status": "pending",
		"ruleKey": f.Rule.Key(), "pluginId": f.Rule.PluginID, "hook": string(call.hook),
	}, notificationSeal))
	return nil, err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// notifiesLater reports whether a notify_self rule of the set in force
// writes pending notifications for target kind orchestrator (at
// on_session_end) or for a sub-agent (at the other hooks that build no
// prompt). When none does, the prompt builders skip the query.
func (h *Handlers) notifiesLater(orchestrator bool) bool {
	if h.cfg.Rules == nil {
		return false
	}
	for _, r := range h.cfg.Rules.Set().Rules {
		if r.Action.Type != plugins.NotifySelf || promptHook(r.Trigger) {
			continue
		}
		if (r.Trigger == plugins.OnSessionEnd) == orchestrator {
			return true
		}
	}
	return false
}

// pendingNotices returns the sealed pending notifications for target in
// chat c (none when no rule writes them).
func (h *Handlers) pendingNotices(ctx context.Context, c chat, target string) ([]notice, error) {
	if !h.notifiesLater(target == orchestratorTarget) {
		return nil, nil
	}
	docs, err := h.docs.Query(ctx, collections.Query{
		Collection: c.notifications(),
		Filters:    []collections.Filter{eq("target", target), eq("status", "pending")},
		Limit:      maxNotices,
	})
	if err != nil {
		if permanent(err) {
			h.log.Warn("rules: reading pending notifications failed; the prompt goes without them", "user", c.uid, "chat", c.id, "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("pending notifications: %w", err)
	}
	var out []notice
	for _, d := range docs {
		if !h.seals.valid(d, notificationSeal) {
			continue // not the runtime's: it does not reach the model
		}
		out = append(out, notice{message: str(d, "message"), category: str(d, "category"),
			priority: str(d, "priority"), deliverAt: str(d, "deliverAt"), id: d.ID, createdAt: d.CreatedAt})
	}
	return out, nil
}

// priorityRank orders notifications: higher first.
func priorityRank(p string) int {
	switch p {
	case "critical":
		return 3
	case "high":
		return 2
	case "low":
		return 0
	}
	return 1
}

// promptNotices are the notifications a prompt carries, in order: higher
// priority first (then older first), at most maxNotices. The prompt
// builders record as delivered only the pending ones among them: one that
// did not fit stays pending for a later prompt.
func promptNotices(notes []notice) []notice {
	notes = slices.Clone(notes)
	slices.SortStableFunc(notes, func(a, b notice) int {
		if d := priorityRank(b.priority) - priorityRank(a.priority); d != 0 {
			return d
		}
		return int(min(max(a.createdAt-b.createdAt, -1), 1))
	})
	if len(notes) > maxNotices {
		notes = notes[:maxNotices]
	}
	return notes
}

// withNotices places notifications in a prompt: each one a system message
// "[notification <category>/<priority>] <message>", in promptNotices'
// order, deliver_at "turn_start" right after the leading system messages,
// "immediately" as the last messages.
func withNotices(msgs []llm.Message, notes []notice) []llm.Message {
	if len(notes) == 0 {
		return msgs
	}
	notes = promptNotices(notes)
	var start, now []llm.Message
	for _, n := range notes {
		m := llm.Message{Role: "system", Content: "[notification " + n.category + "/" + n.priority + "] " + n.message}
		if n.deliverAt == "immediately" {
			now = append(now, m)
		} else {
			start = append(start, m)
		}
	}
	lead := 0
	for lead < len(msgs) && msgs[lead].Role == "system" {
		lead++
	}
	out := make([]llm.Message, 0, len(msgs)+len(notes))
	out = append(out, msgs[:lead]...)
	out = append(out, start...)
	out = append(out, msgs[lead:]...)
	return append(out, now...)
}

// noticeIDs are the ids of the pending notifications among notes (what a
// step or reply records as delivered in it).
func noticeIDs(notes []notice) []any {
	var ids []any
	for _, n := range notes {
		if n.id != "" {
			ids = append(ids, n.id)
		}
	}
	return ids
}

// markDelivered marks the pending notifications a step or reply (at path
// in, which lists them in its "notifications") carried as delivered in
// it. Ids are read from the runtime's own document, and only sealed,
// pending notifications of the chat are touched.
func (h *Handlers) markDelivered(ctx context.Context, c chat, in *collections.Document) error {
	ids, _ := in.Data["notifications"].([]any)
	for _, raw := range ids {
		id, _ := raw.(string)
		if !collections.ValidSegment(id) {
			continue
		}
		d, err := h.getOpt(ctx, c.notifications()+"/"+id)
		if err != nil {
			return fmt.Errorf("notification %s: %w", id, err)
		}
		if d == nil || str(d, "status") != "pending" || !h.seals.valid(d, notificationSeal) {
			continue
		}
		_, err = h.docs.Update(ctx, d.Path, map[string]any{"status": "delivered", "deliveredIn": in.Path}, d.Version)
		if err = ignoreConflict(err); err != nil {
			return fmt.Errorf("notification %s: %w", id, err)
		}
	}
	return nil
}
