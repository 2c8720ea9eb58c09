package webhooks

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
)

// The hook points, as the handlers call them. Each builds the part of the
// context its caller knows (turn, event, result) and leaves the rest to
// runHook, which reads it only when a rule at the hook needs it. Sites: a
// user message's path (on_query_start), the path of the step about to be
// or just written (on_turn_start, on_turn_end), the tool call's path
// (on_tool_*), the task's path (on_session_end).

// queryStartHook runs on_query_start for a user message the orchestrator
// is about to decide on; history is the chat's (chatHistory).
// It returns the usage record it read, if any, for the decision's model
// call.
func (h *Handlers) queryStartHook(ctx context.Context, c chat, msg *collections.Document, history []llm.Message) ([]notice, *usageRead, error) {
	var seen *usageRead
	notes, err := h.runHook(ctx, hookCall{hook: plugins.OnQueryStart, c: c, site: msg.Path, target: orchestratorTarget,
		fill: func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error {
			// turn.number is the user's message number, counted in the
			// history the orchestrator reads ([agents] history messages):
			// exact in a short chat, a lower bound in a long one, and no
			// extra query either way.
			var users int64
			for _, m := range history {
				if m.Role == "user" {
					users++
				}
			}
			usage, read, err := h.tokenUsage(ctx, c.uid)
			if err != nil {
				return err
			}
			seen = read
			pc.Turn = plugins.Turn{Number: users, TokenUsage: usage}
			pc.Event = map[string]any{"content": truncate(str(msg, "content"), maxContextText), "message_id": msg.ID}
			if needs.History {
				for _, m := range lastN(history, maxHistoryMessages) {
					pc.History.Messages = append(pc.History.Messages, plugins.Message{Role: m.Role, Content: truncate(m.Content, maxContextText)})
				}
			}
			return nil
		}})
	return notes, seen, err
}

// turnStartHook runs on_turn_start before a sub-agent's step (whose prompt
// is built after, with the notices it returns), and returns the usage
// record it read, if any, for the step's model call.
func (h *Handlers) turnStartHook(ctx context.Context, c chat, sa string, agent *collections.Document, msgs []*collections.Document) ([]notice, *usageRead, error) {
	seq := num(msgs[len(msgs)-1], "seq") + 1
	var seen *usageRead
	notes, err := h.runHook(ctx, hookCall{hook: plugins.OnTurnStart, c: c, site: c.subMessages(sa) + "/" + msgID(seq), target: sa,
		fill: func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error {
			steps, _ := stepsTaken(agent, msgs)
			read, err := h.fillTurn(ctx, c, pc, agent, steps+1, steps)
			if err != nil {
				return err
			}
			seen = read
			pc.Event = map[string]any{"sub_agent_id": sa, "task_id": str(agent, "taskId"), "role": str(agent, "role")}
			if needs.History {
				pc.History = subHistory(msgs)
			}
			return nil
		}})
	return notes, seen, err
}

// turnEndHook runs on_turn_end after a sub-agent's step was written
// (agent is the sub-agent as the step left it; msgs end with the step).
func (h *Handlers) turnEndHook(ctx context.Context, c chat, sa string, agent, step *collections.Document, msgs []*collections.Document) error {
	_, err := h.runHook(ctx, hookCall{hook: plugins.OnTurnEnd, c: c, site: step.Path, target: sa,
		fill: func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error {
			steps, _ := stepsTaken(agent, msgs)
			if _, err := h.fillTurn(ctx, c, pc, agent, steps, steps); err != nil {
				return err
			}
			var names []any
			for _, tc := range toolCallsOf(step) {
				names = append(names, tc.Name)
			}
			pc.Event = map[string]any{"sub_agent_id": sa, "task_id": str(agent, "taskId"),
				"finish_reason": str(step, "finishReason"), "content": truncate(str(step, "content"), maxContextText),
				"tool_names": orEmptyList(names)}
			if needs.History {
				pc.History = subHistory(msgs)
			}
			return nil
		}})
	return err
}

// toolHook runs on_tool_call (before the tool runs: tc pending), or
// on_tool_complete / on_tool_failure (tc records the outcome; content is
// the result as the model sees it). agent is the sub-agent document the
// caller read (nil: the hook reads it, when a rule can run).
func (h *Handlers) toolHook(ctx context.Context, hook plugins.Hook, c chat, sa string, agent, tc *collections.Document, content string) error {
	_, err := h.runHook(ctx, hookCall{hook: hook, c: c, site: tc.Path, target: sa,
		fill: func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error {
			var err error
			if agent == nil {
				if agent, err = h.getOpt(ctx, c.subAgent(sa)); err != nil {
					return err
				}
			}
			var msgs []*collections.Document
			if needs.History {
				if msgs, err = h.subMessages(ctx, c, sa); err != nil {
					return err
				}
				pc.History = subHistory(withOutcome(msgs, hook, tc, content))
			}
			if agent != nil {
				steps, _ := stepsTaken(agent, msgs)
				if _, err := h.fillTurn(ctx, c, pc, agent, steps, steps); err != nil {
					return err
				}
			}
			args := argsOf(str(tc, "argsJson"))
			pc.Event = map[string]any{"sub_agent_id": sa, "tool_name": str(tc, "toolName"), "call_id": str(tc, "callId"),
				"arguments": args}
			if hook != plugins.OnToolCall {
				pc.Result = plugins.ToolResult{Name: str(tc, "toolName"), Arguments: args,
					Result: truncate(str(tc, "result"), maxResultChars), Success: str(tc, "status") == "success",
					Error: truncate(str(tc, "error"), maxContextText), DurationMs: num(tc, "durationMs")}
				if !pc.Result.Success {
					pc.Result.Result = truncate(content, maxResultChars)
				}
			}
			return nil
		}})
	return err
}

