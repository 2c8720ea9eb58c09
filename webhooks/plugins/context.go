package plugins

import "time"

// Context is what a rule's condition, script and templates see as
// `context` (seed 001's RuleContext). Field names are the seed's
// snake_case ones in every language: CEL (context.turn.token_usage), Lua
// (context.turn.token_usage) and Jinja ({{ context.turn.token_usage }}).
// The runtime fills it once per hook; the engine sets State and Settings
// per plugin. Conditions and scripts cannot change it.
type Context struct {
	Turn    Turn    `cel:"turn"`
	History History `cel:"history"`
	User    User    `cel:"user"`
	Project Project `cel:"project"`
	// State is the plugin's state for this user and chat (set_state writes
	// it); an empty map when there is none. Read it with
	// context.state.get('key', default) in CEL, context.state.key in Lua
	// and Jinja.
	State map[string]any `cel:"state"`
	// Settings are the plugin's settings: the manifest's defaults with the
	// user's overrides (empty for a standalone rule).
	Settings map[string]any `cel:"settings"`
	// Event describes what happened: always "hook"; per hook the fields
	// documented in docs/agent-rules.md (e.g. "content" of the user's
	// message on on_query_start).
	Event map[string]any `cel:"event"`
	// Result is the tool's outcome on on_tool_complete and on_tool_failure
	// (the zero value elsewhere, with Name "").
	Result ToolResult `cel:"result"`

	// While the engine evaluates a hook (the context does not change then
	// but for State and Settings, per plugin) Map builds the map once:
	// memoBase is it, memo the current plugin's (memoBase with its state
	// and settings). Every Lua script and template of the hook reads them
	// instead of building its own.
	memoBase, memo map[string]any
	memoOn         bool
}

// Turn is the current step (seed TurnState).
type Turn struct {
	// Number is the step, 1-indexed: the sub-agent's LLM step, or the
	// user's message number in the chat on on_query_start.
	Number int64 `cel:"number"`
	// TokenUsage is how much of the user's daily LLM token budget is spent,
	// 0.0–1.0 (0 when unlimited).
	TokenUsage float64 `cel:"token_usage"`
	// ContextUsage is the sub-agent's last prompt size over its context
	// budget (its tokenBudget: the role's or [agents] token_budget), 0.0–1.0
	// and more.
	ContextUsage float64 `cel:"context_usage"`
	// IterationCount is how many steps the sub-agent has taken.
	IterationCount int64 `cel:"iteration_count"`
}

// History is what happened before (seed HistoryState).
type History struct {
	Messages []Message  `cel:"messages"` // recent messages, oldest first
	Tools    []ToolCall `cel:"tools"`    // recent tool calls, oldest first
	// Failures counts failed calls per tool name.
	Failures map[string]int64 `cel:"failures"`
}

// Message is one message of the history.
type Message struct {
	Role    string `cel:"role"`
	Content string `cel:"content"`
}

// ToolCall is one recent tool call.
type ToolCall struct {
	Name      string         `cel:"name"`
	Arguments map[string]any `cel:"arguments"`
	Result    string         `cel:"result"`
	Success   bool           `cel:"success"`
	Timestamp time.Time      `cel:"timestamp"`
}

// User is the user the run belongs to.
type User struct {
	ID string `cel:"id"`
	// Settings is the user's agent settings document (disabled rules and
	// plugin overrides).
	Settings map[string]any `cel:"settings"`
}

// Project is the chat the run belongs to.
type Project struct {
	ID       string         `cel:"id"`
	Settings map[string]any `cel:"settings"`
}

// ToolResult is a tool's outcome.
type ToolResult struct {
	Name       string         `cel:"name"`
	Arguments  map[string]any `cel:"arguments"`
	Result     string         `cel:"result"`
	Success    bool           `cel:"success"`
	Error      string         `cel:"error"`
	DurationMs int64          `cel:"duration_ms"`
}

// Map returns the context as nested maps with the snake_case names (what
// templates and Lua scripts see). Slices are []any, maps map[string]any,
// times RFC 3339 strings. The maps it shares with c (settings, state,
// arguments) must be treated as read-only.
func (c *Context) Map() map[string]any {
	if !c.memoOn {
		return c.buildMap()
	}
	if c.memo == nil {
		if c.memoBase == nil {
			c.memoBase = c.buildMap()
		}
		c.memo = make(map[string]any, len(c.memoBase))
		for k, v := range c.memoBase {
			c.memo[k] = v
		}
		c.memo["state"], c.memo["settings"] = orEmpty(c.State), orEmpty(c.Settings)
	}
	return c.memo
}

func (c *Context) buildMap() map[string]any {
	msgs := make([]any, len(c.History.Messages))
	for i, m := range c.History.Messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	tools := make([]any, len(c.History.Tools))
	for i, t := range c.History.Tools {
		tools[i] = map[string]any{"name": t.Name, "arguments": orEmpty(t.Arguments), "result": t.Result,
			"success": t.Success, "timestamp": t.Timestamp.UTC().Format(time.RFC3339Nano)}
	}
	failures := make(map[string]any, len(c.History.Failures))
	for k, v := range c.History.Failures {
		failures[k] = v
	}
	return map[string]any{
		"turn": map[string]any{
			"number": c.Turn.Number, "token_usage": c.Turn.TokenUsage,
			"context_usage": c.Turn.ContextUsage, "iteration_count": c.Turn.IterationCount,
		},
		"history":  map[string]any{"messages": msgs, "tools": tools, "failures": failures},
		"user":     map[string]any{"id": c.User.ID, "settings": orEmpty(c.User.Settings)},
		"project":  map[string]any{"id": c.Project.ID, "settings": orEmpty(c.Project.Settings)},
		"state":    orEmpty(c.State),
		"settings": orEmpty(c.Settings),
		"event":    orEmpty(c.Event),
		"result": map[string]any{
			"name": c.Result.Name, "arguments": orEmpty(c.Result.Arguments), "result": c.Result.Result,
			"success": c.Result.Success, "error": c.Result.Error, "duration_ms": c.Result.DurationMs,
		},
	}
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
