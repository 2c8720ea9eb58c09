package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/tools"
)

// keepRecent is how many recent messages a compression leaves verbatim.
const keepRecent = 6

// maxContextMessages bounds the messages one loop step reads.
const maxContextMessages = 1000

var askUserTool = llm.Tool{
	Name:        "ask_user",
	Description: "Ask the user a question when you cannot continue without their answer. The task waits until they reply.",
	Parameters: map[string]any{"type": "object", "required": []any{"question"}, "properties": map[string]any{
		"question": map[string]any{"type": "string"},
	}},
}

func toolsCall(uid string) tools.Call { return tools.Call{UserID: uid} }

// permanentModelError reports a model error that a retry of the same
// request will not fix: the token limit with nothing produced, or a 4xx
// other than timeout and rate limiting (a bad request, a bad key).
func permanentModelError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, llm.ErrLength) {
		return true
	}
	code := llm.StatusCode(err)
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

func ignoreConflict(err error) error {
	if errors.Is(err, collections.ErrPreconditionFailed) {
		return nil
	}
	return err
}

// roleOf reads the role from a task name such as "agent:researcher".
func (h *Handlers) roleOf(task *collections.Document) string {
	role := strings.TrimPrefix(str(task, "name"), "agent:")
	if _, ok := h.cfg.Roles[role]; !ok {
		return "general"
	}
	return role
}

// agentInit starts a sub-agent for a new agent task: the sub-agent, its
// system prompt, the task marked running, and last the instruction as its
// first user message (which starts the loop).
func (h *Handlers) agentInit(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	task := ev.Doc
	if str(task, "type") != "agent" {
		return nil
	}
	if !h.seals.valid(task, taskSeal) {
		// Only the orchestrator plans tasks; this one was written by
		// someone else (a rules file that lets users write tasks).
		h.log.Warn("agent-init: ignoring a task the runtime did not create", "path", task.Path)
		return nil
	}
	read, stop, err := h.initStopped(ctx, c, task)
	if err != nil || stop {
		return err
	}
	sa := task.ID // one sub-agent per task, named after it
	role := h.roleOf(task)
	agentData := h.seals.seal(c.subAgent(sa), map[string]any{
		"userId": c.uid, "chatId": c.id, "taskId": task.ID, "role": role, "status": "active",
		"iterationCount": 0, "tokenBudget": h.roleBudget(role), "tokensUsed": 0, "model": h.roleModel(role),
		"lastProcessedMessageId": str(task, "triggerMessageId"),
	}, subAgentSeal)
	system := map[string]any{
		"userId": c.uid, "subAgentId": sa, "role": "system", "content": h.cfg.Roles[role].SystemPrompt, "seq": 0,
	}
	instruction := map[string]any{
		"userId": c.uid, "subAgentId": sa, "role": "user", "content": str(task, "instruction"), "seq": 1,
	}
	if str(read, "status") == "pending" {
		// The first delivery of a pending task: everything in one commit
		// (one fsync on the hop), the task's update checked against the
		// version initStopped read. Anything else (a redelivery, a cancel
		// meanwhile) fails the whole batch, which leaves nothing behind,
		// and the steps below settle it one by one.
		done, err := h.batchOrSettle(ctx, []collections.Write{
			createWrite(c.subAgent(sa), agentData),
			h.subMessageWrite(c, sa, system),
			updateWrite(task.Path, map[string]any{"status": "running", "subAgentId": sa}, read.Version),
			h.subMessageWrite(c, sa, instruction),
		})
		if err != nil || done {
			return err
		}
	}
	if _, err := h.createOnce(ctx, c.subAgent(sa), agentData); err != nil {
		return err
	}
	if _, err := h.createSubMessage(ctx, c, sa, system); err != nil {
		return err
	}
	// The task as initStopped read it when it was pending (the update is
	// version-checked: a change since is read again below); otherwise
	// read again now, after the sub-agent exists.
	cur := read
	if str(cur, "status") != "pending" {
		if cur, err = h.docs.Get(ctx, task.Path); err != nil {
			return err
		}
	}
	if str(cur, "status") == "pending" {
		updated, err := h.docs.Update(ctx, task.Path, map[string]any{"status": "running", "subAgentId": sa}, cur.Version)
		if ignoreConflict(err) != nil {
			return err
		}
		if err == nil {
			cur = updated
		} else if cur, err = h.docs.Get(ctx, task.Path); err != nil {
			return err
		}
	}
	if str(cur, "status") == statusCanceled {
		// Canceled before it started: no instruction, no loop. The
		// settlement may have run before the sub-agent existed: end it
		// here too (idempotent), so it does not stay active.
		return h.cancelSubAgent(ctx, c, cur)
	}
	if taskFinished(str(cur, "status")) {
		return nil
	}
	_, err = h.createSubMessage(ctx, c, sa, instruction)
	return err
}

