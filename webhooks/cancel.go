package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/loomdb/loom/collections"
)

// Run statuses (docs/agent-runs.md, "Statuses").
const (
	statusCanceled = "canceled"
	// agentWaiting is a sub-agent waiting for an answer (the user's, an
	// agent's, a client tool's result); it was "waiting_for_user".
	agentWaiting = "waiting"
	// canceledFailure is the failure on_session_end sees for a canceled
	// task.
	canceledFailure = "canceled"
)

// unfinishedTaskStatuses are the task statuses a run can still leave: the
// ones a user may cancel.
var unfinishedTaskStatuses = []string{"pending", "running", "waiting", "waiting_tool"}

// taskFinished reports whether a task status is final: nothing starts for
// such a task any more.
func taskFinished(status string) bool {
	return status == "success" || status == "failed" || status == statusCanceled
}

// agentLive reports whether a sub-agent status is one a cancel settles.
func agentLive(status string) bool {
	return status == "active" || status == agentWaiting || status == legacyAgentWaiting
}

// casAttempts bounds the compare-and-swap retries of a status move that
// lost a race with another writer.
const casAttempts = 8

// casUpdate applies the patch next computes from the live document at
// path, with compare-and-swap (casDoc): on a conflict it reads the document
// again and asks next again. next returns nil when nothing (more) is to be
// written. A missing document is no error: nothing to do.
func (h *Handlers) casUpdate(ctx context.Context, path string, next func(cur *collections.Document) map[string]any) (*collections.Document, error) {
	return h.casUpdateOf(ctx, path, nil, next)
}

// casUpdateFrom is casUpdate first tried against known, the document as
// the caller read it, without reading it again.
func (h *Handlers) casUpdateFrom(ctx context.Context, known *collections.Document, next func(cur *collections.Document) map[string]any) (*collections.Document, error) {
	return h.casUpdateOf(ctx, known.Path, known, next)
}

func (h *Handlers) casUpdateOf(ctx context.Context, path string, known *collections.Document, next func(cur *collections.Document) map[string]any) (*collections.Document, error) {
	return h.casDoc(ctx, path, known, casAttempts, func(cur *collections.Document) map[string]any {
		if cur == nil {
			return nil
		}
		return next(cur)
	})
}

// casDoc writes the document at path with compare-and-swap: fn gets its
// current state (nil: none) and returns the patch (or, for a missing
// document, the data to create it), or nil to write nothing, which
// returns the state fn got. known is a first guess of that state (nil:
// read it), from a handler that has just read or written the document. A
// write that lost a race (the version moved, or another writer created
// it) reads the document and asks fn again, at most attempts times.
func (h *Handlers) casDoc(ctx context.Context, path string, known *collections.Document, attempts int, fn func(cur *collections.Document) map[string]any) (*collections.Document, error) {
	if known != nil && known.Version <= 0 {
		known = nil // not read from the store: an update at version 0 would be unconditional
	}
	for range attempts {
		cur, err := known, error(nil)
		if known == nil {
			if cur, err = h.getOpt(ctx, path); err != nil {
				return nil, err
			}
		}
		known = nil
		patch := fn(cur)
		if patch == nil {
			return cur, nil
		}
		var d *collections.Document
		if cur == nil {
			d, err = h.docs.Create(ctx, path, patch)
		} else {
			d, err = h.docs.Update(ctx, path, patch, cur.Version)
		}
		if errors.Is(err, collections.ErrAlreadyExists) || errors.Is(err, collections.ErrPreconditionFailed) {
			continue
		}
		return d, err
	}
	return nil, fmt.Errorf("%s: still conflicting after %d attempts", path, attempts)
}

// moveAgent moves a live sub-agent (active or waiting) to status,
// compare-and-swap: a sub-agent that has ended (canceled by a settlement
// that ran meanwhile, completed, failed) is never moved back, whatever the
// caller read before. It returns the sub-agent as it now is (nil: none).
func (h *Handlers) moveAgent(ctx context.Context, path, status string) (*collections.Document, error) {
	return h.casUpdate(ctx, path, func(cur *collections.Document) map[string]any {
		if st := str(cur, "status"); st == status || !agentLive(st) {
			return nil
		}
		return map[string]any{"status": status}
	})
}

