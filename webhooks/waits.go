package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// Waits (docs/agent-runs.md, "Waits, timeouts and replies"). A sub-agent
// step that calls ask_user, or send_message with wait: true, opens a wait
// on its task: status "waiting", a waitId unique to the wait, waitUntil
// (unix ms) and waitState (who is asked, who replied, what they said). The
// wait ends when everyone asked replied, or at waitUntil (the
// on-wait-timeout trigger, scheduled with deliverAt, calls waitTimeout);
// either way the task goes back to running with a version check (the
// resolution is recorded in waitState first, so a handler that stops
// half-way finishes on redelivery) and the sub-agent's loop resumes with
// what the model must see.

// Defaults and bounds of the waits.
const (
	DefaultWaitTimeout   = 10 * time.Minute
	DefaultMaxChildTasks = 4
	// minCallTimeout and maxCallTimeout bound a model's timeoutSeconds.
	minCallTimeout = 10 * time.Second
	maxCallTimeout = 24 * time.Hour
	// maxMessageText bounds a send_message text.
	maxMessageText = 16 << 10
	// maxReplyText bounds one reply as the waiting model sees it.
	maxReplyText = 4 << 10
	// maxRecipients bounds send_message's to.
	maxRecipients = 8
	// seenMessages and seenText bound the [SEEN]/[NEW] block.
	seenMessages = 20
	seenText     = 500
	// routeSealField seals the routing decision written on a user message.
	routeSealField = "routeSeal"
	// linkSealField seals a child task's link to the wait of its parent.
	linkSealField = "linkSeal"
)

var (
	routeSeal = []string{"routedTo"}
	linkSeal  = []string{"parentTaskId", "parentWaitId", "parentStepSeq"}
)

var sendMessageTool = llm.Tool{
	Name: "send_message",
	Description: "Send a message to the user and/or other agent roles. With wait: true the task waits until every recipient replied " +
		"(or the timeout passed); their replies are this tool's result. A message to an agent role starts a task for that role.",
	Parameters: map[string]any{"type": "object", "required": []any{"to", "text"}, "properties": map[string]any{
		"to":             map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": `"user" and/or agent role names`},
		"text":           map[string]any{"type": "string"},
		"wait":           map[string]any{"type": "boolean"},
		"timeoutSeconds": map[string]any{"type": "number", "description": "how long to wait (10 to 86400; default: the server's)"},
	}},
}

// isWaitTool reports whether the model's call is handled by the waits
// (never by the tool runner).
func isWaitTool(name string) bool { return name == askUserTool.Name || name == sendMessageTool.Name }

// waitFor is one party a wait waits for.
type waitFor struct {
	Kind      string `json:"kind"` // user | agent
	Name      string `json:"name"`
	TaskID    string `json:"taskId"`
	Responded bool   `json:"responded"`
}

// waitReply is one reply a wait received.
type waitReply struct {
	From      string `json:"from"` // user | agent
	Name      string `json:"name"`
	Text      string `json:"text"`
	MessageID string `json:"messageId"`
	TaskID    string `json:"taskId"`
	At        int64  `json:"at"`
}

// waitState is the task's waitState (seed 004). Every field is always
// written, so a new wait's state replaces the last one's under PATCH.
type waitState struct {
	Tool         string      `json:"tool"` // ask_user | send_message
	ToolCallID   string      `json:"toolCallId"`
	AssistantSeq int64       `json:"assistantSeq"`
	Index        int64       `json:"index"`
	MessageID    string      `json:"messageId"`
	WaitingFor   []waitFor   `json:"waitingFor"`
	Replies      []waitReply `json:"replies"`
	StartedAt    int64       `json:"startedAt"`
	Timeout      int64       `json:"timeout"`
	Resolution   string      `json:"resolution"` // "" while open | replied | timeout
}

func (ws *waitState) doc() map[string]any {
	if ws.WaitingFor == nil {
		ws.WaitingFor = []waitFor{}
	}
	if ws.Replies == nil {
		ws.Replies = []waitReply{}
	}
	b, _ := json.Marshal(ws)
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	_ = dec.Decode(&m)
	return m
}

// waitStateOf reads a task's waitState (nil: none, or not one the runtime
// wrote).
func waitStateOf(task *collections.Document) *waitState {
	raw, ok := task.Data["waitState"].(map[string]any)
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var ws waitState
	if json.Unmarshal(b, &ws) != nil {
		return nil
	}
	return &ws
}

func (ws *waitState) allResponded() bool {
	for _, w := range ws.WaitingFor {
		if !w.Responded {
			return false
		}
	}
	return true
}

func (ws *waitState) waitsForUser() bool {
	for _, w := range ws.WaitingFor {
		if w.Kind == "user" && !w.Responded {
			return true
		}
	}
	return false
}

func (ws *waitState) hasReply(match func(waitReply) bool) bool {
	return slices.ContainsFunc(ws.Replies, match)
}

// waitID names the wait a step opens: unique per task and step.
func waitID(taskID string, stepSeq int64) string {
	return deriveID(taskID, "-w", strconv.FormatInt(stepSeq, 10))
}