// createSubMessage creates (once) the sub-agent message data describes, at
// the id its seq gives, sealed.
func (h *Handlers) createSubMessage(ctx context.Context, c chat, sa string, data map[string]any) (*collections.Document, error) {
	w := h.subMessageWrite(c, sa, data)
	return h.createOnce(ctx, w.Path, w.Data)
}

// subMessageWrite is the create of the sub-agent message data describes,
// at the id its seq gives, sealed (createSubMessage's write, for a Batch).
func (h *Handlers) subMessageWrite(c chat, sa string, data map[string]any) collections.Write {
	seq, _ := collections.Int64(data["seq"])
	path := c.subMessages(sa) + "/" + msgID(seq)
	return createWrite(path, h.seals.seal(path, data, subMessageSeal))
}

// agentLoop runs one LLM step of a sub-agent when a user or tool message
// arrives: it waits until every tool call of the last step has its result,
// then asks the model and writes the assistant message, its tool calls, or
// the task's end.
func (h *Handlers) agentLoop(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	sa, err := subAgentOf(ev.Path)
	if err != nil {
		return err
	}
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil || agent == nil {
		return err
	}
	if !h.seals.valid(agent, subAgentSeal) || !h.seals.valid(ev.Doc, subMessageSeal) {
		// Only agent-init starts sub-agents and only the runtime writes
		// their messages: this one was written by someone else.
		h.log.Warn("agent-loop: ignoring a sub-agent or message the runtime did not write", "path", ev.Path)
		return nil
	}
	msgs, err := h.subMessages(ctx, c, sa)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	last := msgs[len(msgs)-1]
	// A redelivery after the step was written: finish its follow-ups.
	if str(last, "role") == "assistant" {
		if str(last, "inReplyTo") == ev.ID {
			if err := h.afterStep(ctx, c, sa, agent, last, msgs); err != nil {
				return err
			}
			return h.followUp(ctx, c, sa, agent, last, msgs)
		}
		return nil
	}
	if str(agent, "status") != "active" {
		return nil // waiting for the user, or finished
	}
	if pendingCalls(msgs) {
		return nil // parallel tool calls: the last result runs the step
	}
	task, err := h.docs.Get(ctx, c.tasks()+"/"+str(agent, "taskId"))
	if err != nil {
		return err
	}
	if !h.seals.valid(task, taskSeal) {
		return nil // see agentInit: not a task of the runtime's
	}
	if taskFinished(str(task, "status")) {
		return nil // canceled (or ended): no LLM call starts for it
	}
	return h.runStep(ctx, c, sa, agent, task, msgs, ev.ID)
}

// runStep takes the sub-agent's next step: within its limits (compressing
// the context when it outgrew the budget), it asks the model, writes the
// answer as the step replying to the message inReplyTo, and carries it
// out. A limit reached or a model failure no retry can fix ends the task.
func (h *Handlers) runStep(ctx context.Context, c chat, sa string, agent, task *collections.Document, msgs []*collections.Document, inReplyTo string) error {
	agent, failure, err := h.makeRoom(ctx, c, sa, agent, msgs)
	if err != nil {
		return err
	}
	if failure != "" {
		return h.finishTask(ctx, c, sa, agent, task, msgs, "", failure)
	}
	// on_turn_start, then the notifications of the sub-agent's earlier
	// hooks (on_turn_end, on_tool_*): both go into this step's prompt.
	notes, seen, err := h.turnStartHook(ctx, c, sa, agent, msgs)
	if err != nil {
		return err
	}
	pending, err := h.pendingNotices(ctx, c, sa)
	if err != nil {
		return err
	}
	notes = promptNotices(append(notes, pending...))
	// The first step after a wait sees the chat's messages marked
	// [SEEN]/[NEW] (waits.go).
	chatBlock, newest, err := h.seenBlock(ctx, c, agent, task)
	if err != nil {
		return err
	}
	res, failure, err := h.askModel(ctx, c.uid, h.roleOf(task), agent, msgs, notes, seen, chatBlock)
	if err != nil {
		return err
	}
	if failure != "" {
		return h.finishTask(ctx, c, sa, agent, task, msgs, "", failure)
	}
	if gone, err := h.taskGone(ctx, task); err != nil || gone {
		// Canceled while the model answered: the answer is discarded (its
		// tokens are counted in the user's usage all the same).
		return err
	}
	step, agent, err := h.writeStep(ctx, c, sa, agent, msgs, inReplyTo, res, noticeIDs(notes))
	if err != nil || step == nil {
		return err
	}
	if err := h.markSeen(ctx, agent, task, newest); err != nil {
		return err
	}
	msgs = append(msgs[:len(msgs):len(msgs)], step)
	if err := h.afterStep(ctx, c, sa, agent, step, msgs); err != nil {
		return err
	}
	return h.followUp(ctx, c, sa, agent, step, msgs)
}

