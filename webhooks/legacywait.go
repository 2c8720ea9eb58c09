package webhooks

import (
	"context"
	"errors"
	"time"

	"github.com/loomdb/loom/collections"
)

// Waits the runtime left before waits had ids (docs/agent-runs.md, "Waits,
// timeouts and replies"). Such a task asked the user (ask_user) and is
// "waiting" with its question but no waitId, waitUntil or waitState; its
// sub-agent is "waiting_for_user"; its question message is
// {taskId}-q{version}. adoptLegacyWait gives it the wait the runtime would
// open for that step now, so the user's answer reaches it as before and it
// times out like any wait (from its adoption). A legacy wait is adopted
// when a user message of its chat may answer it: a message without
// replyTo (waitingForUser) or one whose replyTo names its question
// (legacyQuestionTarget).

// legacyAgentWaiting is the sub-agent status the runtime wrote for a wait
// before waits had ids.
const legacyAgentWaiting = "waiting_for_user"

// isLegacyWait reports whether task is a wait the runtime left before
// waits had ids.
func (h *Handlers) isLegacyWait(task *collections.Document) bool {
	_, hasState := task.Data["waitState"]
	return str(task, "status") == "waiting" && str(task, "waitId") == "" && !hasState &&
		str(task, "type") == "agent" && h.seals.valid(task, taskSeal)
}

// adoptLegacyWait records the wait of a legacy waiting task: the ask_user
// call of its sub-agent's last step, a waitId derived from that step (the
// one the runtime would give it now), a waitUntil of the configured
// wait_timeout from now, and, first, its sub-agent waiting in that wait.
// It returns the task with its wait (also when an earlier delivery adopted
// it), or nil when there is nothing to adopt: not a legacy wait, no
// sub-agent or asking step of the runtime's, or the task moved meanwhile.
func (h *Handlers) adoptLegacyWait(ctx context.Context, c chat, task *collections.Document) (*collections.Document, error) {
	if !h.isLegacyWait(task) {
		return nil, nil
	}
	sa := task.ID // a task's sub-agent is named after it (agentInit)
	if str(task, "subAgentId") != sa {
		return nil, nil
	}
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil || agent == nil || !h.seals.valid(agent, subAgentSeal) {
		return nil, err
	}
	msgs, err := h.subMessages(ctx, c, sa)
	if err != nil {
		return nil, err
	}
	// The step that asked is the sub-agent's last: the old runtime took no
	// step while its sub-agent waited for the user.
	var step *collections.Document
	for i := len(msgs) - 1; i >= 0 && step == nil; i-- {
		if str(msgs[i], "role") == "assistant" {
			step = msgs[i]
		}
	}
	if step == nil {
		return nil, nil
	}
	index := -1
	calls := toolCallsOf(step)
	for i, tc := range calls {
		if tc.Name == askUserTool.Name {
			index = i // the last question asked is the task's question
		}
	}
	if index < 0 {
		return nil, nil
	}
	seq := num(step, "seq")
	id := waitID(task.ID, seq)
	// The sub-agent first, as openWait: the wait wakes only a sub-agent
	// waiting in it. (A sub-agent already active was being woken by the
	// old runtime when it stopped: the answer wakes it.)
	moved, err := h.casUpdate(ctx, agent.Path, func(cur *collections.Document) map[string]any {
		if str(cur, "status") != legacyAgentWaiting {
			return nil
		}
		patch := map[string]any{"status": agentWaiting, "waitId": id}
		if str(cur, "lastProcessedMessageId") == "" {
			patch["lastProcessedMessageId"] = str(task, "triggerMessageId")
		}
		return patch
	})
	if err != nil || moved == nil {
		return nil, err
	}
	if st := str(moved, "status"); st != "active" && (st != agentWaiting || str(moved, "waitId") != id) {
		return nil, nil
	}
	now := time.Now()
	ws := &waitState{
		Tool: askUserTool.Name, ToolCallID: calls[index].ID, AssistantSeq: seq, Index: int64(index),
		WaitingFor: []waitFor{{Kind: "user", Name: "user"}}, StartedAt: now.UnixMilli(), Timeout: h.cfg.WaitTimeout.Milliseconds(),
	}
	// The old question was named after the task's version when it began
	// to wait; a replyTo naming it finds the adopted wait by it.
	qPath := c.messages() + "/" + questionID(task.ID, task.Version)
	q, err := h.getOpt(ctx, qPath)
	if err != nil {
		return nil, err
	}
	if q != nil && str(q, "kind") == "question" && str(q, "taskId") == task.ID && h.seals.valid(q, chatMessageSeal) {
		ws.MessageID = q.ID
	}
	updated, err := h.docs.Update(ctx, task.Path, map[string]any{
		"waitId": id, "waitUntil": now.Add(h.cfg.WaitTimeout).UnixMilli(), "waitState": ws.doc(),
	}, task.Version)
	if errors.Is(err, collections.ErrPreconditionFailed) {
		// Adopted by another delivery, or canceled: take it as it is.
		cur, err := h.docs.Get(ctx, task.Path)
		if err != nil || str(cur, "waitId") != id || str(cur, "status") != "waiting" {
			return nil, err
		}
		return cur, nil
	}
	return updated, err
}

// legacyQuestionTarget is the wait a replyTo naming q, a question the
// runtime wrote before waits had ids, answers: the task's legacy wait
// (adopted now) when q is its question, or the wait adopted from it
// earlier. nil: q answers no open wait.
func (h *Handlers) legacyQuestionTarget(ctx context.Context, c chat, q *collections.Document) (*routeTarget, error) {
	tid := str(q, "taskId")
	task, err := h.getOpt(ctx, c.tasks()+"/"+tid)
	if err != nil || task == nil {
		return nil, err
	}
	if h.isLegacyWait(task) {
		if q.ID != questionID(tid, task.Version) {
			return nil, nil // an older question of the task
		}
		if task, err = h.adoptLegacyWait(ctx, c, task); err != nil || task == nil {
			return nil, err
		}
	}
	if ws := waitStateOf(task); ws == nil || ws.MessageID != q.ID || str(task, "waitId") == "" {
		return nil, nil
	}
	return &routeTarget{taskID: tid, waitID: str(task, "waitId")}, nil
}
