package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

const orchestratorPrompt = `You are the orchestrator of a team of agents answering a user in a chat.
For anything that needs research, several steps or tools, delegate with delegate_task
(agent "researcher" for finding facts, "general" for everything else); you may delegate
several tasks at once. To run one tool directly, use run_tool. For small talk, answer
directly in plain text. Tell the user briefly what you are doing.`

// orchestratorTools are the tools the orchestrator is offered.
func (h *Handlers) orchestratorTools() []llm.Tool {
	agents := make([]any, 0, len(h.cfg.Roles))
	for name := range h.cfg.Roles {
		agents = append(agents, name)
	}
	slices.SortFunc(agents, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
	return []llm.Tool{
		{Name: "delegate_task", Description: "Delegate a task to a sub-agent that works on it with tools and reports back.",
			Parameters: map[string]any{"type": "object", "required": []any{"agent", "instruction"}, "properties": map[string]any{
				"agent":       map[string]any{"type": "string", "enum": agents},
				"instruction": map[string]any{"type": "string", "description": "What the sub-agent should do, self-contained."},
			}}},
		{Name: "run_tool", Description: "Run one tool directly. Tools: " + strings.Join(h.tools.Names(), ", ") + ".",
			Parameters: map[string]any{"type": "object", "required": []any{"name", "args"}, "properties": map[string]any{
				"name": map[string]any{"type": "string"},
				"args": map[string]any{"type": "object"},
			}}},
	}
}

// orchestrator handles a user message in a chat: it answers, delegates
// tasks, runs a tool, or routes the message to a sub-agent that is
// waiting for the user's answer.
func (h *Handlers) orchestrator(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	msg := ev.Doc
	replyPath := c.messages() + "/" + replyID(msg.ID)
	// The chat document: created if need be, its activity recorded
	// (memory.go; or, in the common case, left to finishTurn); a closed
	// chat runs nothing.
	now := time.Now()
	chatDoc, deferred, err := h.touchChat(ctx, c, now)
	if err != nil {
		return err
	} else if str(chatDoc, "status") == chatClosed {
		return h.failReply(ctx, c, msg, replyPath, map[string]any{"kind": "closed", "content": closedReply})
	}
	t := &turn{msg: msg, known: chatDoc}
	if deferred {
		t.touchAt = now.UnixMilli()
	}
	started, err := h.orchestrate(ctx, c, t, replyPath)
	if err != nil {
		// What the turn spent and the activity are still recorded (the
		// delivery is retried; a retry that asks the model again spends
		// again).
		if ferr := h.finishTurn(ctx, c, t, false); ferr != nil {
			h.log.Error("orchestrator: chat document not updated", "chat", c.path(), "err", ferr)
		}
		return err
	}
	if err := h.finishTurn(ctx, c, t, started); err != nil {
		return err
	}
	if !started {
		return nil
	}
	// Idle again at once when the tasks all ended already (a run_tool
	// task, a redelivery).
	return h.maybeIdleFrom(ctx, c, t.known)
}

// turn is what one orchestrator delivery knows of its chat document and
// has still to write into it (finishTurn).
type turn struct {
	msg *collections.Document
	// known is the chat document as the delivery last read or wrote it
	// (nil: to be read).
	known *collections.Document
	// touchAt, when not 0, is the activity (lastActivityAt) touchChat left
	// to finishTurn.
	touchAt int64
	// res is the decision's model response (its tokens).
	res *llm.Response
	// waiting are the chat's tasks waiting for the user, once read
	// (waitingRead): routeReply and the decision's prompt share one query.
	waiting     []*collections.Document
	waitingRead bool
	// finished: the turn's chat fields are written (startAtOnce), there
	// is nothing left for finishTurn.
	finished bool
}

// turnWaiting is Handlers.waitingForUser read once per turn.
func (h *Handlers) turnWaiting(ctx context.Context, c chat, t *turn) ([]*collections.Document, error) {
	if t.waitingRead {
		return t.waiting, nil
	}
	w, err := h.waitingForUser(ctx, c)
	if err != nil {
		return nil, err
	}
	t.waiting, t.waitingRead = w, true
	return w, nil
}

// orchestrate is the orchestrator's work on a user message once the chat
// is open; started reports that the message's plan was carried out (its
// tasks exist).
func (h *Handlers) orchestrate(ctx context.Context, c chat, t *turn, replyPath string) (started bool, _ error) {
	msg := t.msg
	// A message the user sent before canceling the chat's run starts
	// nothing: no decision, no task. (On the document touchChat just read
	// or wrote: a cancel after it is caught before the plan is carried
	// out, below.)
	if stop, err := canceledFor(t.known, msg.CreatedAt); err != nil || stop {
		return false, err
	}
	if routed, err := h.routeReply(ctx, c, msg, func() ([]*collections.Document, error) { return h.turnWaiting(ctx, c, t) }); err != nil || routed {
		return false, err
	}
	reply, err := h.getOpt(ctx, replyPath)
	if err != nil {
		return false, err
	}
	if reply == nil {
		// The model's decision is stored (in the reply's plan) before it is
		// acted on, so a redelivery carries it out instead of asking again.
		data, err := h.decide(ctx, c, t, replyPath)
		if err != nil || data == nil {
			return false, err
		}
		if started, done, err := h.startAtOnce(ctx, c, t, replyPath, data); err != nil || done {
			return started, err
		}
		if reply, err = h.createOnce(ctx, replyPath, data); err != nil {
			return false, err
		}
	}
	if !h.seals.valid(reply, chatMessageSeal) {
		// Someone else wrote the reply (a rules file that lets users write
		// assistant messages): its plan is not the model's.
		h.log.Warn("orchestrator: ignoring a reply the runtime did not write", "path", reply.Path)
		return false, nil
	}
	// The pending notifications the decision carried (again on a
	// redelivery, in case the first one stopped before).
	if err := h.markDelivered(ctx, c, reply); err != nil {
		return false, err
	}
	plan, _ := reply.Data["plan"].([]any)
	if len(plan) == 0 {
		return false, nil
	}
	// Canceled while the model decided: the plan is not carried out.
	cur, err := h.getOpt(ctx, c.path())
	if err != nil {
		return false, err
	}
	t.known = cur
	if stop, err := canceledFor(cur, msg.CreatedAt); err != nil || stop {
		return false, err
	}
	for i, p := range plan {
		call, _ := p.(map[string]any)
		if err := h.startTask(ctx, c, msg, i, call); err != nil {
			return false, err
		}
	}
	return true, nil
}

// startAtOnce carries out a fresh decision (reply, the reply's data) in one
// commit when its plan only delegates (or is empty) and it carries no
// notifications: the reply, the plan's tasks and the turn's chat document
// fields (finishTurn's: activity, tokens and, with tasks, runStatus
// "running"), the chat's update checked against the version the turn
// knows, so a cancel while the model decided fails the batch. Three
// commits on the way to the first task become one; the reply still holds
// the plan, and nothing of it exists without the rest (a reader that sees
// the reply sees the chat's tokens). done is false when it did not
// (another plan, a chat that moved, a redelivery: orchestrate then writes
// step by step, as before). started reports that tasks were created.
func (h *Handlers) startAtOnce(ctx context.Context, c chat, t *turn, replyPath string, reply map[string]any) (started, done bool, _ error) {
	plan, _ := reply["plan"].([]any)
	if reply["notifications"] != nil || t.known == nil {
		return false, false, nil
	}
	started = len(plan) > 0
	if stop, err := canceledFor(t.known, t.msg.CreatedAt); err != nil || stop {
		return false, false, nil // the step-by-step path settles it
	}
	writes := []collections.Write{createWrite(replyPath, reply)}
	for i, p := range plan {
		call, _ := p.(map[string]any)
		w, ok := h.delegateWrite(c, t.msg, i, call)
		if !ok {
			return false, false, nil
		}
		writes = append(writes, w)
	}
	patch := h.turnPatch(c, t, started)(t.known)
	if patch == nil {
		return false, false, nil // nothing to pin the chat's version to
	}
	writes = append(writes, updateWrite(c.path(), patch, t.known.Version))
	docs, done, err := h.batchIfAsRead(ctx, writes)
	if err != nil {
		// The batch may have committed all the same (its answer lost on the
		// way back): then finishTurn must not count the decision's tokens
		// a second time. The reply tells, the batch being atomic.
		if r, rerr := h.getOpt(ctx, replyPath); rerr != nil || r != nil {
			t.finished = true
		}
		return false, false, err
	}
	if !done {
		return false, false, nil
	}
	t.known, t.finished = docs[len(docs)-1], true
	return started, true, nil
}

// finishTurn writes the turn's chat document fields in one compare-and-swap
// commit, after the message's tasks exist: the activity touchChat left
// (t.touchAt), the decision's tokens (tokensUsed, lastModel) and, when the
// plan was carried out (started), runStatus "running" (so a concurrent
// finalize that finds no task unfinished cannot leave the chat idle behind
// them; a cancel of the chat at or after the message is never
// overwritten). It is tried first against t.known, and leaves the document
// it wrote there.
//
// One commit instead of three, at a price: a crash after the reply or the
// tasks were written and before this commit loses the decision's tokens in
// the chat's tokensUsed (the redelivery finds the reply and asks the model
// nothing). That counter is informational; the user's daily usage
// (agent-usage, what budgets are enforced on) is recorded with the model
// call itself and stays exact. The activity and the runStatus are written
// by the redelivery.
func (h *Handlers) finishTurn(ctx context.Context, c chat, t *turn, started bool) error {
	if t.finished || t.touchAt == 0 && t.res == nil && !started {
		return nil
	}
	d, err := h.casChatFrom(ctx, c, t.known, h.turnPatch(c, t, started))
	if err != nil {
		return err
	}
	t.known = d
	return nil
}

// turnPatch is finishTurn's write on the chat document cur (nil: none).
func (h *Handlers) turnPatch(c chat, t *turn, started bool) func(cur *collections.Document) map[string]any {
	return func(cur *collections.Document) map[string]any {
		patch := map[string]any{}
		switch {
		case cur == nil && t.touchAt != 0:
			patch = h.touchPatch(c, nil, t.touchAt) // deleted meanwhile
		case cur == nil:
			if !started {
				return nil // deleted meanwhile: only the tokens were left
			}
			patch["userId"] = c.uid
		case t.touchAt != 0:
			if p := h.touchPatch(c, cur, t.touchAt); p != nil {
				patch = p
			}
		}
		if cur != nil {
			addTokens(patch, cur, t.res, h.orchestratorModel())
		}
		if started && (cur == nil || str(cur, "runStatus") != "running" && t.msg.CreatedAt > canceledThrough(cur)) {
			patch["runStatus"] = "running"
		}
		if len(patch) == 0 {
			return nil
		}
		return patch
	}
}

// decide asks the model what to do about msg and returns its answer, the
// sealed data of the reply at replyPath, with the plan of tool calls to
// carry out (the caller writes it). When the model cannot answer (a limit
// of the user's, or an error no retry can fix) decide writes the reply
// that tells the user so, and returns no data.
//
// t.known is the chat document as the orchestrator last read or wrote it
// (its memory); the decision's response goes into t.res.
func (h *Handlers) decide(ctx context.Context, c chat, t *turn, replyPath string) (map[string]any, error) {
	msg := t.msg
	history, full, err := h.chatHistory(ctx, c, msg)
	if err != nil {
		return nil, err
	}
	// The summary of the messages before the recent ones (compressed now
	// when some fell out of the window: never when the window is not full).
	mem, known, err := h.chatMemory(ctx, c, msg, t.known, full)
	t.known = known
	if err != nil {
		return nil, err
	}
	// on_query_start, then the notifications of the chat's finished tasks
	// (on_session_end): both go into this decision's prompt.
	notes, seen, err := h.queryStartHook(ctx, c, msg, history)
	if err != nil {
		return nil, err
	}
	pending, err := h.pendingNotices(ctx, c, orchestratorTarget)
	if err != nil {
		return nil, err
	}
	notes = promptNotices(append(notes, pending...))
	res, err := h.askOrchestrator(ctx, c, t, append(mem, history...), notes, seen)
	// The tokens go into the chat document with the turn's other fields
	// (finishTurn).
	t.res = res
	if le, ok := asLimit(err); ok {
		// A limit of the user's: say so once, in the chat, and stop.
		return nil, h.failReply(ctx, c, msg, replyPath, map[string]any{"kind": "limit", "content": le.msg})
	}
	if permanentModelError(err) {
		// Tell the user rather than retry a request that cannot succeed.
		return nil, h.failReply(ctx, c, msg, replyPath, map[string]any{
			"content": "Sorry, the model could not answer: " + modelFailure(err) + ".", "model": h.orchestratorModel(),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("orchestrator model: %w", err)
	}
	plan := make([]any, len(res.ToolCalls))
	taskIDs := make([]any, 0, len(res.ToolCalls))
	for i, tc := range res.ToolCalls {
		plan[i] = map[string]any{"id": tc.ID, "name": tc.Name, "arguments": tc.Arguments}
		taskIDs = append(taskIDs, taskID(msg.ID, i))
	}
	content := res.Content
	if content == "" && len(plan) > 0 {
		content = "Working on it."
	}
	status := "done"
	if len(plan) > 0 {
		status = "delegated"
	}
	data := map[string]any{
		"userId": c.uid, "chatId": c.id, "role": "assistant", "content": content,
		"replyTo": msg.ID, "plan": plan, "taskIds": taskIDs, "status": status, "model": h.orchestratorModel(),
	}
	if ids := noticeIDs(notes); len(ids) > 0 {
		data["notifications"] = ids
	}
	return h.seals.seal(replyPath, data, chatMessageSeal), nil
}

// askOrchestrator asks the model about the chat's history, with the
// rules' notifications, once the user's concurrent runs allow it.
func (h *Handlers) askOrchestrator(ctx context.Context, c chat, t *turn, history []llm.Message, notes []notice, seen *usageRead) (*llm.Response, error) {
	if err := h.checkRuns(ctx, c, t.msg); err != nil {
		return nil, err
	}
	prompt, tools := []llm.Message{{Role: "system", Content: orchestratorPrompt}}, h.orchestratorTools()
	// Tasks waiting for the user: the message may answer one (waits.go).
	waiting, err := h.waitingPrompt(ctx, c, t)
	if err != nil {
		return nil, err
	}
	if waiting != nil {
		prompt, tools = append(prompt, *waiting), append(tools, answerTaskTool)
	}
	return h.completeSeen(ctx, c.uid, h.forOrchestrator(llm.Request{
		Messages: withNotices(append(prompt, history...), notes),
		Tools:    tools,
	}), seen)
}

// failReply writes (once) a failed reply to msg; fields says why.
func (h *Handlers) failReply(ctx context.Context, c chat, msg *collections.Document, replyPath string, fields map[string]any) error {
	data := map[string]any{"userId": c.uid, "chatId": c.id, "role": "assistant", "replyTo": msg.ID, "status": "failed"}
	maps.Copy(data, fields)
	_, err := h.createOnce(ctx, replyPath, h.seals.seal(replyPath, data, chatMessageSeal))
	return err
}

// chatHistory returns the chat's recent messages (the last Config.History
// up to msg), oldest first, ending with msg. The older ones are in the
// chat's summary (chatMemory). full reports whether the window is full
// (when it is not, every message up to msg is in it).
func (h *Handlers) chatHistory(ctx context.Context, c chat, msg *collections.Document) (_ []llm.Message, full bool, _ error) {
	docs, err := h.docs.Query(ctx, collections.Query{
		Collection: c.messages(),
		Filters:    []collections.Filter{{Field: collections.FieldCreatedAt, Op: collections.OpLe, Value: msg.CreatedAt}},
		OrderBy:    []collections.Order{{Field: collections.FieldCreatedAt, Direction: "desc"}},
		Limit:      h.cfg.History,
	})
	if err != nil {
		return nil, false, err
	}
	full = len(docs) >= h.cfg.History
	var out []llm.Message
	seen := false
	for i := len(docs) - 1; i >= 0; i-- {
		d := docs[i]
		if d.CreatedAt > msg.CreatedAt {
			continue // written after this message: not part of its context
		}
		role := str(d, "role")
		if role != "user" && role != "assistant" {
			continue
		}
		if role == "assistant" && !h.seals.valid(d, chatMessageSeal) {
			continue // not the runtime's: the model must not take it for its own words
		}
		seen = seen || d.ID == msg.ID
		out = append(out, llm.Message{Role: role, Content: str(d, "content")})
	}
	if !seen {
		out = append(out, llm.Message{Role: "user", Content: str(msg, "content")})
	}
	return out, full, nil
}

// startTask creates the task of one planned call (idempotent). A run_tool
// task runs its tool right here; its completion is reported like an
// agent's.
func (h *Handlers) startTask(ctx context.Context, c chat, msg *collections.Document, i int, call map[string]any) error {
	name, _ := call["name"].(string)
	argsText, _ := call["arguments"].(string)
	var args map[string]any
	_ = json.Unmarshal([]byte(argsText), &args) // bad arguments: no args (run_tool runs "{}")
	path := c.tasks() + "/" + taskID(msg.ID, i)
	base := map[string]any{"userId": c.uid, "chatId": c.id, "triggerMessageId": msg.ID, "status": "pending"}
	switch name {
	case "delegate_task":
		w, _ := h.delegateWrite(c, msg, i, call)
		_, err := h.createOnce(ctx, w.Path, w.Data)
		return err
	case "run_tool":
		tool, _ := args["name"].(string)
		toolArgs, _ := json.Marshal(args["args"])
		if args["args"] == nil {
			toolArgs = []byte("{}")
		}
		base["type"], base["name"], base["instruction"], base["status"] = "tool", "tool:"+tool, string(toolArgs), "running"
		task, err := h.createOnce(ctx, path, h.seals.seal(path, base, taskSeal))
		if err != nil || str(task, "status") != "running" || !h.seals.valid(task, taskSeal) {
			return err
		}
		// The plan's tools run one after the other: one whose turn comes
		// after the user canceled the chat's run does not run.
		if stop, err := h.chatCanceledFor(ctx, c, msg.CreatedAt); err != nil || stop {
			if err != nil {
				return err
			}
			return h.cancelTask(ctx, path, "chat")
		}
		result, runErr := h.tools.Run(ctx, tool, string(toolArgs), toolsCall(c.uid))
		patch := map[string]any{"status": "success"}
		if runErr != nil {
			patch["status"], patch["error"] = "failed", runErr.Error()
		} else {
			b, _ := json.Marshal(result)
			patch["result"] = string(b)
		}
		// Version-checked: a cancel while the tool ran wins, and its
		// result is discarded.
		_, err = h.docs.Update(ctx, path, patch, task.Version)
		return ignoreConflict(err)
	case answerTaskTool.Name:
		return h.answerTask(ctx, c, msg, argsText)
	default:
		// A call the orchestrator was not offered: record it as a failed
		// task so the user sees it.
		base["type"], base["name"], base["instruction"], base["status"] = "tool", "tool:"+name, argsText, "failed"
		base["error"] = fmt.Sprintf("unknown orchestrator tool %q", name)
		_, err := h.createOnce(ctx, path, h.seals.seal(path, base, taskSeal))
		return err
	}
}

// delegateWrite is the create of the agent task of planned call i, a
// delegate_task (false for another call).
func (h *Handlers) delegateWrite(c chat, msg *collections.Document, i int, call map[string]any) (collections.Write, bool) {
	if name, _ := call["name"].(string); name != "delegate_task" {
		return collections.Write{}, false
	}
	argsText, _ := call["arguments"].(string)
	var args map[string]any
	argErr := json.Unmarshal([]byte(argsText), &args)
	agent, _ := args["agent"].(string)
	if _, ok := h.cfg.Roles[agent]; !ok {
		agent = "general"
	}
	instr, _ := args["instruction"].(string)
	if argErr != nil || instr == "" {
		instr = str(msg, "content")
	}
	path := c.tasks() + "/" + taskID(msg.ID, i)
	return createWrite(path, h.seals.seal(path, map[string]any{
		"userId": c.uid, "chatId": c.id, "triggerMessageId": msg.ID, "status": "pending",
		"type": "agent", "name": "agent:" + agent, "instruction": instr,
	}, taskSeal)), true
}

// firstTask returns the first task of the chat that matches filters and
// that the runtime created, or nil.
func (h *Handlers) firstTask(ctx context.Context, c chat, filters ...collections.Filter) (*collections.Document, error) {
	tasks, err := h.docs.Query(ctx, collections.Query{Collection: c.tasks(), Filters: filters, Limit: 20})
	if err != nil {
		return nil, err
	}
	for _, t := range tasks {
		if h.seals.valid(t, taskSeal) {
			return t, nil
		}
	}
	return nil, nil
}

// nextFreeSeq returns the seq after a sub-agent's last message and after
// the seqs its last assistant step reserved for tool results (seq+1+index).
func (h *Handlers) nextFreeSeq(ctx context.Context, c chat, sa string) (int64, error) {
	recent, err := h.docs.Query(ctx, collections.Query{
		Collection: c.subMessages(sa),
		OrderBy:    []collections.Order{{Field: "seq", Direction: "desc"}},
		Limit:      64,
	})
	if err != nil {
		return 0, err
	}
	var top int64
	for _, m := range recent {
		top = max(top, num(m, "seq"))
		if str(m, "role") == "assistant" {
			top = max(top, num(m, "seq")+int64(len(toolCallsOf(m))))
			break
		}
	}
	return top + 1, nil
}

// llmSummaryRequest asks the model to turn a task result into the chat
// answer.
func llmSummaryRequest(instruction, result string) llm.Request {
	return llm.Request{Messages: []llm.Message{
		{Role: "system", Content: "You write the final answer to the user from a sub-agent's result. Be concise and faithful to the result."},
		{Role: "user", Content: "Task: " + instruction + "\n\nResult:\n" + result},
	}}
}