// afterStep settles a written step's rule work: the pending notifications
// it carried are marked delivered, and on_turn_end runs (msgs end with the
// step). Both are idempotent: a redelivery of the step's trigger does them
// again.
func (h *Handlers) afterStep(ctx context.Context, c chat, sa string, agent, step *collections.Document, msgs []*collections.Document) error {
	if err := h.markDelivered(ctx, c, step); err != nil {
		return err
	}
	return h.turnEndHook(ctx, c, sa, agent, step, msgs)
}

// makeRoom checks the step limit and compresses the context once it
// outgrew the token budget. It returns the sub-agent (compressed or not),
// or why the task must end instead.
func (h *Handlers) makeRoom(ctx context.Context, c chat, sa string, agent *collections.Document, msgs []*collections.Document) (*collections.Document, string, error) {
	maxSteps := h.roleIterations(str(agent, "role"))
	if steps, ok := stepsTaken(agent, msgs); !ok {
		return agent, "the sub-agent's iteration count is invalid", nil
	} else if steps >= int64(maxSteps) {
		return agent, fmt.Sprintf("max iterations (%d) reached", maxSteps), nil
	}
	if num(agent, "contextTokens") <= h.budgetOf(agent) {
		return agent, "", nil
	}
	compressed, err := h.compress(ctx, c, sa, agent, msgs)
	if le, ok := asLimit(err); ok {
		return agent, le.msg, nil
	}
	if err != nil {
		return nil, "", err
	}
	return compressed, "", nil
}

// askModel asks the model for the step with the role's tools (and the
// rules' notifications, placed by withNotices). It returns
// the answer, or why the task must end: a budget reached, or an error a
// retry of the same request cannot fix (so the user hears about it
// instead of waiting on dead deliveries). Other errors are returned for
// the delivery to retry.
func (h *Handlers) askModel(ctx context.Context, uid, role string, agent *collections.Document, msgs []*collections.Document, notes []notice, seen *usageRead, extra *llm.Message) (*llm.Response, string, error) {
	prompt := buildContext(agent, msgs)
	if extra != nil {
		prompt = append(prompt, *extra) // the chat after a wait (waits.go)
	}
	req := h.forRole(role, llm.Request{Messages: withNotices(prompt, notes), Tools: h.roleTools(role)})
	// The hard stop: after compression, a context still over the budget
	// (with its overflow) fails the task rather than grow without end.
	if failure := overBudget(max(num(agent, "contextTokens"), promptEstimate(req)), h.budgetOf(agent)); failure != "" {
		return nil, failure, nil
	}
	res, err := h.completeSeen(ctx, uid, req, seen)
	if le, ok := asLimit(err); ok {
		return nil, le.msg, nil
	}
	if permanentModelError(err) {
		return nil, "the model failed: " + modelFailure(err), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("agent model: %w", err)
	}
	return res, "", nil
}

// roleTools is what the model may call in role: ask_user and the role's
// tools that exist.
func (h *Handlers) roleTools(role string) []llm.Tool {
	toolDefs := []llm.Tool{askUserTool, sendMessageTool}
	for _, name := range h.cfg.Roles[role].Tools {
		if d, ok := h.tools.Get(name); ok {
			toolDefs = append(toolDefs, llm.Tool{Name: d.Name, Description: d.Description, Parameters: d.InputSchema})
		}
	}
	return toolDefs
}