// withOutcome returns msgs with the outcome of tc as its tool message, on
// on_tool_complete and on_tool_failure: the hooks run before that message
// is written, yet the call has happened, and a rule counting failures
// ("the third failure of this tool") must count this one. A redelivery
// that finds the message written already adds nothing.
func withOutcome(msgs []*collections.Document, hook plugins.Hook, tc *collections.Document, content string) []*collections.Document {
	if hook == plugins.OnToolCall {
		return msgs
	}
	id := str(tc, "callId")
	for _, m := range msgs {
		if str(m, "role") == "tool" && str(m, "toolCallId") == id {
			return msgs
		}
	}
	out := make([]*collections.Document, len(msgs), len(msgs)+1)
	copy(out, msgs)
	return append(out, &collections.Document{Path: tc.Path, CreatedAt: time.Now().UnixMilli(), Data: map[string]any{
		"role": "tool", "toolCallId": id, "name": str(tc, "toolName"), "content": content,
	}})
}

// sessionEndHook runs on_session_end as a sub-agent's task ends; its
// notifications go to the chat's next orchestrator decision. msgs are the
// sub-agent's messages as its handler read them (subMessages).
func (h *Handlers) sessionEndHook(ctx context.Context, c chat, sa string, agent, task *collections.Document, msgs []*collections.Document, result, failure string) error {
	_, err := h.runHook(ctx, hookCall{hook: plugins.OnSessionEnd, c: c, site: task.Path, target: orchestratorTarget,
		fill: func(ctx context.Context, pc *plugins.Context, needs plugins.Needs) error {
			if needs.History {
				pc.History = subHistory(msgs)
			}
			steps, _ := stepsTaken(agent, msgs)
			if _, err := h.fillTurn(ctx, c, pc, agent, steps, steps); err != nil {
				return err
			}
			status := "success"
			if failure == canceledFailure {
				status = statusCanceled
			} else if failure != "" {
				status = "failed"
			}
			pc.Event = map[string]any{"sub_agent_id": sa, "task_id": task.ID, "status": status,
				"result": truncate(result, maxContextText), "error": failure}
			return nil
		}})
	return err
}

// fillTurn sets the context's turn for a sub-agent and returns the usage
// record it read (see tokenUsage).
func (h *Handlers) fillTurn(ctx context.Context, c chat, pc *plugins.Context, agent *collections.Document, number, steps int64) (*usageRead, error) {
	usage, read, err := h.tokenUsage(ctx, c.uid)
	if err != nil {
		return nil, err
	}
	pc.Turn = plugins.Turn{Number: number, TokenUsage: usage, IterationCount: steps,
		ContextUsage: float64(num(agent, "contextTokens")) / float64(h.budgetOf(agent))}
	return read, nil
}

// subHistory is a sub-agent's history for the rules: its last messages,
// the tool calls among them with their results (a result starting
// "error: " is a failure) and the failures per tool.
func subHistory(msgs []*collections.Document) plugins.History {
	hist := plugins.History{Failures: map[string]int64{}}
	results := map[string]*collections.Document{}
	for _, m := range msgs {
		if str(m, "role") == "tool" {
			results[str(m, "toolCallId")] = m
		}
	}
	for _, m := range msgs {
		for _, tc := range toolCallsOf(m) {
			r := results[tc.ID]
			if r == nil || tc.Name == askUserTool.Name {
				continue
			}
			content := str(r, "content")
			ok := !strings.HasPrefix(content, "error: ")
			if !ok {
				hist.Failures[tc.Name]++
			}
			hist.Tools = append(hist.Tools, plugins.ToolCall{Name: tc.Name, Arguments: argsOf(tc.Arguments),
				Result: truncate(content, maxContextText), Success: ok, Timestamp: time.UnixMilli(r.CreatedAt)})
		}
	}
	hist.Tools = lastN(hist.Tools, maxHistoryMessages)
	for _, m := range lastN(msgs, maxHistoryMessages) {
		hist.Messages = append(hist.Messages, plugins.Message{Role: str(m, "role"), Content: truncate(str(m, "content"), maxContextText)})
	}
	return hist
}

// argsOf decodes a tool call's JSON arguments (empty when they are not an
// object). The model writes them, from the user's text, and a tool like
// write_file carries a whole file in one: each string is cut to
// maxArgText and the whole to about maxContextText, so the 50 calls
// history.tools holds stay bounded like its messages.
func argsOf(s string) map[string]any {
	var args map[string]any
	if json.Unmarshal([]byte(s), &args) != nil || args == nil {
		return map[string]any{}
	}
	budget := maxContextText
	return boundValue(plainMap(args), &budget).(map[string]any)
}

// maxArgText bounds each string of a tool call's arguments in the context:
// small enough that a long one leaves room for the others (a path next to
// a file's content).
const maxArgText = 1 << 10

// boundValue cuts the strings of v and drops the map entries and list
// elements past budget (bytes of keys and strings, 8 for any other value),
// which it spends.
func boundValue(v any, budget *int) any {
	switch t := v.(type) {
	case string:
		t = truncate(t, max(min(*budget, maxArgText), 0))
		*budget -= len(t)
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if *budget -= len(k) + 8; *budget < 0 {
				break
			}
			out[k] = boundValue(t[k], budget)
		}
		return out
	case []any:
		out := make([]any, 0, len(t))
		for _, e := range t {
			if *budget -= 8; *budget < 0 {
				break
			}
			out = append(out, boundValue(e, budget))
		}
		return out
	}
	return v
}

func lastN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func orEmptyList(s []any) []any {
	if s == nil {
		return []any{}
	}
	return s
}
