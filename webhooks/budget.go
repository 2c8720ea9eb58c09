package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// Defaults of the per-user limits.
const (
	// DefaultUserTokensPerDay is how many LLM tokens (prompt + completion)
	// one user's runs may use per UTC day.
	DefaultUserTokensPerDay = 200_000
	// DefaultUserConcurrentRuns is how many of a user's queries may be in
	// progress (have a pending or running task) at once.
	DefaultUserConcurrentRuns = 3
	// usageCASAttempts bounds the retries of a usage update that lost a
	// race with another of the user's runs.
	usageCASAttempts = 16
)

// limitError is a per-user limit that stops a run. Its message is what the
// user reads in the chat.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// asLimit returns the limit error in err, if any.
func asLimit(err error) (*limitError, bool) {
	var le *limitError
	ok := errors.As(err, &le)
	return le, ok
}

// usagePath is the user's usage record of the UTC day of t. The default
// rules let the user read it but not write it.
func usagePath(uid string, t time.Time) string {
	return "users/" + uid + "/agent-usage/" + t.UTC().Format("2006-01-02")
}

// complete is every LLM call the runtime makes for a user: it refuses with
// a limitError, before any request is sent, once the user's tokens of the
// day are spent, and it adds what the call used to the user's usage.
func (h *Handlers) complete(ctx context.Context, uid string, req llm.Request) (*llm.Response, error) {
	return h.completeSeen(ctx, uid, req, nil)
}

// completeSeen is complete starting from seen, the usage record the
// handler read just before (a hook's turn.token_usage), when it is of
// today: one read of the record per step, not one for the hook and one for
// the call. Nil reads it.
func (h *Handlers) completeSeen(ctx context.Context, uid string, req llm.Request, seen *usageRead) (*llm.Response, error) {
	usage, err := h.checkTokens(ctx, uid, promptEstimate(req), seen)
	if err != nil {
		return nil, err
	}
	res, err := h.model.Complete(ctx, req)
	if res != nil && res.Usage.TotalTokens > 0 {
		// Failing the handler here would make the delivery retry and pay
		// for the same call again: record what can be recorded and go on.
		if uerr := h.addUsage(ctx, uid, int64(res.Usage.TotalTokens), usage); uerr != nil {
			h.log.Error("agent usage not recorded", "user", uid, "tokens", res.Usage.TotalTokens, "err", uerr)
		}
	}
	return res, err
}

// checkTokens fails with a limitError when the user has used their tokens
// of the day, or when a request whose prompt is estimated at prompt tokens
// would go beyond them: a user's documents can make one prompt large (the
// chat history, a long instruction), and usage is known only after the
// call. A usage record the runtime could not have written (a negative or
// non-integer count) counts as spent. It returns the usage record it read
// (nil: none, or none read), which addUsage tries first. seen, when it is
// today's record, is taken as read.
func (h *Handlers) checkTokens(ctx context.Context, uid string, prompt int64, seen *usageRead) (*usageRead, error) {
	limit := h.cfg.UserTokensPerDay
	if limit < 0 {
		return nil, nil
	}
	read, err := h.readUsage(ctx, uid, seen)
	if err != nil {
		return nil, err
	}
	d := read.doc
	used := int64(0)
	if d != nil {
		n, ok := collections.Int64(d.Data["tokens"])
		if !ok || n < 0 {
			n = int64(limit)
		}
		used = n
	}
	if used >= int64(limit) {
		return nil, &limitError{fmt.Sprintf("Daily token budget of %d tokens reached; resets at 00:00 UTC.", limit)}
	}
	if left := int64(limit) - used; prompt > left {
		return nil, &limitError{fmt.Sprintf("This request needs about %d tokens, more than the %d left of the daily token budget of %d tokens; it resets at 00:00 UTC.", prompt, left, limit)}
	}
	return read, nil
}

// usageRead is a usage record as checkTokens read it at path (doc nil:
// there was none).
type usageRead struct {
	path string
	doc  *collections.Document
}