// writeStep writes the model's answer as the assistant message after the
// last one, and counts the step and its tokens on the sub-agent, in one
// commit. The step
// is nil when another delivery already wrote it. notified are the ids of
// the pending notifications its prompt carried (marked delivered after).
func (h *Handlers) writeStep(ctx context.Context, c chat, sa string, agent *collections.Document, msgs []*collections.Document, inReplyTo string, res *llm.Response, notified []any) (step, updated *collections.Document, err error) {
	seq := num(msgs[len(msgs)-1], "seq") + 1
	calls := make([]any, len(res.ToolCalls))
	for i, tc := range res.ToolCalls {
		calls[i] = map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
	}
	data := map[string]any{
		"userId": c.uid, "subAgentId": sa, "role": "assistant", "content": res.Content, "seq": seq,
		"inReplyTo": inReplyTo, "finishReason": res.FinishReason,
	}
	if len(calls) > 0 {
		data["toolCalls"] = calls
	}
	if len(notified) > 0 {
		data["notifications"] = notified
	}
	stepPath := c.subMessages(sa) + "/" + msgID(seq)
	steps, _ := stepsTaken(agent, msgs)
	// The step and its count in one commit: the hop to the step's tool
	// calls waits for one fsync, and no step is ever written uncounted.
	docs, err := h.docs.Batch(ctx, []collections.Write{
		createWrite(stepPath, h.seals.seal(stepPath, data, subMessageSeal)),
		updateWrite(agent.Path, map[string]any{
			"iterationCount": steps + 1,
			"tokensUsed":     num(agent, "tokensUsed") + int64(res.Usage.TotalTokens),
			"contextTokens":  res.Usage.PromptTokens,
		}, 0),
	})
	if errors.Is(err, collections.ErrAlreadyExists) {
		return nil, nil, nil // another delivery wrote this step (and counted it)
	}
	if err != nil {
		return nil, nil, err
	}
	return docs[0], docs[1], nil
}

// subMessages returns a sub-agent's most recent messages in seq order (at
// most maxContextMessages; older ones live on in the summary), always
// starting with its system prompt.
func (h *Handlers) subMessages(ctx context.Context, c chat, sa string) ([]*collections.Document, error) {
	desc, err := h.docs.Query(ctx, collections.Query{
		Collection: c.subMessages(sa),
		OrderBy:    []collections.Order{{Field: "seq", Direction: "desc"}},
		Limit:      maxContextMessages,
	})
	if err != nil || len(desc) == 0 {
		return nil, err
	}
	msgs := make([]*collections.Document, 0, len(desc)+1)
	if oldest := desc[len(desc)-1]; num(oldest, "seq") != 0 {
		sys, err := h.getOpt(ctx, c.subMessages(sa)+"/"+msgID(0))
		if err != nil {
			return nil, err
		}
		if sys != nil && h.seals.valid(sys, subMessageSeal) {
			msgs = append(msgs, sys)
		}
	}
	for i := len(desc) - 1; i >= 0; i-- {
		// Only the runtime's messages are the sub-agent's conversation.
		if h.seals.valid(desc[i], subMessageSeal) {
			msgs = append(msgs, desc[i])
		}
	}
	return msgs, nil
}

// stepsTaken is how many LLM steps a sub-agent has taken: its
// iterationCount, but never less than the assistant messages it has
// written, so a count lowered by someone else grants no extra steps. ok is
// false when the count is not one the runtime writes (negative or not an
// integer).
func stepsTaken(agent *collections.Document, msgs []*collections.Document) (steps int64, ok bool) {
	n, ok := collections.Int64(agent.Data["iterationCount"])
	if !ok || n < 0 {
		return 0, false
	}
	var written int64
	for _, m := range msgs {
		if str(m, "role") == "assistant" {
			written++
		}
	}
	return max(n, written), true
}

// pendingCalls reports whether the last assistant message has tool calls
// (other than ask_user) without a tool result yet.
func pendingCalls(msgs []*collections.Document) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if str(m, "role") != "assistant" {
			continue
		}
		answered := map[string]bool{}
		for _, r := range msgs[i+1:] {
			if str(r, "role") == "tool" {
				answered[str(r, "toolCallId")] = true
			}
		}
		for _, tc := range toolCallsOf(m) {
			if tc.Name != askUserTool.Name && !answered[tc.ID] {
				return true
			}
		}
		return false
	}
	return false
}

