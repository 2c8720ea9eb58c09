package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
	"github.com/loomdb/loom/webhooks/tools"
)

// maxResultChars bounds a tool result as the model sees it.
const maxResultChars = 16 << 10

// toolRunner executes a pending tool call, records the outcome on the
// tool-call document and writes the tool message that answers the call
// (which wakes the agent loop). Bad arguments are a tool error the model
// sees, not a handler failure.
func (h *Handlers) toolRunner(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	sa, err := subAgentOf(ev.Path)
	if err != nil {
		return err
	}
	tc, err := h.getOpt(ctx, ev.Path)
	if err != nil || tc == nil {
		return err
	}
	if !h.seals.valid(tc, toolCallSeal) {
		// Only the agent loop asks for tools: refuse, on the record, and
		// wake nobody.
		return h.refuseToolCall(ctx, tc)
	}
	if def, ok := h.clientToolDef(str(tc, "toolName")); ok {
		return h.clientToolCall(ctx, c, sa, tc, def) // never run here (clienttools.go)
	}
	// agent is the sub-agent as mayRun read it (nil: not read), which the
	// tool hooks take rather than read it again: a tool run does not
	// change it.
	var agent *collections.Document
	if str(tc, "status") == "pending" {
		start := time.Now()
		var result any
		var runErr error
		agent, runErr = h.mayRun(ctx, c, sa, str(tc, "toolName"))
		if runErr != nil && !errors.Is(runErr, errToolRefused) {
			return runErr // could not read the sub-agent: retry the delivery
		}
		// No tool run starts for a canceled (or ended) task, and the
		// result of one that was canceled while the tool ran is discarded.
		task := &collections.Document{Path: c.tasks() + "/" + str(agent, "taskId")}
		stopped := func() (bool, error) {
			gone, err := h.taskGone(ctx, task)
			if err != nil || !gone {
				return false, err
			}
			return true, h.cancelToolCall(ctx, tc.Path)
		}
		if runErr == nil {
			if stop, err := stopped(); err != nil || stop {
				return err
			}
			// on_tool_call: the tool is about to run.
			if err := h.toolHook(ctx, plugins.OnToolCall, c, sa, agent, tc, ""); err != nil {
				return err
			}
			result, runErr = h.tools.Run(ctx, str(tc, "toolName"), str(tc, "argsJson"), toolsCall(c.uid))
		}
		if runErr != nil && !errors.Is(runErr, tools.ErrInvalidArgs) && ctx.Err() != nil {
			return runErr // cancelled: retry the delivery
		}
		if !errors.Is(runErr, errToolRefused) {
			if stop, err := stopped(); err != nil || stop {
				return err
			}
		}
		patch := map[string]any{"status": "success", "durationMs": time.Since(start).Milliseconds()}
		if runErr != nil {
			patch["status"], patch["error"] = "failed", runErr.Error()
			h.m.toolRuns.WithLabelValues(h.toolLabel(str(tc, "toolName")), "failed").Inc()
		} else {
			h.m.toolRuns.WithLabelValues(h.toolLabel(str(tc, "toolName")), "success").Inc()
			b, err := json.Marshal(result)
			if err != nil {
				patch["status"], patch["error"] = "failed", "result is not JSON: "+err.Error()
			} else {
				patch["result"] = string(b)
			}
		}
		if done, err := h.answerAtOnce(ctx, c, sa, tc, patch); err != nil || done {
			return err
		}
		updated, err := h.docs.Update(ctx, tc.Path, patch, tc.Version)
		if errors.Is(err, collections.ErrPreconditionFailed) {
			updated, err = h.docs.Get(ctx, tc.Path) // a concurrent delivery recorded it
		}
		if err != nil {
			return err
		}
		tc = updated
	}
	if str(tc, "status") == statusCanceled {
		return nil // no tool message: the loop of a canceled task stays asleep
	}
	content := toolContent(tc)
	// on_tool_complete / on_tool_failure before the tool message that
	// wakes the agent loop, so their notifications reach its next step
	// (again on a redelivery: idempotent).
	hook := plugins.OnToolComplete
	if str(tc, "status") == "failed" {
		hook = plugins.OnToolFailure
	}
	if err := h.toolHook(ctx, hook, c, sa, agent, tc, content); err != nil {
		return err
	}
	return h.answerCall(ctx, c, sa, tc, content)
}