// cancelTask moves a sealed, unfinished task to canceled (version-checked),
// naming who canceled it.
func (h *Handlers) cancelTask(ctx context.Context, path, by string) error {
	_, err := h.cancelTaskDoc(ctx, path, by)
	return err
}

// cancelTaskDoc is cancelTask returning the task as it now is (nil: none).
func (h *Handlers) cancelTaskDoc(ctx context.Context, path, by string) (*collections.Document, error) {
	return h.casUpdate(ctx, path, func(cur *collections.Document) map[string]any {
		if !h.seals.valid(cur, taskSeal) || taskFinished(str(cur, "status")) {
			return nil
		}
		return map[string]any{"status": statusCanceled, "canceledBy": by}
	})
}

// settleCanceled is orchestrator-finalize for a canceled task: it records
// who canceled it (the user, when nobody said), ends its sub-agent
// (on_session_end with the failure "canceled", then status canceled),
// cancels the sub-agent's pending tool calls and the task's child tasks,
// and last writes a short notice into the chat (the task's result
// message, kind "notice"). Every step is idempotent, so a redelivery
// finishes what a crash left.
func (h *Handlers) settleCanceled(ctx context.Context, c chat, task *collections.Document) error {
	task, err := h.casUpdate(ctx, task.Path, func(cur *collections.Document) map[string]any {
		if str(cur, "status") != statusCanceled || str(cur, "canceledBy") != "" {
			return nil
		}
		return map[string]any{"canceledBy": "user"}
	})
	if err != nil || task == nil || str(task, "status") != statusCanceled {
		return err
	}
	if str(task, "type") == "agent" {
		if err := h.cancelSubAgent(ctx, c, task); err != nil {
			return err
		}
	}
	children, err := h.docs.Query(ctx, collections.Query{
		Collection: c.tasks(), Filters: []collections.Filter{eq("userId", c.uid), eq("parentTaskId", task.ID)}, Limit: maxActiveTasksRead,
	})
	if err != nil {
		return fmt.Errorf("child tasks: %w", err)
	}
	for _, child := range children {
		if err := h.cancelTask(ctx, child.Path, "parent"); err != nil {
			return err
		}
	}
	path := c.messages() + "/" + resultID(task.ID)
	if _, err := h.createOnce(ctx, path, h.seals.seal(path, map[string]any{
		"userId": c.uid, "chatId": c.id, "role": "assistant", "kind": "notice", "status": statusCanceled,
		"content": cancelNotice(task), "taskId": task.ID, "replyTo": str(task, "triggerMessageId"),
	}, chatMessageSeal)); err != nil {
		return err
	}
	return h.maybeIdle(ctx, c)
}

// cancelSubAgent ends the sub-agent of a canceled agent task and cancels
// its pending tool calls (a call in flight finds itself canceled and
// writes no tool message).
func (h *Handlers) cancelSubAgent(ctx context.Context, c chat, task *collections.Document) error {
	sa := task.ID
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil || agent == nil || !h.seals.valid(agent, subAgentSeal) {
		return err
	}
	if agentLive(str(agent, "status")) {
		msgs, err := h.subMessages(ctx, c, sa)
		if err != nil {
			return err
		}
		if err := h.sessionEndHook(ctx, c, sa, agent, task, msgs, "", canceledFailure); err != nil {
			return err
		}
		if _, err := h.moveAgent(ctx, agent.Path, statusCanceled); err != nil {
			return err
		}
	}
	return h.cancelPendingCalls(ctx, c, sa)
}

// cancelPendingCalls moves the pending tool calls of sub-agent sa to
// canceled: its task has ended, so no client app is to run them and no
// result of theirs is wanted.
func (h *Handlers) cancelPendingCalls(ctx context.Context, c chat, sa string) error {
	calls, err := h.docs.Query(ctx, collections.Query{
		Collection: c.toolCalls(sa), Filters: []collections.Filter{eq("status", "pending")}, Limit: maxActiveTasksRead,
	})
	if err != nil {
		return fmt.Errorf("pending tool calls: %w", err)
	}
	for _, tc := range calls {
		if err := h.cancelToolCall(ctx, tc.Path); err != nil {
			return err
		}
	}
	return nil
}

