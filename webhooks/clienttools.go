package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
	"github.com/loomdb/loom/webhooks/tools"
)

// Client-executed tools (tools.ExecClient): the model calls them like any
// tool, the client app runs them. The round trip, all in documents:
//
//  1. followUp, for a step that calls a client tool, moves the task from
//     running to waiting_tool (version-checked) and the sub-agent to
//     waiting, before it creates the step's tool-call documents (so no
//     result can arrive before the wait is recorded); each client call is
//     created pending with executionType "client" and waitUntil (ms).
//  2. tool-runner, on the call's create, checks it as it checks a server
//     call (the role offers the tool, the arguments fit its schema; a bad
//     call fails at once and the model sees why), runs on_tool_call and
//     leaves it pending: the server never runs a client tool.
//  3. The client app (the owner; rules/security.toml) patches the call to
//     success with a result or failed with an error. The update fires
//     tool-runner again (on-client-tool-result), which turns the outcome
//     into the tool message, runs on_tool_complete / on_tool_failure,
//     mirrors it per visibility and, once no client call of the step is
//     pending, moves the task back to running and the sub-agent to active
//     before the tool message wakes the loop.
//  4. At waitUntil a scheduled delivery (on-client-tool-timeout, deliverAt)
//     fails a call still pending with a timeout the model sees; the write is
//     version-checked, so a result that won the race stands.
//
// Whether a call is a client call is decided by the registry (its sealed
// toolName), never by the document's executionType, which only the
// triggers and the client app read.

// taskWaitingTool is the task status of a client-tool wait (its sub-agent
// is agentWaiting, as in any wait).
const taskWaitingTool = "waiting_tool"

// clientSkew is how early a delivery may come for a call's deadline and
// still be retried rather than ignored: the scheduled delivery is due at
// waitUntil by the clock of the node that delivers it, which may run ahead
// of this handler's.
const clientSkew = 2 * time.Second

// errNotDue is a client call's timeout delivered before its deadline (by
// less than clientSkew): the delivery is retried.
var errNotDue = errors.New("client tool call: its timeout is not due yet")

// clientToolDef returns the registry's definition of name when it is a
// client tool.
func (h *Handlers) clientToolDef(name string) (tools.Def, bool) {
	d, ok := h.tools.Get(name)
	if !ok || !d.IsClient() {
		return tools.Def{}, false
	}
	return d, true
}

// clientCallFields adds a client call's fields to the data of its new
// tool-call document: its execution type and when it times out.
func (h *Handlers) clientCallFields(name string, data map[string]any) {
	d, ok := h.clientToolDef(name)
	if !ok {
		return
	}
	data["executionType"] = tools.ExecClient
	data["waitUntil"] = time.Now().Add(d.ClientTimeoutDuration()).UnixMilli()
}

// awaitClientCalls records that the task waits for the client app when a
// step calls a client tool: task running → waiting_tool (version-checked:
// a cancel or another delivery wins), then the sub-agent active → waiting.
// It runs before the step's tool-call documents are created, and only
// while a client call of the step is missing or pending, so a redelivered
// step whose results came back moves nothing. A step that also asks the
// user (ask_user, send_message) leaves the statuses to that wait; its
// client calls still hold the loop back until they are answered. It
// returns the sub-agent and the task as they now are.
func (h *Handlers) awaitClientCalls(ctx context.Context, c chat, sa string, agent, task, step *collections.Document) (*collections.Document, *collections.Document, error) {
	client := false
	for _, tc := range toolCallsOf(step) {
		switch _, ok := h.clientToolDef(tc.Name); {
		case isWaitTool(tc.Name):
			return agent, task, nil
		case ok:
			client = true
		}
	}
	if !client || str(task, "status") != "running" {
		return agent, task, nil
	}
	pending, err := h.clientCallsPending(ctx, c, sa, step)
	if err != nil || !pending {
		return agent, task, err
	}
	moved, err := h.docs.Update(ctx, task.Path, map[string]any{"status": taskWaitingTool}, task.Version)
	if errors.Is(err, collections.ErrPreconditionFailed) {
		// Canceled, or another delivery moved it: re-read, move nothing.
		fresh, err := h.docs.Get(ctx, task.Path)
		return agent, fresh, err
	}
	if err != nil {
		return nil, nil, err
	}
	// The sub-agent's status is what an app shows; the loop itself is held
	// back by the missing tool results (pendingCalls), so a crash before
	// this write costs nothing but the label.
	if str(agent, "status") == "active" {
		if agent, err = h.moveAgent(ctx, agent.Path, agentWaiting); err != nil {
			return nil, nil, err
		}
	}
	return agent, moved, nil
}

// clientCallsPending reports whether a client call of step has no outcome
// yet: its tool-call document is missing or pending.
func (h *Handlers) clientCallsPending(ctx context.Context, c chat, sa string, step *collections.Document) (bool, error) {
	for _, tc := range toolCallsOf(step) {
		if _, ok := h.clientToolDef(tc.Name); !ok {
			continue
		}
		d, err := h.getOpt(ctx, c.toolCalls(sa)+"/"+toolCallID(tc.ID))
		if err != nil {
			return false, err
		}
		if d == nil || str(d, "status") == "pending" {
			return true, nil
		}
	}
	return false, nil
}