// answerAtOnce records a tool run's outcome (patch, on tc as read, still
// pending) and answers the call in one commit: the tool-call update, the
// tool message and the chat mirror, so the agent loop wakes one fsync
// after the tool returned instead of three. It does so only when no rule
// is at the outcome's hook (on_tool_complete, on_tool_failure), which runs
// between the update and the tool message; done is false when it did not
// (a rule, or a state the batch did not expect: the caller then writes one
// by one, as for a redelivery).
func (h *Handlers) answerAtOnce(ctx context.Context, c chat, sa string, tc *collections.Document, patch map[string]any) (done bool, _ error) {
	status, _ := patch["status"].(string)
	hook := plugins.OnToolComplete
	if status == "failed" {
		hook = plugins.OnToolFailure
	}
	if h.rulesAt(hook) {
		return false, nil
	}
	recorded := tc.Clone()
	for k, v := range patch {
		recorded.Data[k] = v
	}
	writes := []collections.Write{updateWrite(tc.Path, patch, tc.Version),
		h.toolMessageWrite(c, sa, num(tc, "assistantSeq")+1+num(tc, "index"), str(tc, "callId"), str(tc, "toolName"), toolContent(recorded))}
	if w, ok := h.mirrorWrite(c, recorded, toolContent(recorded)); ok {
		writes = append(writes, w)
	}
	return h.batchOrSettle(ctx, writes)
}

// toolContent is what the model sees of a recorded tool call: its result,
// or its error, cut at maxResultChars (at a rune boundary).
func toolContent(tc *collections.Document) string {
	content := str(tc, "result")
	if str(tc, "status") == "failed" {
		content = "error: " + str(tc, "error")
	}
	return cutText(content, maxResultChars)
}

// answerCall writes the tool message that answers tool call tc (at the
// seq its step reserved for it, so a redelivery writes it once; it wakes
// the agent loop), then mirrors the call into the chat.
func (h *Handlers) answerCall(ctx context.Context, c chat, sa string, tc *collections.Document, content string) error {
	seq := num(tc, "assistantSeq") + 1 + num(tc, "index")
	if err := h.toolMessage(ctx, c, sa, seq, str(tc, "callId"), str(tc, "toolName"), content); err != nil {
		return err
	}
	return h.mirror(ctx, c, tc, content)
}

// toolMessage writes the sub-agent's tool message answering the model's
// call callID (tool name) at seq, the seq its step reserved for the call
// (assistant seq + 1 + the call's index), so a redelivery writes it once.
// It wakes the agent loop.
func (h *Handlers) toolMessage(ctx context.Context, c chat, sa string, seq int64, callID, name, content string) error {
	w := h.toolMessageWrite(c, sa, seq, callID, name, content)
	_, err := h.createOnce(ctx, w.Path, w.Data)
	return err
}

// toolMessageWrite is toolMessage's create, for a Batch.
func (h *Handlers) toolMessageWrite(c chat, sa string, seq int64, callID, name, content string) collections.Write {
	return h.subMessageWrite(c, sa, map[string]any{
		"userId": c.uid, "subAgentId": sa, "role": "tool", "content": content, "seq": seq,
		"toolCallId": callID, "name": name,
	})
}

// mayRun checks that a sub-agent may run a tool: the tool is in its role's
// list (the model may name a tool it was not offered). It returns the
// sub-agent document it read (nil: none).
func (h *Handlers) mayRun(ctx context.Context, c chat, sa, tool string) (*collections.Document, error) {
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil {
		return nil, err
	}
	return agent, h.agentMayRun(agent, sa, tool)
}