// waitQuestionID is the chat message asking the user in a wait.
func waitQuestionID(waitID string) string { return deriveID(waitID, "-q") }

// childTaskID is the task send_message starts for one agent recipient.
func childTaskID(taskID string, stepSeq int64, index int, role string) string {
	return deriveID(taskID, "-s", strconv.FormatInt(stepSeq, 10), "-", strconv.Itoa(index), "-", role)
}

// sentMessageID is the chat message send_message writes to the user when
// it does not wait.
func sentMessageID(taskID string, stepSeq int64, index int) string {
	return deriveID(taskID, "-s", strconv.FormatInt(stepSeq, 10), "-", strconv.Itoa(index), "-msg")
}

// waitTimeoutFor is how long a wait lasts: the model's timeoutSeconds
// bounded to 10 s..24 h, or the configured default.
func (h *Handlers) waitTimeoutFor(secs *float64) time.Duration {
	if secs == nil || *secs <= 0 {
		return h.cfg.WaitTimeout
	}
	// Bounded as seconds first: a huge number would overflow a Duration.
	s := min(max(*secs, minCallTimeout.Seconds()), maxCallTimeout.Seconds())
	return time.Duration(s * float64(time.Second))
}

// sendArgs are send_message's arguments.
type sendArgs struct {
	To             any      `json:"to"`
	Text           string   `json:"text"`
	Wait           bool     `json:"wait"`
	TimeoutSeconds *float64 `json:"timeoutSeconds"`
}

// recipients parses and checks to: "user" or role names, at least one, no
// more than maxRecipients, duplicates dropped.
func (h *Handlers) recipients(to any) ([]string, error) {
	var names []string
	switch v := to.(type) {
	case string:
		names = []string{v}
	case []any:
		for _, n := range v {
			s, ok := n.(string)
			if !ok {
				return nil, errors.New(`"to" must be a list of names`)
			}
			names = append(names, s)
		}
	default:
		return nil, errors.New(`"to" must be a list of names: "user" or agent roles`)
	}
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" || slices.Contains(out, n) {
			continue
		}
		if _, ok := h.cfg.Roles[n]; n != "user" && !ok {
			return nil, fmt.Errorf("unknown recipient %q: send to \"user\" or one of the agent roles %s", truncate(n, 64), strings.Join(h.roleNames(), ", "))
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New(`"to" names no recipient`)
	}
	if len(out) > maxRecipients {
		return nil, fmt.Errorf("at most %d recipients", maxRecipients)
	}
	return out, nil
}

