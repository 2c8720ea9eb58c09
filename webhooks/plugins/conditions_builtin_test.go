package plugins

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestShippedConditions runs the shipped rules' conditions, compiled by
// the real CEL and Lua compilers, on contexts as the runtime fills them
// (settings from the manifest as int64, or from a user's document as
// json.Number).
func TestShippedConditions(t *testing.T) {
	set, err := Load(LoadOptions{Builtin: Builtin(), Capabilities: []string{"http_get"}})
	if err != nil {
		t.Fatal(err)
	}
	fetches := func(n int) []ToolCall {
		calls := make([]ToolCall, n)
		for i := range calls {
			calls[i] = ToolCall{Name: "http_get", Success: true}
		}
		return append(calls, ToolCall{Name: "http_get", Success: false})
	}
	for _, tc := range []struct {
		rule string
		c    *Context
		want bool
	}{
		{"tool-failure-loop", &Context{Result: ToolResult{Name: "search"}, History: History{Failures: map[string]int64{"search": 3}}}, true},
		{"tool-failure-loop", &Context{Result: ToolResult{Name: "search"}, History: History{Failures: map[string]int64{"search": 2}}}, false},
		{"tool-failure-loop", &Context{Result: ToolResult{Name: "search"}}, false},
		{"token-budget/token-budget-warning", &Context{Turn: Turn{TokenUsage: 0.92}}, true},
		{"token-budget/token-budget-warning", &Context{Turn: Turn{TokenUsage: 0.5}}, false},
		{"research-assistant/enough-sources", &Context{Result: ToolResult{Name: "http_get"},
			History: History{Tools: fetches(10)}, Settings: map[string]any{"max_sources": int64(10)}}, true},
		{"research-assistant/enough-sources", &Context{Result: ToolResult{Name: "http_get"},
			History: History{Tools: fetches(10)}, Settings: map[string]any{"max_sources": json.Number("11")}}, false},
		{"research-assistant/enough-sources", &Context{Result: ToolResult{Name: "search"},
			History: History{Tools: fetches(10)}, Settings: map[string]any{"max_sources": int64(1)}}, false},
		{"research-assistant/summarize-large-result", &Context{Result: ToolResult{Result: strings.Repeat("x", 5000)},
			Settings: map[string]any{"auto_summarize": true}}, true},
		{"research-assistant/summarize-large-result", &Context{Result: ToolResult{Result: strings.Repeat("x", 5000)},
			Settings: map[string]any{"auto_summarize": false}}, false},
	} {
		r := set.Rule(tc.rule)
		if r == nil {
			t.Fatalf("no rule %s", tc.rule)
		}
		got, err := r.cond.Match(context.Background(), tc.c)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.rule, got, err, tc.want)
		}
	}
}