// agentMayRun is mayRun's check of a sub-agent document already read
// (nil: none): an errToolRefused when it may not run tool.
func (h *Handlers) agentMayRun(agent *collections.Document, sa, tool string) error {
	if !h.seals.valid(agent, subAgentSeal) {
		return fmt.Errorf("%w: no sub-agent %s of the runtime's", errToolRefused, sa)
	}
	role := str(agent, "role")
	if r, ok := h.cfg.Roles[role]; !ok || !slices.Contains(r.Tools, tool) {
		return fmt.Errorf("%w: tool %q is not available to the %s role", errToolRefused, tool, role)
	}
	return nil
}

// errToolRefused is a tool call the runtime does not run.
var errToolRefused = errors.New("refused")

// refuseToolCall marks a pending tool call the runtime did not create as
// failed, without running it or writing a tool message.
func (h *Handlers) refuseToolCall(ctx context.Context, tc *collections.Document) error {
	h.log.Warn("tool-runner: refusing a tool call the runtime did not create", "path", tc.Path, "tool", str(tc, "toolName"))
	if str(tc, "status") != "pending" {
		return nil
	}
	h.m.toolRuns.WithLabelValues(h.toolLabel(str(tc, "toolName")), "refused").Inc()
	_, err := h.docs.Update(ctx, tc.Path, map[string]any{
		"status": "failed", "error": "refused: the agent runtime did not create this tool call",
	}, tc.Version)
	return ignoreConflict(err)
}

// mirror shows a tool call in the user's chat as its visibility says:
// visible (call and result), result-only, or hidden (nothing).
func (h *Handlers) mirror(ctx context.Context, c chat, tc *collections.Document, content string) error {
	w, ok := h.mirrorWrite(c, tc, content)
	if !ok {
		return nil
	}
	_, err := h.createOnce(ctx, w.Path, w.Data)
	return err
}

// mirrorWrite is mirror's create, for a Batch; false when the call's
// visibility is hidden.
func (h *Handlers) mirrorWrite(c chat, tc *collections.Document, content string) (collections.Write, bool) {
	var text string
	switch str(tc, "visibility") {
	case "hidden":
		return collections.Write{}, false
	case "result-only":
		text = content
	default:
		text = fmt.Sprintf("%s(%s) → %s", str(tc, "toolName"), str(tc, "argsJson"), content)
	}
	path := c.messages() + "/" + mirrorID(str(tc, "subAgentId"), tc.ID)
	return createWrite(path, h.seals.seal(path, map[string]any{
		"userId": c.uid, "chatId": c.id, "role": "assistant", "kind": "tool", "content": text,
		"toolName": str(tc, "toolName"), "toolCallId": tc.ID,
	}, chatMessageSeal)), true
}

