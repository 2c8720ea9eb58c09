package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

const (
	// maxLoggedEvaluations bounds the evaluations one log document holds
	// (one per rule at the hook): the document stays far below the size
	// limit whatever the set.
	maxLoggedEvaluations = 500
	// maxLoggedError bounds one evaluation's error text.
	maxLoggedError = 512
	// pruneEvery is how often one process prunes the log at most, unless
	// the last pruning deleted its whole quota (then it goes on at once).
	pruneEvery = time.Minute
	// pruneBatch and pruneBatches bound one pruning: the documents deleted
	// by one run (the next one continues).
	pruneBatch   = 200
	pruneBatches = 5
	// pruneTimeout bounds one pruning's time.
	pruneTimeout = 30 * time.Second
	// Executions listed by GET /admin/v1/agents/executions: by default and
	// at most.
	defaultExecutions = 50
	maxExecutions     = 500
)

// ruleLogID is the id of the log document of one hook evaluation: derived
// from the hook, the user and the site (the triggering document or
// event), so a redelivery of the same hook writes it once.
func ruleLogID(hook plugins.Hook, uid, site string) string {
	return deriveID(string(hook), "-", uid, "-", site)
}

// recordEvaluations writes the execution log of one hook evaluation in
// chat c (one document, its id derived from hook and site so a redelivery
// writes it once), counts it in the metrics and now and then prunes
// entries older than the retention. A transient failure to record is
// returned, so the delivery retries (the hook's effects are idempotent and
// the document's id is the same); a refusal that a retry cannot change
// (the security rules, an invalid document) is logged and lets the run go
// on.
func (h *Handlers) recordEvaluations(ctx context.Context, c chat, hook plugins.Hook, site string, evals []plugins.Evaluation) error {
	if len(evals) == 0 {
		return nil
	}
	now := h.rules.now()
	logged := evals[:min(len(evals), maxLoggedEvaluations)]
	entries := make([]any, len(logged))
	keys := make([]any, 0, len(logged))
	seen := make(map[string]bool, len(logged))
	for i, ev := range logged {
		entries[i] = map[string]any{
			"rule": ev.Rule, "plugin": ev.PluginID, "matched": ev.Matched, "executed": ev.Executed,
			"durationUs": ev.Duration.Microseconds(), "error": truncate(ev.Err, maxLoggedError),
		}
		if !seen[ev.Rule] {
			seen[ev.Rule] = true
			keys = append(keys, ev.Rule)
		}
	}
	data := map[string]any{
		"userId": c.uid, "chatId": c.id, "hook": string(hook), "site": site, "at": now.UnixMilli(),
		// rules lists the keys for the executions filter (array-contains).
		"rules": keys, "evaluations": entries,
	}
	if n := len(evals) - len(logged); n > 0 {
		data["truncated"] = n
	}
	path := ruleLogCollection + "/" + ruleLogID(hook, c.uid, site)
	_, err := h.docs.Create(ctx, path, data)
	switch {
	case err == nil:
		h.rules.logWrites.WithLabelValues("ok").Inc()
	case errors.Is(err, collections.ErrAlreadyExists):
		h.rules.logWrites.WithLabelValues("duplicate").Inc()
	case forbidden(err):
		h.rules.logWrites.WithLabelValues("error").Inc()
		h.warnUngranted(ruleLogCollection, err)
		return nil // and nothing to prune
	case permanent(err):
		h.rules.logWrites.WithLabelValues("error").Inc()
		h.log.Warn("could not record the rules' execution log", "hook", hook, "user", c.uid, "chat", c.id, "err", err)
	default:
		h.rules.logWrites.WithLabelValues("error").Inc()
		return fmt.Errorf("rules %s: execution log: %w", hook, err)
	}
	h.maybePruneRuleLog(now)
	return nil
}

// ruleLogRetention is how long log documents are kept.
func (h *Handlers) ruleLogRetention() time.Duration {
	if d := h.cfg.RuleLogRetention; d > 0 {
		return d
	}
	return DefaultRuleLogRetention
}