// readUsage reads the user's usage record of today, or takes seen when it
// is that record.
func (h *Handlers) readUsage(ctx context.Context, uid string, seen *usageRead) (*usageRead, error) {
	path := usagePath(uid, time.Now())
	if seen != nil && seen.path == path {
		return seen, nil
	}
	d, err := h.getOpt(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("agent usage: %w", err)
	}
	return &usageRead{path: path, doc: d}, nil
}

// promptEstimate estimates the prompt tokens of req from its text, at
// four bytes a token (English prose; other scripts take more tokens per
// byte, so this bounds the overshoot of one call rather than prevents it).
func promptEstimate(req llm.Request) int64 {
	var n int
	for _, m := range req.Messages {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
	}
	return int64((n + 3) / 4)
}

// addUsage adds tokens to the user's usage record of the day, with
// compare-and-swap: runs of one user update it concurrently. The first
// attempt starts from seen, the record checkTokens read before the call,
// when it is of the same day: usually nothing wrote it since, and a write
// in between only makes that attempt conflict.
func (h *Handlers) addUsage(ctx context.Context, uid string, tokens int64, seen *usageRead) error {
	now := time.Now()
	path := usagePath(uid, now)
	for range usageCASAttempts {
		var d *collections.Document
		var err error
		if seen != nil && seen.path == path {
			d, seen = seen.doc, nil
		} else if d, err = h.getOpt(ctx, path); err != nil {
			return err
		}
		if d == nil {
			_, err = h.docs.Create(ctx, path, map[string]any{
				"userId": uid, "day": now.UTC().Format("2006-01-02"), "tokens": tokens, "llmRequests": 1,
			})
		} else {
			_, err = h.docs.Update(ctx, path, map[string]any{
				"tokens": max(num(d, "tokens"), 0) + tokens, "llmRequests": num(d, "llmRequests") + 1,
			}, d.Version)
		}
		if errors.Is(err, collections.ErrAlreadyExists) || errors.Is(err, collections.ErrPreconditionFailed) {
			continue // another run of the user's wrote first: read it again
		}
		return err
	}
	return fmt.Errorf("agent usage %s: still conflicting after %d attempts", path, usageCASAttempts)
}

// checkRuns fails with a limitError when the user already has as many
// queries in progress as they may: a query is in progress while one of the
// tasks it started is pending or running (a task waiting for the user
// spends nothing and does not count). msg is the query being started.
func (h *Handlers) checkRuns(ctx context.Context, c chat, msg *collections.Document) error {
	limit := h.cfg.UserConcurrentRuns
	if limit < 0 {
		return nil
	}
	runs := map[string]bool{}
	// One query per status, each an equality on the user and the status:
	// the engine pushes equalities (not "in") down to the declared
	// (userId, status) index, so this reads the user's active tasks only,
	// not every task of every user.
	for _, status := range []string{"pending", "running"} {
		if len(runs) >= limit {
			break
		}
		tasks, err := h.docs.Query(ctx, collections.Query{
			Collection: "users/" + c.uid + "/orch-chats/*/tasks",
			Filters:    []collections.Filter{eq("userId", c.uid), eq("status", status)},
			Limit:      maxActiveTasksRead,
		})
		if err != nil {
			return fmt.Errorf("agent runs: %w", err)
		}
		for _, t := range tasks {
			if len(runs) >= limit {
				break
			}
			if !h.seals.valid(t, taskSeal) {
				continue // not the runtime's: runs nothing
			}
			run := t.Collection + "/" + str(t, "triggerMessageId")
			if run != c.tasks()+"/"+msg.ID {
				runs[run] = true
			}
		}
	}
	if len(runs) >= limit {
		return &limitError{fmt.Sprintf("Too many requests in progress (at most %d at once); ask again when one has finished.", limit)}
	}
	return nil
}

// maxActiveTasksRead bounds the tasks checkRuns reads per status.
const maxActiveTasksRead = 1000