// toolCallsOf reads the OpenAI-shaped toolCalls of an assistant message.
func toolCallsOf(m *collections.Document) []llm.ToolCall {
	raw, _ := m.Data["toolCalls"].([]any)
	out := make([]llm.ToolCall, 0, len(raw))
	for _, r := range raw {
		o, _ := r.(map[string]any)
		fn, _ := o["function"].(map[string]any)
		id, _ := o["id"].(string)
		name, _ := fn["name"].(string)
		args, _ := fn["arguments"].(string)
		out = append(out, llm.ToolCall{ID: id, Name: name, Arguments: args})
	}
	return out
}

// followUp carries out a written step: tool-call documents for its calls,
// the wait for the user for ask_user, or the task's end for a final
// answer. Every write is idempotent. msgs are the sub-agent's messages,
// ending with step.
func (h *Handlers) followUp(ctx context.Context, c chat, sa string, agent, step *collections.Document, msgs []*collections.Document) error {
	calls := toolCallsOf(step)
	task, err := h.docs.Get(ctx, c.tasks()+"/"+str(agent, "taskId"))
	if err != nil {
		return err
	}
	if len(calls) == 0 {
		content := str(step, "content")
		if content == "" && str(step, "finishReason") == "length" {
			return h.finishTask(ctx, c, sa, agent, task, msgs, "", "the model stopped at its token limit without an answer")
		}
		return h.finishTask(ctx, c, sa, agent, task, msgs, content, "")
	}
	if taskFinished(str(task, "status")) {
		// Canceled (or ended) after the step was written: its calls are
		// not made (no client app is handed a call of a canceled task).
		return nil
	}
	// A client tool's wait is recorded before its call can be answered.
	if agent, task, err = h.awaitClientCalls(ctx, c, sa, agent, task, step); err != nil {
		return err
	}
	// The step's wait (ask_user, send_message) opens before its tools run,
	// so no tool result can wake the loop past a question still to be
	// asked (waits.go).
	if err := h.startWaits(ctx, c, sa, agent, task, step, calls); err != nil {
		return err
	}
	for i, tc := range calls {
		if isWaitTool(tc.Name) {
			continue // startWaits
		}
		data := map[string]any{
			"userId": c.uid, "subAgentId": sa, "toolName": tc.Name, "callId": tc.ID, "argsJson": tc.Arguments,
			"status": "pending", "assistantSeq": num(step, "seq"), "index": i,
		}
		var args any
		if json.Unmarshal([]byte(tc.Arguments), &args) == nil {
			data["args"] = args
		}
		if d, ok := h.tools.Get(tc.Name); ok {
			data["visibility"] = d.Visibility
		}
		h.clientCallFields(tc.Name, data)
		path := c.toolCalls(sa) + "/" + toolCallID(tc.ID)
		if _, err := h.createOnce(ctx, path, h.seals.seal(path, data, toolCallSeal)); err != nil {
			return err
		}
	}
	return nil
}

// finishTask ends a sub-agent's task with a result or an error; msgs are
// the sub-agent's messages as the handler read them (on_session_end's
// history).
func (h *Handlers) finishTask(ctx context.Context, c chat, sa string, agent, task *collections.Document, msgs []*collections.Document, result, failure string) error {
	agentStatus, patch := "completed", map[string]any{"status": "success", "result": result}
	if failure != "" {
		agentStatus, patch = "failed", map[string]any{"status": "failed", "error": failure}
	}
	if st := str(task, "status"); st == "success" || st == "failed" {
		// Ended before a crash kept the sub-agent from following.
		if str(agent, "status") == "active" {
			done := "completed"
			if st == "failed" {
				done = "failed"
			}
			_, err := h.moveAgent(ctx, agent.Path, done)
			return err
		}
		return nil
	}
	if taskFinished(str(task, "status")) {
		return nil // canceled: finalize settles the sub-agent
	}
	// on_session_end before the task's end is written: a delivery retried
	// for a hook's failed read runs it again, while once the task has
	// ended nothing would.
	if err := h.sessionEndHook(ctx, c, sa, agent, task, msgs, result, failure); err != nil {
		return err
	}
	// The task first, version-checked, so a user's cancel is never
	// overwritten; the sub-agent follows only when the task's end was
	// written.
	// Tried first against the task as the caller read it (a write since
	// only makes that attempt conflict and read it again).
	ended, err := h.casUpdateFrom(ctx, task, func(cur *collections.Document) map[string]any {
		if taskFinished(str(cur, "status")) {
			return nil // canceled (or ended by another delivery) meanwhile
		}
		return patch
	})
	if err != nil || ended == nil || str(ended, "status") != patch["status"] {
		return err
	}
	_, err = h.moveAgent(ctx, agent.Path, agentStatus)
	return err
}

