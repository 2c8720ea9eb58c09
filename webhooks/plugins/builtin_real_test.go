package plugins

import (
	"context"
	"strings"
	"testing"
)

// The shipped rules with the real CEL and Lua conditions: each fires when
// it should and only then.
func TestBuiltinRulesFire(t *testing.T) {
	set, err := Load(LoadOptions{Builtin: Builtin(), Capabilities: []string{"http_get"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(set, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	on := Scope{Switches: Switches{"plugin:token-budget": true, "plugin:research-assistant": true}}
	fetches := func(n int) []ToolCall {
		var calls []ToolCall
		for i := 0; i < n; i++ {
			calls = append(calls, ToolCall{Name: "http_get", Success: true})
		}
		return append(calls, ToolCall{Name: "http_get", Success: false})
	}
	cases := []struct {
		name  string
		hook  Hook
		c     *Context
		scope Scope
		want  string // key=message of what fired, joined by " | "
	}{
		{"third failure", OnToolFailure, &Context{Result: ToolResult{Name: "http_get"}, History: History{Failures: map[string]int64{"http_get": 3}}}, Scope{},
			"tool-failure-loop=The tool http_get has failed 3 times. Stop calling it; answer with what you have or ask the user."},
		{"second failure", OnToolFailure, &Context{Result: ToolResult{Name: "http_get"}, History: History{Failures: map[string]int64{"http_get": 2}}}, Scope{}, ""},
		{"another tool failed", OnToolFailure, &Context{Result: ToolResult{Name: "shell"}, History: History{Failures: map[string]int64{"http_get": 5}}}, Scope{}, ""},
		{"core rule ignores the user", OnToolFailure, &Context{Result: ToolResult{Name: "x"}, History: History{Failures: map[string]int64{"x": 4}}}, Scope{Disabled: map[string]bool{"tool-failure-loop": true}},
			"tool-failure-loop=The tool x has failed 4 times. Stop calling it; answer with what you have or ask the user."},
		{"admin switches it off", OnToolFailure, &Context{Result: ToolResult{Name: "x"}, History: History{Failures: map[string]int64{"x": 4}}}, Scope{Switches: Switches{"tool-failure-loop": false}}, ""},
		{"budget off by default", OnTurnStart, &Context{Turn: Turn{TokenUsage: 0.9}}, Scope{}, ""},
		{"budget at 90%", OnTurnStart, &Context{Turn: Turn{TokenUsage: 0.9}}, on,
			"token-budget/token-budget-warning=Token budget at 90%. Consider wrapping up or summarizing."},
		{"budget at 80%", OnTurnStart, &Context{Turn: Turn{TokenUsage: 0.8}}, on, ""},
		{"ten sources", OnToolComplete, &Context{Result: ToolResult{Name: "http_get", Success: true}, History: History{Tools: fetches(10)}}, on,
			"research-assistant/enough-sources=You have fetched 10 sources, the most this user wants. Stop gathering and synthesize an answer from what you have now."},
		{"nine sources", OnToolComplete, &Context{Result: ToolResult{Name: "http_get", Success: true}, History: History{Tools: fetches(9)}}, on, ""},
		{"user wants three", OnToolComplete, &Context{Result: ToolResult{Name: "http_get", Success: true}, History: History{Tools: fetches(3)}},
			Scope{Switches: on.Switches, Settings: map[string]map[string]any{"research-assistant": {"max_sources": int64(3)}}},
			"research-assistant/enough-sources=You have fetched 3 sources, the most this user wants. Stop gathering and synthesize an answer from what you have now."},
		{"large result", OnToolComplete, &Context{Result: ToolResult{Name: "http_get", Success: true, Result: strings.Repeat("x", 4001)}}, on,
			"research-assistant/summarize-large-result=The result of http_get is 4001 characters long. Summarize what matters in it for the task before going on."},
		{"large result, summaries off", OnToolComplete, &Context{Result: ToolResult{Name: "http_get", Success: true, Result: strings.Repeat("x", 4001)}},
			Scope{Switches: on.Switches, Settings: map[string]map[string]any{"research-assistant": {"auto_summarize": false}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fired, evals := e.Evaluate(context.Background(), tc.hook, tc.c, tc.scope)
			for _, ev := range evals {
				if ev.Err != "" {
					t.Fatalf("%s: %s", ev.Rule, ev.Err)
				}
			}
			var got []string
			for _, f := range fired {
				got = append(got, f.Rule.Key()+"="+f.Action.Message)
			}
			if strings.Join(got, " | ") != tc.want {
				t.Fatalf("fired %q\nwant %q", strings.Join(got, " | "), tc.want)
			}
		})
	}
	if p := set.Rule("research-assistant/summarize-large-result"); p.Action.DeliverAt != "immediately" {
		t.Fatalf("deliver_at %s", p.Action.DeliverAt)
	}
}