// clientToolCall handles a sealed tool call of a client tool, on its create
// (check it, hand it to the client, or time it out when due) or on its
// update to an outcome (the client's result).
func (h *Handlers) clientToolCall(ctx context.Context, c chat, sa string, tc *collections.Document, def tools.Def) error {
	if str(tc, "status") == "pending" {
		var err error
		if tc, err = h.clientPending(ctx, c, sa, tc, def); err != nil || tc == nil {
			return err
		}
	}
	switch str(tc, "status") {
	case "success", "failed":
		return h.clientOutcome(ctx, c, sa, tc)
	}
	return nil // canceled (or still pending: the client's turn)
}

// clientPending deals with a pending client call: past its deadline it
// fails with a timeout; before, it is checked as a server call would be (a
// call the role does not offer or with bad arguments fails at once, the
// model sees why) and on_tool_call runs, then it is left to the client
// (nil). It returns the call with its outcome when it has one now.
func (h *Handlers) clientPending(ctx context.Context, c chat, sa string, tc *collections.Document, def tools.Def) (*collections.Document, error) {
	now := time.Now()
	deadline := clientDeadline(tc, def)
	if !now.Before(deadline) {
		return h.failClientCall(ctx, tc, "timeout", "timeout: the client did not return a result within "+humanDuration(def.ClientTimeoutDuration()))
	}
	agent, err := h.mayRun(ctx, c, sa, def.Name)
	if err != nil && !errors.Is(err, errToolRefused) {
		return nil, err
	}
	if err == nil {
		// A call of a task that has ended (a cancel that settled before
		// this call was created) is not left to the client app.
		gone, gerr := h.taskGone(ctx, &collections.Document{Path: c.tasks() + "/" + str(agent, "taskId")})
		if gerr != nil {
			return nil, gerr
		}
		if gone {
			if err := h.cancelToolCall(ctx, tc.Path); err != nil {
				return nil, err
			}
			return h.docs.Get(ctx, tc.Path)
		}
		err = h.tools.Check(def.Name, str(tc, "argsJson"))
	}
	if err != nil {
		return h.failClientCall(ctx, tc, "failed", err.Error())
	}
	// on_tool_call: the tool is about to run, on the client.
	if err := h.toolHook(ctx, plugins.OnToolCall, c, sa, agent, tc, ""); err != nil {
		return nil, err
	}
	if deadline.Sub(now) <= clientSkew {
		// Due in a moment: come back then (the scheduled delivery may
		// have come early by another clock, or this is the create's
		// delivery of a call with a very short timeout).
		return nil, errNotDue
	}
	return nil, nil
}

// clientDeadline is when a pending client call times out: its waitUntil,
// but never later than its creation plus the tool's timeout (waitUntil is
// not sealed; the runtime wrote it just before the create).
func clientDeadline(tc *collections.Document, def tools.Def) time.Time {
	limit := tc.CreatedAt + def.ClientTimeoutDuration().Milliseconds()
	at := num(tc, "waitUntil")
	if at <= 0 || at > limit {
		at = limit
	}
	return time.UnixMilli(at)
}

// failClientCall records a runtime-decided failure of a pending client
// call, version-checked: an outcome written first (the client's result)
// stands. It returns the call as it now is; outcome labels the tool-runs
// metric when this write decided it.
func (h *Handlers) failClientCall(ctx context.Context, tc *collections.Document, outcome, reason string) (*collections.Document, error) {
	updated, err := h.docs.Update(ctx, tc.Path, map[string]any{"status": "failed", "error": reason}, tc.Version)
	if errors.Is(err, collections.ErrPreconditionFailed) {
		return h.docs.Get(ctx, tc.Path)
	}
	if err == nil {
		h.m.toolRuns.WithLabelValues(str(tc, "toolName"), outcome).Inc()
	}
	return updated, err
}