// buildContext turns a sub-agent's stored messages into the model's
// context: the system prompt, the summary of compressed messages, then the
// messages after it. An ask_user call is answered in the context by a tool
// message, since the user's reply comes as a user message.
func buildContext(agent *collections.Document, msgs []*collections.Document) []llm.Message {
	var out []llm.Message
	answered := map[string]bool{} // calls with a stored tool message (a wait's result)
	for _, m := range msgs {
		if str(m, "role") == "tool" {
			answered[str(m, "toolCallId")] = true
		}
	}
	through := num(agent, "summaryThroughSeq")
	summary := str(agent, "summary")
	for _, m := range msgs {
		seq, role := num(m, "seq"), str(m, "role")
		if role == "system" {
			out = append(out, llm.Message{Role: "system", Content: str(m, "content")})
			if summary != "" {
				out = append(out, llm.Message{Role: "system", Content: "Summary of the earlier conversation:\n" + summary})
			}
			continue
		}
		if summary != "" && seq <= through {
			continue
		}
		msg := llm.Message{Role: role, Content: str(m, "content"), ToolCallID: str(m, "toolCallId"), Name: str(m, "name")}
		if role == "assistant" {
			msg.ToolCalls = toolCallsOf(m)
		}
		out = append(out, msg)
		for _, tc := range msg.ToolCalls {
			if tc.Name == askUserTool.Name && !answered[tc.ID] {
				out = append(out, llm.Message{Role: "tool", ToolCallID: tc.ID, Name: tc.Name, Content: "The question was sent to the user; their reply follows."})
			}
		}
	}
	return out
}

// compress summarises the messages before the most recent ones into the
// sub-agent's summary (one model call), cutting only before a user or an
// assistant message (never before a tool message), so no tool call is
// separated from its result. (A sub-agent usually has a single user
// message, its instruction: cutting only before user messages would never
// compress a tool loop.)
func (h *Handlers) compress(ctx context.Context, c chat, sa string, agent *collections.Document, msgs []*collections.Document) (*collections.Document, error) {
	cut := int64(-1)
	for i := len(msgs) - 1 - keepRecent; i > 0; i-- {
		if r := str(msgs[i], "role"); r == "user" || r == "assistant" {
			cut = num(msgs[i], "seq") - 1
			break
		}
	}
	if cut <= num(agent, "summaryThroughSeq") {
		return agent, nil // nothing (new) to compress
	}
	var b strings.Builder
	if prev := str(agent, "summary"); prev != "" {
		b.WriteString("Earlier summary: " + prev + "\n")
	}
	for _, m := range msgs {
		seq := num(m, "seq")
		if seq == 0 || seq > cut || seq <= num(agent, "summaryThroughSeq") {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", str(m, "role"), str(m, "content"))
		for _, tc := range toolCallsOf(m) {
			fmt.Fprintf(&b, "  called %s(%s)\n", tc.Name, tc.Arguments)
		}
	}
	res, err := h.complete(ctx, c.uid, h.forRole(str(agent, "role"), llm.Request{Messages: []llm.Message{
		{Role: "system", Content: "Summarise this agent conversation for the agent itself: keep facts, results, decisions and open questions. Be brief."},
		{Role: "user", Content: b.String()},
	}}))
	if _, ok := asLimit(err); ok {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	return h.docs.Update(ctx, agent.Path, map[string]any{
		"summary": res.Content, "summaryThroughSeq": cut, "contextTokens": 0,
		"tokensUsed": num(agent, "tokensUsed") + int64(res.Usage.TotalTokens),
	}, 0)
}