// finalize writes the answer of a finished task into the chat: the result,
// summarised by the model when one is configured.
func (h *Handlers) finalize(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	task := ev.Doc
	if !h.seals.valid(task, taskSeal) {
		return nil // see agentInit: not a task of the runtime's
	}
	if str(task, "status") == statusCanceled {
		if err := h.settleCanceled(ctx, c, task); err != nil {
			return err
		}
		// A canceled child task still answers its parent's wait.
		_, err := h.childDone(ctx, c, task)
		return err
	}
	// A task send_message started answers its parent's wait (waits.go).
	if handled, err := h.childDone(ctx, c, task); err != nil || handled {
		return err
	}
	path := c.messages() + "/" + resultID(task.ID)
	if existing, err := h.getOpt(ctx, path); err != nil || existing != nil {
		return err
	}
	status := str(task, "status")
	var content string
	var spent *llm.Response // finalize's model call, its tokens
	switch status {
	case "success":
		content = str(task, "result")
		if h.model.Name() != "offline" && content != "" {
			res, err := h.complete(ctx, c.uid, h.forOrchestrator(llmSummaryRequest(str(task, "instruction"), content)))
			spent = res
			_, limited := asLimit(err)
			switch {
			case limited, permanentModelError(err):
				// Keep the sub-agent's own answer.
			case err != nil:
				h.countChatTokens(ctx, c, nil, res)
				return fmt.Errorf("finalize model: %w", err)
			case res.Content != "":
				content = res.Content
			}
		}
	case "failed":
		content = fmt.Sprintf("The task %q failed: %s", str(task, "name"), str(task, "error"))
		// A task that failed while calls of its last step were pending
		// (a client call the app has not answered, a handler's permanent
		// failure): they are not left for the app to run.
		if str(task, "type") == "agent" {
			if err := h.cancelPendingCalls(ctx, c, task.ID); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err = h.createOnce(ctx, path, h.seals.seal(path, map[string]any{
		"userId": c.uid, "chatId": c.id, "role": "assistant", "content": content,
		"taskId": task.ID, "replyTo": str(task, "triggerMessageId"), "status": status,
	}, chatMessageSeal)); err != nil {
		return err
	}
	return h.taskAnswered(ctx, c, spent)
}

// taskAnswered writes the chat document after a task's answer, in one
// compare-and-swap commit: the tokens of finalize's model call (res; nil:
// none) and runStatus "idle" when the chat is running and none of its
// tasks is unfinished (maybeIdle's check). A crash after the answer and
// before this commit loses the call's tokens in the chat's tokensUsed (the
// redelivery finds the answer and does nothing): that counter is
// informational, the user's daily usage (agent-usage) is recorded with the
// call itself and stays exact.
func (h *Handlers) taskAnswered(ctx context.Context, c chat, res *llm.Response) error {
	if res == nil {
		return h.maybeIdle(ctx, c)
	}
	for range casAttempts {
		cur, err := h.getOpt(ctx, c.path())
		if err != nil || cur == nil {
			return err // none: a chat the orchestrator never saw, or cleaned up
		}
		patch := map[string]any{}
		addTokens(patch, cur, res, h.orchestratorModel())
		if str(cur, "runStatus") == "running" {
			busy, err := h.chatBusy(ctx, c)
			if err != nil {
				return err
			}
			if !busy {
				patch["runStatus"] = "idle"
			}
		}
		_, err = h.docs.Update(ctx, c.path(), patch, cur.Version)
		if errors.Is(err, collections.ErrPreconditionFailed) {
			continue
		}
		if err != nil {
			h.log.Error("chat tokens not recorded", "chat", c.path(), "tokens", res.Usage.TotalTokens, "err", err)
		}
		return err
	}
	h.log.Error("chat tokens not recorded", "chat", c.path(), "tokens", res.Usage.TotalTokens, "err", "still conflicting")
	return nil // busy: a later finalize checks idle again
}

// notify writes a waiting task's question into the chat.
func (h *Handlers) notify(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	task := ev.Doc
	if str(task, "status") != "waiting" || !h.seals.valid(task, taskSeal) {
		return nil
	}
	// A late delivery: the wait may be over (answered, timed out, the task
	// canceled); ask only while it is still open.
	cur, err := h.getOpt(ctx, task.Path)
	if err != nil || cur == nil || str(cur, "status") != "waiting" || str(cur, "waitId") != str(task, "waitId") {
		return err
	}
	// One question per wait, named after it (waits.go); a wait for agents
	// only asks the user nothing.
	path := c.messages() + "/" + questionID(task.ID, task.Version)
	data := map[string]any{
		"userId": c.uid, "chatId": c.id, "role": "assistant", "content": str(task, "question"),
		"taskId": task.ID, "kind": "question", "status": "waiting",
	}
	if ws, id := waitStateOf(task), str(task, "waitId"); ws != nil && id != "" {
		if !slices.ContainsFunc(ws.WaitingFor, func(w waitFor) bool { return w.Kind == "user" }) {
			return nil
		}
		path = c.messages() + "/" + waitQuestionID(id)
		to := []any{}
		for _, w := range ws.WaitingFor {
			to = append(to, w.Name)
		}
		data["waitId"], data["to"] = id, to
	}
	_, err = h.createOnce(ctx, path, h.seals.seal(path, data, chatMessageSeal))
	return err
}