// maybePruneRuleLog starts a pruning in the background when none ran in
// this process for pruneEvery, or the last one was cut short by its quota
// (and none is running): a handler never waits for it.
func (h *Handlers) maybePruneRuleLog(now time.Time) {
	rs := h.rules
	last := rs.lastPrune.Load()
	if now.UnixNano()-last < int64(pruneEvery) || !rs.lastPrune.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	if !rs.pruning.CompareAndSwap(false, true) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
		defer cancel()
		n, err := h.pruneRuleLog(ctx, now.Add(-h.ruleLogRetention()))
		if err != nil {
			h.log.Warn("could not prune the rules' execution log", "err", err)
		}
		rs.pruning.Store(false)
		if n == pruneBatches*pruneBatch {
			// More may have expired than one run deletes: were the next
			// run a pruneEvery away, a log written faster than that would
			// grow without end. The next recorded evaluation starts it.
			rs.lastPrune.Store(0)
		}
	}()
}

// pruneRuleLog deletes log documents from before cutoff, oldest first, at
// most pruneBatches×pruneBatch of them, and returns how many it deleted.
func (h *Handlers) pruneRuleLog(ctx context.Context, cutoff time.Time) (int, error) {
	deleted := 0
	for range pruneBatches {
		docs, err := h.docs.Query(ctx, collections.Query{
			Collection: ruleLogCollection,
			Filters:    []collections.Filter{{Field: "at", Op: collections.OpLt, Value: cutoff.UnixMilli()}},
			OrderBy:    []collections.Order{{Field: "at"}},
			Limit:      pruneBatch,
		})
		if err != nil {
			return deleted, fmt.Errorf("list expired log entries: %w", err)
		}
		for _, d := range docs {
			if err := h.docs.Delete(ctx, d.Path); err != nil && !errors.Is(err, collections.ErrNotFound) {
				return deleted, fmt.Errorf("delete %s: %w", d.Path, err)
			}
			deleted++
			h.rules.logPruned.Inc()
		}
		if len(docs) < pruneBatch {
			break
		}
	}
	return deleted, nil
}

// listExecutions returns up to limit log documents, newest first, of the
// rule (key) and the user when named.
func (h *Handlers) listExecutions(ctx context.Context, rule, user string, limit int) ([]map[string]any, error) {
	q := collections.Query{
		Collection: ruleLogCollection,
		OrderBy:    []collections.Order{{Field: "at", Direction: "desc"}},
		Limit:      limit,
	}
	if user != "" {
		q.Filters = append(q.Filters, collections.Filter{Field: "userId", Op: collections.OpEq, Value: user})
	}
	if rule != "" {
		q.Filters = append(q.Filters, collections.Filter{Field: "rules", Op: collections.OpArrayContains, Value: rule})
	}
	docs, err := h.docs.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read the rules' execution log: %w", err)
	}
	out := make([]map[string]any, len(docs))
	for i, d := range docs {
		e := make(map[string]any, len(d.Data)+1)
		for k, v := range d.Data {
			if k != "rules" { // the filter's index, not news
				e[k] = v
			}
		}
		e["id"] = d.ID
		out[i] = e
	}
	return out, nil
}

// adminExecutions serves GET /admin/v1/agents/executions?rule=&user=&limit=.
func (h *Handlers) adminExecutions(w http.ResponseWriter, r *http.Request) error {
	qv := r.URL.Query()
	limit := defaultExecutions
	if s := qv.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxExecutions {
			return adminErrorf(http.StatusBadRequest, "BAD_REQUEST", "limit must be a number from 1 to %d.", maxExecutions)
		}
		limit = n
	}
	rule, user := qv.Get("rule"), qv.Get("user")
	if len(rule) > 300 || len(user) > collections.MaxIDBytes {
		return adminErrorf(http.StatusBadRequest, "BAD_REQUEST", "rule or user is too long.")
	}
	list, err := h.listExecutions(r.Context(), rule, user, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"executions": list})
	return nil
}