// clientOutcome carries a client call's outcome to the model: the tool
// message (after on_tool_complete / on_tool_failure, and after the task and
// sub-agent are back to running once no client call of the step is
// pending), and its mirror in the chat. Nothing is written when the task
// has ended or was canceled, or the sub-agent or step is not the
// runtime's. A redelivery writes nothing twice.
func (h *Handlers) clientOutcome(ctx context.Context, c chat, sa string, tc *collections.Document) error {
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil || agent == nil || !h.seals.valid(agent, subAgentSeal) {
		return err
	}
	task, err := h.getOpt(ctx, c.tasks()+"/"+str(agent, "taskId"))
	if err != nil || task == nil || !h.seals.valid(task, taskSeal) {
		return err
	}
	if taskFinished(str(task, "status")) {
		return nil // canceled or finished: the result is discarded
	}
	step, err := h.getOpt(ctx, c.subMessages(sa)+"/"+msgID(num(tc, "assistantSeq")))
	if err != nil || step == nil || !h.seals.valid(step, subMessageSeal) || str(step, "role") != "assistant" {
		return err
	}
	// The client's outcome stands only for a call the runtime hands to the
	// client: one the role offers, with arguments that fit the tool. (An
	// outcome written before tool-runner first saw the call skipped those
	// checks; the runtime's refusal replaces it.)
	if tc, err = h.clientRecheck(ctx, agent, sa, tc); err != nil || tc == nil {
		return err
	}
	if st := str(tc, "status"); st != "success" && st != "failed" {
		return nil // canceled meanwhile
	}
	content := clientContent(tc)
	// The rules read the outcome as text, as a server tool's: the client
	// may have written any JSON.
	view := &collections.Document{ID: tc.ID, Collection: tc.Collection, Path: tc.Path, Version: tc.Version,
		CreatedAt: tc.CreatedAt, UpdatedAt: tc.UpdatedAt, Data: maps.Clone(tc.Data)}
	hook := plugins.OnToolComplete
	if str(tc, "status") == "failed" {
		hook = plugins.OnToolFailure
		view.Data["error"] = strings.TrimPrefix(content, "error: ")
	} else {
		view.Data["result"] = content
	}
	if err := h.toolHook(ctx, hook, c, sa, agent, view, content); err != nil {
		return err
	}
	pending, err := h.clientCallsPending(ctx, c, sa, step)
	if err != nil {
		return err
	}
	if !pending {
		if resumed, err := h.resumeFromClient(ctx, agent, task); err != nil || !resumed {
			return err
		}
	}
	return h.answerCall(ctx, c, sa, tc, content)
}

// clientRecheck checks a client call with an outcome as clientPending
// checks a pending one (the role offers the tool, the arguments fit its
// schema). A call that fails the checks gets the runtime's refusal as its
// outcome (version-checked; the call is read again when that lost a race),
// in place of what the client wrote. agent is the call's sub-agent as the
// caller read it. It returns the call as it now is (nil: gone).
func (h *Handlers) clientRecheck(ctx context.Context, agent *collections.Document, sa string, tc *collections.Document) (*collections.Document, error) {
	name := str(tc, "toolName")
	err := h.agentMayRun(agent, sa, name)
	if err == nil {
		err = h.tools.Check(name, str(tc, "argsJson"))
	}
	if err == nil || (str(tc, "status") == "failed" && str(tc, "error") == err.Error()) {
		return tc, nil
	}
	updated, uerr := h.docs.Update(ctx, tc.Path, map[string]any{"status": "failed", "error": err.Error(), "result": nil}, tc.Version)
	if errors.Is(uerr, collections.ErrPreconditionFailed) {
		return h.getOpt(ctx, tc.Path)
	}
	if uerr == nil {
		h.m.toolRuns.WithLabelValues(h.toolLabel(name), "refused").Inc()
	}
	return updated, uerr
}

// resumeFromClient ends a client-tool wait: the task waiting_tool → running
// (version-checked), then a waiting sub-agent of a running task → active,
// before the tool message wakes the loop. A task waiting for a reply (a
// step that also asked) keeps its wait. resumed is false when the task
// ended meanwhile (canceled, finished): the result is discarded.
func (h *Handlers) resumeFromClient(ctx context.Context, agent, task *collections.Document) (resumed bool, err error) {
	if str(task, "status") == taskWaitingTool {
		task, err = h.docs.Update(ctx, task.Path, map[string]any{"status": "running"}, task.Version)
		if errors.Is(err, collections.ErrPreconditionFailed) {
			task, err = h.docs.Get(ctx, task.Path)
		}
		if err != nil {
			return false, err
		}
		if taskFinished(str(task, "status")) {
			return false, nil
		}
	}
	if str(task, "status") == "running" && str(agent, "status") == agentWaiting {
		if _, err := h.moveAgent(ctx, agent.Path, "active"); err != nil {
			return false, err
		}
	}
	return true, nil
}

// clientContent is a client call's outcome as the model sees it: the
// result as JSON text, or "error: …", cut to maxResultChars (at a rune
// boundary).
func clientContent(tc *collections.Document) string {
	var content string
	if str(tc, "status") == "failed" {
		msg, ok := tc.Data["error"].(string)
		if !ok {
			msg = jsonText(tc.Data["error"])
		}
		content = "error: " + msg
	} else {
		content = jsonText(tc.Data["result"])
	}
	return cutText(content, maxResultChars)
}

// jsonText is v as JSON text ("null" when missing).
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// cutText cuts s to at most n bytes at a rune boundary (truncate),
// marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncate(s, n) + "(truncated)"
}

// humanDuration writes d in the largest whole unit: "10 minutes", "90
// seconds", "1 hour".
func humanDuration(d time.Duration) string {
	unit := func(n int64, name string) string {
		if n == 1 {
			return "1 " + name
		}
		return fmt.Sprintf("%d %ss", n, name)
	}
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	case d%time.Second == 0:
		return unit(int64(d/time.Second), "second")
	}
	return unit(d.Milliseconds(), "millisecond")
}