func (h *Handlers) roleNames() []string {
	names := make([]string, 0, len(h.cfg.Roles))
	for n := range h.cfg.Roles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// plannedSend is a checked send_message call.
type plannedSend struct {
	args   sendArgs
	to     []string
	agents []string // the agent roles among to
	err    string   // the tool error the model sees ("" when it may go)
}

// planSend checks one send_message call of a step: its arguments, the
// depth (a task started by send_message cannot message agents) and the
// task's child-task budget, counting the children of earlier steps
// (earlier, already counted in used, for earlier calls of this step).
func (h *Handlers) planSend(task *collections.Document, tc llm.ToolCall, used int) plannedSend {
	var p plannedSend
	if err := json.Unmarshal([]byte(tc.Arguments), &p.args); err != nil {
		p.err = "error: invalid arguments: " + truncate(err.Error(), 200)
		return p
	}
	to, err := h.recipients(p.args.To)
	if err != nil {
		p.err = "error: " + err.Error()
		return p
	}
	p.to = to
	if strings.TrimSpace(p.args.Text) == "" {
		p.err = `error: "text" is empty`
		return p
	}
	if len(p.args.Text) > maxMessageText {
		p.err = fmt.Sprintf("error: text of %d bytes is over the %d-byte limit", len(p.args.Text), maxMessageText)
		return p
	}
	for _, n := range to {
		if n != "user" {
			p.agents = append(p.agents, n)
		}
	}
	if len(p.agents) > 0 && str(task, "parentTaskId") != "" {
		p.err = "error: this task was started by another agent's message; it cannot message agents itself (reply with your final answer instead)"
		return p
	}
	if used+len(p.agents) > h.cfg.MaxChildTasks {
		p.err = fmt.Sprintf("error: at most %d messages to agents per task; %d sent already", h.cfg.MaxChildTasks, used)
		return p
	}
	return p
}

// childTasksBefore counts the tasks send_message started for task in steps
// before stepSeq (a redelivered step counts the same).
func (h *Handlers) childTasksBefore(ctx context.Context, c chat, task *collections.Document, stepSeq int64) (int, error) {
	kids, err := h.docs.Query(ctx, collections.Query{Collection: c.tasks(), Filters: []collections.Filter{eq("userId", c.uid), eq("parentTaskId", task.ID)}, Limit: 1000})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range kids {
		if h.seals.valid(k, taskSeal) && num(k, "parentStepSeq") < stepSeq {
			n++
		}
	}
	return n, nil
}

// startWaits carries out a step's ask_user and send_message calls: the
// first that waits opens the step's wait; a send_message that does not
// wait is sent and answered "sent"; a refused call, or a second waiting
// call, is answered with a tool error the model sees. Idempotent.
func (h *Handlers) startWaits(ctx context.Context, c chat, sa string, agent, task, step *collections.Document, calls []llm.ToolCall) error {
	stepSeq := num(step, "seq")
	used, usedRead := 0, false
	var wait *waitState
	var question string
	var children []map[string]any
	var childPaths []string
	var waitTimeout time.Duration
	// later are the writes that wake the loop or reach others (the tool
	// messages of calls that do not wait, the messages sent): when the
	// step waits, they follow the wait's opening.
	var later []func() error
	answer := func(i int, tc llm.ToolCall, content string) {
		later = append(later, func() error {
			return h.toolMessage(ctx, c, sa, stepSeq+1+int64(i), tc.ID, tc.Name, content)
		})
	}
	for i, tc := range calls {
		if !isWaitTool(tc.Name) {
			continue
		}
		if tc.Name == askUserTool.Name {
			if wait != nil {
				answer(i, tc, "error: only one waiting call per step; this question was not asked")
				continue
			}
			var a struct {
				Question       string   `json:"question"`
				TimeoutSeconds *float64 `json:"timeoutSeconds"`
			}
			_ = json.Unmarshal([]byte(tc.Arguments), &a)
			question = a.Question
			if question == "" {
				question = "Could you tell me more?"
			}
			waitTimeout = h.waitTimeoutFor(a.TimeoutSeconds)
			wait = &waitState{Tool: askUserTool.Name, ToolCallID: tc.ID, AssistantSeq: stepSeq, Index: int64(i),
				WaitingFor: []waitFor{{Kind: "user", Name: "user"}}}
			continue
		}
		if !usedRead {
			n, err := h.childTasksBefore(ctx, c, task, stepSeq)
			if err != nil {
				return err
			}
			used, usedRead = n, true
		}
		p := h.planSend(task, tc, used)
		if p.err == "" && p.args.Wait && wait != nil {
			p.err = "error: only one waiting call per step; this message was not sent"
		}
		if p.err != "" {
			answer(i, tc, p.err)
			continue
		}
		used += len(p.agents)
		var ws *waitState
		if p.args.Wait {
			waitTimeout = h.waitTimeoutFor(p.args.TimeoutSeconds)
			ws = &waitState{Tool: sendMessageTool.Name, ToolCallID: tc.ID, AssistantSeq: stepSeq, Index: int64(i)}
		}
		for _, n := range p.to {
			if n == "user" {
				if ws != nil {
					ws.WaitingFor = append(ws.WaitingFor, waitFor{Kind: "user", Name: "user"})
					question = p.args.Text
					continue
				}
				path := c.messages() + "/" + sentMessageID(task.ID, stepSeq, i)
				data := h.seals.seal(path, map[string]any{
					"userId": c.uid, "chatId": c.id, "role": "assistant", "kind": "message", "content": p.args.Text,
					"taskId": task.ID, "from": h.roleOf(task),
				}, chatMessageSeal)
				later = append(later, func() error { _, err := h.createOnce(ctx, path, data); return err })
				continue
			}
			id := childTaskID(task.ID, stepSeq, i, n)
			path := c.tasks() + "/" + id
			data := map[string]any{
				"userId": c.uid, "chatId": c.id, "triggerMessageId": str(task, "triggerMessageId"), "status": "pending",
				"type": "agent", "name": "agent:" + n,
				"instruction":  fmt.Sprintf("Message from the %s agent (working on: %s):\n\n%s", h.roleOf(task), truncate(str(task, "instruction"), 500), p.args.Text),
				"parentTaskId": task.ID, "parentStepSeq": stepSeq, "parentWaitId": "",
			}
			if ws != nil {
				data["parentWaitId"] = waitID(task.ID, stepSeq)
				ws.WaitingFor = append(ws.WaitingFor, waitFor{Kind: "agent", Name: n, TaskID: id})
			}
			data[linkSealField] = h.seals.sign(path, data, linkSeal)
			children, childPaths = append(children, h.seals.seal(path, data, taskSeal)), append(childPaths, path)
		}
		if ws != nil {
			wait = ws
			continue
		}
		// Not waiting: the children start and the model hears "sent".
		paths, data := childPaths, children
		later = append(later, func() error { return h.createChildren(ctx, paths, data) })
		children, childPaths = nil, nil
		answer(i, tc, "sent to "+strings.Join(p.to, ", "))
	}
	if wait != nil {
		opened, err := h.openWait(ctx, c, sa, agent, task, wait, question, waitTimeout)
		if err != nil || !opened {
			return err
		}
		// The children of a wait start once it is open, so none can
		// finish before its reply has a wait to go to.
		if err := h.createChildren(ctx, childPaths, children); err != nil {
			return err
		}
	}
	for _, f := range later {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func (h *Handlers) createChildren(ctx context.Context, paths []string, data []map[string]any) error {
	for i, p := range paths {
		if _, err := h.createOnce(ctx, p, data[i]); err != nil {
			return err
		}
	}
	return nil
}

// openWait puts the task into the wait (version-checked: a task canceled
// or finished meanwhile stays so) and the sub-agent into waiting. It
// reports whether the wait is open (or was opened by an earlier delivery).
func (h *Handlers) openWait(ctx context.Context, c chat, sa string, agent, task *collections.Document, ws *waitState, question string, timeout time.Duration) (bool, error) {
	id := waitID(task.ID, ws.AssistantSeq)
	if str(task, "waitId") == id {
		return true, nil // a redelivery: opened already
	}
	if str(task, "status") != "running" || str(agent, "status") != "active" {
		return false, nil
	}
	now := time.Now()
	ws.StartedAt, ws.Timeout = now.UnixMilli(), timeout.Milliseconds()
	if ws.waitsForUser() {
		ws.MessageID = waitQuestionID(id)
	}
	// The sub-agent first: a reply may come as soon as the task waits,
	// and it wakes only a sub-agent waiting in this wait.
	if _, err := h.docs.Update(ctx, agent.Path, map[string]any{"status": agentWaiting, "waitId": id}, 0); err != nil {
		return false, err
	}
	patch := map[string]any{
		"status": "waiting", "question": question, "waitId": id,
		"waitUntil": now.Add(timeout).UnixMilli(), "waitState": ws.doc(),
	}
	_, err := h.docs.Update(ctx, task.Path, patch, task.Version)
	if !errors.Is(err, collections.ErrPreconditionFailed) {
		return err == nil, err
	}
	cur, err := h.docs.Get(ctx, task.Path)
	if err != nil || str(cur, "waitId") == id {
		return err == nil, err
	}
	if str(cur, "status") == statusCanceled {
		// Canceled meanwhile: its settlement may have run before the
		// sub-agent was set waiting, so end the sub-agent here too.
		err = h.leaveWait(ctx, agent.Path, id, statusCanceled)
	}
	return false, err
}

// leaveWait moves the sub-agent at path, if it still waits in the wait id,
// to status (compare-and-swap: a write to the sub-agent meanwhile does not
// lose the move, and a sub-agent that moved on is left alone).
func (h *Handlers) leaveWait(ctx context.Context, path, id, status string) error {
	_, err := h.casUpdate(ctx, path, func(a *collections.Document) map[string]any {
		if str(a, "status") != agentWaiting || str(a, "waitId") != id {
			return nil
		}
		return map[string]any{"status": status}
	})
	return err
}

// resolveWait records a change of a task's open wait with
// compare-and-swap: change gets the wait's state and reports whether it
// applies (false: nothing to record). It returns the task as written, or
// as read when nothing applied, and whether change applied.
func (h *Handlers) resolveWait(ctx context.Context, path, id string, change func(*collections.Document, *waitState) bool) (*collections.Document, bool, error) {
	for range casAttempts {
		task, err := h.getOpt(ctx, path)
		if err != nil || task == nil {
			return nil, false, err
		}
		ws := waitStateOf(task)
		if !h.seals.valid(task, taskSeal) || str(task, "waitId") != id || ws == nil {
			return task, false, nil
		}
		if !change(task, ws) {
			return task, false, nil
		}
		patch := map[string]any{"waitState": ws.doc()}
		if ws.Resolution != "" {
			patch["status"], patch["waitUntil"] = "running", nil
		}
		updated, err := h.docs.Update(ctx, path, patch, task.Version)
		if errors.Is(err, collections.ErrPreconditionFailed) {
			continue
		}
		return updated, err == nil, err
	}
	return nil, false, fmt.Errorf("wait %s of %s: still conflicting after %d attempts", id, path, casAttempts)
}

// finishWait resumes the sub-agent of a task whose wait (its current
// waitId) is resolved: the sub-agent becomes active again, then the
// message the model sees is written (it wakes the loop): for an ask_user
// answered by the user, the answer as a user message (msg); otherwise the
// tool message answering the waiting call. Idempotent: a redelivery that
// finds the sub-agent moved on writes nothing.
func (h *Handlers) finishWait(ctx context.Context, c chat, task *collections.Document, msg *collections.Document) error {
	ws := waitStateOf(task)
	if ws == nil || ws.Resolution == "" {
		return nil
	}
	id, sa := str(task, "waitId"), task.ID
	agent, err := h.getOpt(ctx, c.subAgent(sa))
	if err != nil || agent == nil {
		return err
	}
	if str(agent, "status") == agentWaiting && str(agent, "waitId") == id {
		held, err := h.holdForClient(ctx, c, sa, agent, task, ws)
		if err != nil {
			return err
		}
		if !held {
			if err := h.leaveWait(ctx, agent.Path, id, "active"); err != nil {
				return err
			}
		}
	}
	if ws.Tool == askUserTool.Name && ws.Resolution == "replied" && msg != nil {
		// The user's answer follows the synthesised tool answer of the
		// call, as a user message (seq after the step's reserved seqs).
		answerPath := c.subMessages(sa) + "/" + answerID(msg.ID)
		if existing, err := h.getOpt(ctx, answerPath); err != nil || existing != nil {
			return err
		}
		seq, err := h.nextFreeSeq(ctx, c, sa)
		if err != nil {
			return err
		}
		_, err = h.createOnce(ctx, answerPath, h.seals.seal(answerPath, map[string]any{
			"userId": c.uid, "subAgentId": sa, "role": "user", "content": str(msg, "content"),
			"seq": seq, "chatMessageId": msg.ID,
		}, subMessageSeal))
		return err
	}
	return h.toolMessage(ctx, c, sa, ws.AssistantSeq+1+ws.Index, ws.ToolCallID, ws.Tool, waitResult(ws))
}

// holdForClient keeps the run of a task whose wait ended waiting for the
// client calls of the waiting step that are still pending: the task moves
// from running to waiting_tool (version-checked) and the sub-agent stays
// waiting; the last client result resumes both (clienttools.go). The
// calls are checked again after the move: a result written meanwhile may
// have found the task still running, so when none is pending any more the
// run is resumed here. held reports whether the run now waits for the
// client.
func (h *Handlers) holdForClient(ctx context.Context, c chat, sa string, agent, task *collections.Document, ws *waitState) (bool, error) {
	step, err := h.getOpt(ctx, c.subMessages(sa)+"/"+msgID(ws.AssistantSeq))
	if err != nil || step == nil || !h.seals.valid(step, subMessageSeal) {
		return false, err
	}
	if pending, err := h.clientCallsPending(ctx, c, sa, step); err != nil || !pending {
		return false, err
	}
	id := str(task, "waitId")
	moved, err := h.casUpdate(ctx, task.Path, func(cur *collections.Document) map[string]any {
		if str(cur, "status") != "running" || str(cur, "waitId") != id {
			return nil
		}
		return map[string]any{"status": taskWaitingTool}
	})
	if err != nil || moved == nil || str(moved, "status") != taskWaitingTool {
		return false, err
	}
	pending, err := h.clientCallsPending(ctx, c, sa, step)
	if err != nil || pending {
		return pending, err
	}
	_, err = h.resumeFromClient(ctx, agent, moved)
	return false, err
}

// waitResult is the tool result of a resolved wait: the replies, and at a
// timeout who did not reply.
func waitResult(ws *waitState) string {
	var b strings.Builder
	if ws.Resolution == "timeout" {
		var missing []string
		for _, w := range ws.WaitingFor {
			if !w.Responded {
				missing = append(missing, w.Name)
			}
		}
		fmt.Fprintf(&b, "timeout: no reply from %s within %s", strings.Join(missing, ", "), time.Duration(ws.Timeout)*time.Millisecond)
		if len(ws.Replies) == 0 {
			return b.String()
		}
		b.WriteString("\n")
	}
	b.WriteString("replies:")
	for _, r := range ws.Replies {
		who := r.Name
		if r.From == "agent" {
			who += " (agent)"
		}
		fmt.Fprintf(&b, "\n- %s: %s", who, truncate(r.Text, maxReplyText))
	}
	return b.String()
}

// waitTimeout ends a wait at its waitUntil: the on-wait-timeout trigger
// delivers the task's update that set waitUntil at that time. It acts only
// if the task still waits in that wait (a reply or a later wait makes it a
// no-op), and records the timeout before it resumes the run, so it fires
// once in effect however often it is delivered.
func (h *Handlers) waitTimeout(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	id := str(ev.Doc, "waitId")
	if id == "" {
		return nil
	}
	due := false
	task, _, err := h.resolveWait(ctx, ev.Path, id, func(task *collections.Document, ws *waitState) bool {
		if str(task, "status") != "waiting" || ws.Resolution != "" {
			return false
		}
		if time.Now().UnixMilli() < num(task, "waitUntil") {
			due = true
			return false
		}
		ws.Resolution = "timeout"
		return true
	})
	if err != nil {
		return err
	}
	if due {
		// Delivered early (a replay, clocks apart): retry the delivery.
		return fmt.Errorf("wait %s of %s is not due yet", id, ev.Path)
	}
	if task == nil || str(task, "waitId") != id {
		return nil
	}
	if ws := waitStateOf(task); ws == nil || ws.Resolution != "timeout" {
		return nil
	}
	// The wait's child tasks still at work are canceled: their answers
	// would come too late for the wait and must not land in the chat.
	if err := h.cancelWaitChildren(ctx, c, task, id); err != nil {
		return err
	}
	return h.finishWait(ctx, c, task, nil)
}

// cancelWaitChildren cancels (canceledBy "parent", version-checked, as a
// canceled parent's children are) the unfinished tasks send_message
// started for the wait id of task; finalize then settles each.
func (h *Handlers) cancelWaitChildren(ctx context.Context, c chat, task *collections.Document, id string) error {
	kids, err := h.docs.Query(ctx, collections.Query{
		Collection: c.tasks(), Filters: []collections.Filter{eq("userId", c.uid), eq("parentTaskId", task.ID)}, Limit: maxActiveTasksRead,
	})
	if err != nil {
		return fmt.Errorf("child tasks: %w", err)
	}
	for _, k := range kids {
		if str(k, "parentWaitId") != id || !h.seals.validField(k, linkSealField, linkSeal) || taskFinished(str(k, "status")) {
			continue
		}
		if err := h.cancelTask(ctx, k.Path, "parent"); err != nil {
			return err
		}
	}
	return nil
}

// ---- replies of the user ----

// routeTarget is the wait a user message answers.
type routeTarget struct{ taskID, waitID string }

// routeReply hands a user message to the wait it answers: the one its
// replyTo names (the question message of the wait), or, without replyTo,
// the one task of the chat waiting for the user when there is exactly
// one. It reports false when the message answers no open wait: the
// orchestrator then handles it as a new message (told which tasks wait).
// The decision is written on the message (sealed) before it is acted on,
// so a redelivery acts on the same wait. waiting returns the chat's tasks
// waiting for the user (the orchestrator's turn reads them once, for this
// and for the decision's prompt).
func (h *Handlers) routeReply(ctx context.Context, c chat, ev *collections.Document, waiting func() ([]*collections.Document, error)) (bool, error) {
	msg, err := h.getOpt(ctx, ev.Path)
	if err != nil || msg == nil {
		return false, err
	}
	if t, ok := h.routedTo(msg); ok {
		return h.deliverUserReply(ctx, c, t, msg, true)
	}
	var target *routeTarget
	if replyTo := str(msg, "replyTo"); replyTo != "" {
		target, err = h.questionTarget(ctx, c, replyTo)
	} else {
		var tasks []*collections.Document
		if tasks, err = waiting(); err == nil && len(tasks) == 1 {
			target = &routeTarget{taskID: tasks[0].ID, waitID: str(tasks[0], "waitId")}
		}
	}
	if err != nil || target == nil {
		return false, err
	}
	return h.routeTo(ctx, c, msg, *target)
}

// routeTo records target on msg, if the wait is open, and delivers it.
func (h *Handlers) routeTo(ctx context.Context, c chat, msg *collections.Document, t routeTarget) (bool, error) {
	task, err := h.getOpt(ctx, c.tasks()+"/"+t.taskID)
	if err != nil || task == nil {
		return false, err
	}
	ws := waitStateOf(task)
	if str(task, "status") != "waiting" || str(task, "waitId") != t.waitID || ws == nil || !ws.waitsForUser() {
		return false, nil
	}
	routed := map[string]any{"taskId": t.taskID, "waitId": t.waitID}
	mark := map[string]any{"routedTo": routed}
	mark[routeSealField] = h.seals.sign(msg.Path, mark, routeSeal)
	updated, err := h.docs.Update(ctx, msg.Path, mark, msg.Version)
	if errors.Is(err, collections.ErrPreconditionFailed) {
		// Another delivery decided first: act on its decision.
		cur, gerr := h.docs.Get(ctx, msg.Path)
		if gerr != nil {
			return false, gerr
		}
		if rt, ok := h.routedTo(cur); ok {
			return h.deliverUserReply(ctx, c, rt, cur, true)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return h.deliverUserReply(ctx, c, t, updated, false)
}

// routedTo reads the routing decision on a user message.
func (h *Handlers) routedTo(msg *collections.Document) (routeTarget, bool) {
	r, _ := msg.Data["routedTo"].(map[string]any)
	if r == nil || !h.seals.validField(msg, routeSealField, routeSeal) {
		return routeTarget{}, false
	}
	tid, _ := r["taskId"].(string)
	wid, _ := r["waitId"].(string)
	return routeTarget{taskID: tid, waitID: wid}, tid != "" && wid != ""
}

// questionTarget is the wait the question message id asks for (nil: not
// a question of the runtime's).
func (h *Handlers) questionTarget(ctx context.Context, c chat, id string) (*routeTarget, error) {
	if !collections.ValidSegment(id) {
		return nil, nil
	}
	q, err := h.getOpt(ctx, c.messages()+"/"+id)
	if err != nil || q == nil {
		return nil, err
	}
	tid, wid := str(q, "taskId"), str(q, "waitId")
	if str(q, "kind") != "question" || !h.seals.valid(q, chatMessageSeal) || tid == "" || !collections.ValidSegment(tid) {
		return nil, nil
	}
	if wid == "" {
		// A question from before waits had ids (legacywait.go).
		return h.legacyQuestionTarget(ctx, c, q)
	}
	// The question's id derives from its wait, so an unsealed waitId
	// cannot point it at another wait.
	if q.ID != waitQuestionID(wid) {
		return nil, nil
	}
	return &routeTarget{taskID: tid, waitID: wid}, nil
}

// maxWaitingRead bounds the waiting tasks of a chat read at once.
const maxWaitingRead = 50

// waitingForUser returns the chat's tasks (the runtime's) waiting for the
// user's reply.
func (h *Handlers) waitingForUser(ctx context.Context, c chat) ([]*collections.Document, error) {
	tasks, err := h.docs.Query(ctx, collections.Query{Collection: c.tasks(), Filters: []collections.Filter{eq("userId", c.uid), eq("status", "waiting")}, Limit: maxWaitingRead})
	if err != nil {
		return nil, err
	}
	var out []*collections.Document
	for _, t := range tasks {
		if h.isLegacyWait(t) {
			// A wait from before waits had ids: adopted now (legacywait.go).
			if t, err = h.adoptLegacyWait(ctx, c, t); err != nil {
				return nil, err
			}
			if t == nil {
				continue
			}
		}
		if ws := waitStateOf(t); ws != nil && ws.waitsForUser() && h.seals.valid(t, taskSeal) && str(t, "type") == "agent" {
			out = append(out, t)
		}
	}
	return out, nil
}

// deliverUserReply records msg as the user's reply in the wait t and,
// when that was the last reply awaited, resumes the run. It reports
// whether msg went to the wait (again: true on a redelivery that finds it
// recorded). recorded says msg carries the routing decision from an
// earlier delivery: a wait that moved on since took it then.
func (h *Handlers) deliverUserReply(ctx context.Context, c chat, t routeTarget, msg *collections.Document, recorded bool) (bool, error) {
	if !collections.ValidSegment(t.taskID) {
		return false, nil
	}
	now := time.Now().UnixMilli()
	task, _, err := h.resolveWait(ctx, c.tasks()+"/"+t.taskID, t.waitID, func(task *collections.Document, ws *waitState) bool {
		if ws.hasReply(func(r waitReply) bool { return r.MessageID == msg.ID }) || str(task, "status") != "waiting" || ws.Resolution != "" {
			return false
		}
		i := slices.IndexFunc(ws.WaitingFor, func(w waitFor) bool { return w.Kind == "user" && !w.Responded })
		if i < 0 {
			return false
		}
		ws.WaitingFor[i].Responded = true
		ws.Replies = append(ws.Replies, waitReply{From: "user", Name: "user", Text: truncate(str(msg, "content"), maxReplyText), MessageID: msg.ID, At: now})
		if ws.allResponded() {
			ws.Resolution = "replied"
		}
		return true
	})
	if err != nil || task == nil {
		return false, err
	}
	ws := waitStateOf(task)
	if str(task, "waitId") != t.waitID || ws == nil {
		return recorded, nil
	}
	if !ws.hasReply(func(r waitReply) bool { return r.MessageID == msg.ID }) {
		return recorded, nil
	}
	if ws.Resolution == "" {
		return true, nil
	}
	if ws.Tool == askUserTool.Name && ws.Resolution == "replied" && str(task, "answerMessageId") != msg.ID {
		if _, err := h.docs.Update(ctx, task.Path, map[string]any{"answerMessageId": msg.ID}, task.Version); ignoreConflict(err) != nil {
			return true, err
		}
	}
	return true, h.finishWait(ctx, c, task, msg)
}

// answerTaskTool lets the orchestrator route a user message that names no
// wait to the task it answers.
var answerTaskTool = llm.Tool{
	Name:        "answer_task",
	Description: "Give the user's message to a task that is waiting for the user's reply, as its answer.",
	Parameters: map[string]any{"type": "object", "required": []any{"taskId"}, "properties": map[string]any{
		"taskId": map[string]any{"type": "string"},
	}},
}

// waitingPrompt tells the orchestrator which tasks wait for the user (nil:
// none), and offers answer_task.
func (h *Handlers) waitingPrompt(ctx context.Context, c chat, t *turn) (*llm.Message, error) {
	waiting, err := h.turnWaiting(ctx, c, t)
	if err != nil || len(waiting) == 0 {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("These tasks are waiting for the user's reply. If the user's message answers one of them, call answer_task with its taskId; otherwise handle the message yourself.")
	for _, t := range waiting {
		fmt.Fprintf(&b, "\n- taskId %s (%s): %s", t.ID, str(t, "name"), truncate(str(t, "question"), seenText))
	}
	return &llm.Message{Role: "system", Content: b.String()}, nil
}

// answerTask carries out the orchestrator's answer_task: msg goes to the
// open wait of the task it names.
func (h *Handlers) answerTask(ctx context.Context, c chat, msg *collections.Document, argsText string) error {
	var a struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal([]byte(argsText), &a) != nil || !collections.ValidSegment(a.TaskID) {
		return nil
	}
	cur, err := h.getOpt(ctx, msg.Path)
	if err != nil || cur == nil {
		return err
	}
	if t, ok := h.routedTo(cur); ok {
		_, err := h.deliverUserReply(ctx, c, t, cur, true)
		return err
	}
	task, err := h.getOpt(ctx, c.tasks()+"/"+a.TaskID)
	if err != nil || task == nil {
		return err
	}
	_, err = h.routeTo(ctx, c, cur, routeTarget{taskID: task.ID, waitID: str(task, "waitId")})
	return err
}

// ---- replies of child tasks ----

// childDone records the end of a task send_message started (its result,
// or its error) as the reply in its parent's wait, and resumes the parent
// when it was the last reply awaited. handled is false when there is no
// open wait to take it (the parent did not wait, or stopped waiting):
// the task's answer then goes to the chat like any task's.
func (h *Handlers) childDone(ctx context.Context, c chat, task *collections.Document) (handled bool, err error) {
	parent, wid := str(task, "parentTaskId"), str(task, "parentWaitId")
	if parent == "" || wid == "" || !h.seals.validField(task, linkSealField, linkSeal) || !collections.ValidSegment(parent) {
		return false, nil
	}
	text := str(task, "result")
	if st := str(task, "status"); st == "failed" {
		text = "error: " + str(task, "error")
	} else if st == statusCanceled {
		text = "error: the task was canceled"
	} else if st != "success" {
		return false, nil
	}
	now := time.Now().UnixMilli()
	mine := func(r waitReply) bool { return r.From == "agent" && r.TaskID == task.ID }
	ptask, _, err := h.resolveWait(ctx, c.tasks()+"/"+parent, wid, func(p *collections.Document, ws *waitState) bool {
		if ws.hasReply(mine) || str(p, "status") != "waiting" || ws.Resolution != "" {
			return false
		}
		i := slices.IndexFunc(ws.WaitingFor, func(w waitFor) bool { return w.Kind == "agent" && w.TaskID == task.ID && !w.Responded })
		if i < 0 {
			return false
		}
		ws.WaitingFor[i].Responded = true
		ws.Replies = append(ws.Replies, waitReply{From: "agent", Name: ws.WaitingFor[i].Name, Text: truncate(text, maxReplyText), TaskID: task.ID, At: now})
		if ws.allResponded() {
			ws.Resolution = "replied"
		}
		return true
	})
	if err != nil || ptask == nil {
		return false, err
	}
	ws := waitStateOf(ptask)
	if str(ptask, "waitId") != wid || ws == nil || !ws.hasReply(mine) {
		return false, nil
	}
	if ws.Resolution == "" {
		return true, nil
	}
	return true, h.finishWait(ctx, c, ptask, nil)
}

// ---- [SEEN]/[NEW] ----

// seenBlock is, for the first step after a wait ended, the chat's recent
// messages each marked [SEEN] (at or before the sub-agent's
// lastProcessedMessageId) or [NEW]; nil otherwise. newest is the id of
// the newest message shown.
func (h *Handlers) seenBlock(ctx context.Context, c chat, agent, task *collections.Document) (msg *llm.Message, newest string, err error) {
	ws := waitStateOf(task)
	id := str(task, "waitId")
	if ws == nil || ws.Resolution == "" || id == "" || str(agent, "seenWaitId") == id {
		return nil, "", nil
	}
	docs, err := h.docs.Query(ctx, collections.Query{
		Collection: c.messages(),
		OrderBy:    []collections.Order{{Field: collections.FieldCreatedAt, Direction: "desc"}},
		Limit:      seenMessages,
	})
	if err != nil || len(docs) == 0 {
		return nil, "", err
	}
	last := str(agent, "lastProcessedMessageId")
	seenFrom := len(docs) // docs[seenFrom:] are seen (desc order)
	for i, d := range docs {
		if d.ID == last {
			seenFrom = i
			break
		}
	}
	var b strings.Builder
	b.WriteString("The chat's recent messages while you waited ([SEEN]: seen before, [NEW]: new to you):")
	for i := len(docs) - 1; i >= 0; i-- {
		d := docs[i]
		role := str(d, "role")
		if role != "user" && !(role == "assistant" && h.seals.valid(d, chatMessageSeal)) {
			continue
		}
		mark := "[NEW]"
		if i >= seenFrom {
			mark = "[SEEN]"
		}
		fmt.Fprintf(&b, "\n%s %s: %s", mark, role, truncate(str(d, "content"), seenText))
	}
	return &llm.Message{Role: "system", Content: b.String()}, docs[0].ID, nil
}

// markSeen records, after a step that showed the block, the newest chat
// message it showed and the wait it was shown for.
func (h *Handlers) markSeen(ctx context.Context, agent, task *collections.Document, newest string) error {
	if newest == "" {
		return nil
	}
	_, err := h.docs.Update(ctx, agent.Path, map[string]any{"lastProcessedMessageId": newest, "seenWaitId": str(task, "waitId")}, 0)
	return err
}

// validField reports whether d carries, in field, the runtime's seal over
// fields (valid for a seal kept apart from the document's own seal: a
// child task's link, a message's routing decision).
func (s sealer) validField(d *collections.Document, field string, fields []string) bool {
	if d == nil {
		return false
	}
	got, _ := d.Data[field].(string)
	want := s.sign(d.Path, d.Data, fields)
	return got != "" && want != "" && hmac.Equal([]byte(got), []byte(want))
}