// cancelToolCall moves a pending tool call to canceled (version-checked).
func (h *Handlers) cancelToolCall(ctx context.Context, path string) error {
	_, err := h.casUpdate(ctx, path, func(cur *collections.Document) map[string]any {
		if str(cur, "status") != "pending" {
			return nil
		}
		return map[string]any{"status": statusCanceled}
	})
	return err
}

// cancelNotice is the chat's notice of a canceled task: its name and the
// first words of its instruction.
func cancelNotice(task *collections.Document) string {
	const words, chars = 8, 80
	f := strings.Fields(str(task, "instruction"))
	cut := len(f) > words
	if cut {
		f = f[:words]
	}
	instr := strings.Join(f, " ")
	if len(instr) > chars {
		instr, cut = truncate(instr, chars), true
	}
	if cut {
		instr += "…"
	}
	by := ""
	switch str(task, "canceledBy") {
	case "chat":
		by = " (the chat's run was canceled)"
	case "parent":
		by = " (its parent task was canceled or stopped waiting for it)"
	}
	if instr == "" {
		return "Canceled: " + str(task, "name") + by
	}
	return "Canceled: " + str(task, "name") + " — " + instr + by
}

// chatCancel handles the user's cancel of a chat's whole run (runStatus set
// to "canceled"): every unfinished task of the chat created up to the
// cancel is canceled (canceledBy "chat"; finalize settles each), and the
// chat records canceledThrough, the cancel's time: the orchestrator starts
// nothing for a user message created at or before it. runStatus goes back
// to "idle", so a later cancel is a change again.
func (h *Handlers) chatCancel(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	if ev.Path != c.path() {
		return fmt.Errorf("%w: %q is not a chat document", errMalformed, ev.Path)
	}
	if str(ev.Doc, "runStatus") != statusCanceled {
		return nil
	}
	cutoff := ev.Doc.UpdatedAt
	for _, status := range unfinishedTaskStatuses {
		// A page at a time: the tasks canceled leave the status, so the
		// next page reads the ones after them. It stops at a short page, or
		// at a page that canceled none (what is left is newer than the
		// cancel, or not the runtime's).
		for {
			tasks, err := h.docs.Query(ctx, collections.Query{
				Collection: c.tasks(), Filters: []collections.Filter{eq("userId", c.uid), eq("status", status)}, Limit: chatCancelPage,
			})
			if err != nil {
				return fmt.Errorf("chat tasks: %w", err)
			}
			moved := 0
			for _, t := range tasks {
				if t.CreatedAt > cutoff {
					continue // a run the user started after the cancel
				}
				cur, err := h.cancelTaskDoc(ctx, t.Path, "chat")
				if err != nil {
					return err
				}
				if str(cur, "status") != status {
					moved++
				}
			}
			if len(tasks) < chatCancelPage || moved == 0 {
				break
			}
		}
	}
	_, err = h.casUpdate(ctx, c.path(), func(cur *collections.Document) map[string]any {
		patch := map[string]any{}
		if num(cur, "canceledThrough") < cutoff {
			patch["canceledThrough"] = cutoff
		}
		if str(cur, "runStatus") == statusCanceled {
			// Acknowledged. (A later cancel's own delivery records its
			// later time: it cancels all this one would have.)
			patch["runStatus"] = "idle"
		}
		if len(patch) == 0 {
			return nil
		}
		return patch
	})
	return err
}

// chatCancelPage is how many tasks of one status a chat's cancel reads at
// a time (a variable for the tests).
var chatCancelPage = maxActiveTasksRead

// canceledThrough is the time up to which the chat's user messages start
// nothing: the recorded canceledThrough, or, while a cancel waits for its
// handler, the time of the cancel (the chat's last update).
func canceledThrough(chatDoc *collections.Document) int64 {
	through := num(chatDoc, "canceledThrough")
	if str(chatDoc, "runStatus") == statusCanceled {
		through = max(through, chatDoc.UpdatedAt)
	}
	return through
}

// chatCanceledFor reports whether the chat's run was canceled at or after
// createdAt (a user message's creation time): such a message starts
// nothing.
func (h *Handlers) chatCanceledFor(ctx context.Context, c chat, createdAt int64) (bool, error) {
	chatDoc, err := h.getOpt(ctx, c.path())
	if err != nil {
		return false, err
	}
	return canceledFor(chatDoc, createdAt)
}

// canceledFor is chatCanceledFor on a chat document already read (nil:
// none).
func canceledFor(chatDoc *collections.Document, createdAt int64) (bool, error) {
	if chatDoc == nil {
		return false, nil
	}
	if createdAt <= num(chatDoc, "canceledThrough") {
		return true, nil
	}
	if str(chatDoc, "runStatus") == statusCanceled {
		// Canceled, and chat-cancel has not recorded when yet. The chat
		// document's updatedAt is no longer the cancel's time once the
		// runtime wrote the chat since (its activity, its tokens), so a
		// message sent after the cancel could pass for one before it:
		// wait for the record instead (the delivery retries).
		return false, errCancelUnsettled
	}
	return false, nil
}

// errCancelUnsettled: a chat's cancel whose time chat-cancel has not
// recorded yet; the orchestrator's delivery is retried until it has.
var errCancelUnsettled = errors.New("the chat's cancel is not settled yet")

// maybeIdle sets a running chat's runStatus to "idle" when none of its
// tasks is unfinished. It reads the chat document, and the tasks only when
// the chat is running (one query per unfinished status, stopping at the
// first task of the runtime's).
func (h *Handlers) maybeIdle(ctx context.Context, c chat) error {
	return h.maybeIdleFrom(ctx, c, nil)
}

// maybeIdleFrom is maybeIdle on known, the chat document as the caller
// just wrote it (nil: read it); a conflict reads it again.
func (h *Handlers) maybeIdleFrom(ctx context.Context, c chat, known *collections.Document) error {
	for range casAttempts {
		cur, err := known, error(nil)
		if known == nil {
			cur, err = h.getOpt(ctx, c.path())
		}
		known = nil
		if err != nil || cur == nil || str(cur, "runStatus") != "running" {
			return err
		}
		if busy, err := h.chatBusy(ctx, c); err != nil || busy {
			return err
		}
		_, err = h.docs.Update(ctx, c.path(), map[string]any{"runStatus": "idle"}, cur.Version)
		if errors.Is(err, collections.ErrPreconditionFailed) {
			continue
		}
		return err
	}
	return nil // busy: a later finalize tries again
}

// taskGone re-reads a task and reports whether it has ended (canceled, or
// finished by another delivery) since it was read: the work in hand is
// then discarded.
func (h *Handlers) taskGone(ctx context.Context, task *collections.Document) (bool, error) {
	cur, err := h.getOpt(ctx, task.Path)
	if err != nil {
		return false, err
	}
	return cur == nil || taskFinished(str(cur, "status")), nil
}

// initStopped reports whether agent-init must start nothing for task: it
// has ended (a cancel before it started), or the chat's run was canceled
// at or after the user message that planned it (the task is then canceled,
// canceledBy "chat"). It also returns the task as it read it.
func (h *Handlers) initStopped(ctx context.Context, c chat, task *collections.Document) (*collections.Document, bool, error) {
	cur, err := h.getOpt(ctx, task.Path)
	if err != nil || cur == nil {
		return nil, cur == nil, err
	}
	if taskFinished(str(cur, "status")) {
		return cur, true, nil
	}
	chatDoc, err := h.getOpt(ctx, c.path())
	if err != nil || chatDoc == nil {
		return cur, false, err
	}
	through := canceledThrough(chatDoc)
	if through == 0 {
		return cur, false, nil
	}
	id := str(task, "triggerMessageId")
	if !collections.ValidSegment(id) {
		return cur, false, nil
	}
	msg, err := h.getOpt(ctx, c.messages()+"/"+id)
	if err != nil || msg == nil || msg.CreatedAt > through {
		return cur, false, err
	}
	return nil, true, h.cancelTask(ctx, task.Path, "chat")
}
