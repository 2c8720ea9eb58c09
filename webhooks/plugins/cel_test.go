package plugins

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sampleContext is a context as the runtime fills it, with document values
// (json.Number) in the maps.
func sampleContext() *Context {
	return &Context{
		Turn: Turn{Number: 3, TokenUsage: 0.85, ContextUsage: 0.4, IterationCount: 2},
		History: History{
			Messages: []Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hi there"}},
			Tools: []ToolCall{{Name: "search", Arguments: map[string]any{"q": "x", "limit": json.Number("5")},
				Result: "ok", Success: true, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}},
			Failures: map[string]int64{"search": 2},
		},
		User:     User{ID: "u1", Settings: map[string]any{"disabledRules": []any{}}},
		Project:  Project{ID: "c1"},
		State:    map[string]any{"count": json.Number("4"), "warned": true, "ratio": json.Number("0.5")},
		Settings: map[string]any{"threshold": 0.8, "limit": int64(3)},
		Event:    map[string]any{"hook": "on_turn_start"},
		Result:   ToolResult{Name: "search", Success: false, Error: "timeout", DurationMs: 1500},
	}
}

func matchCEL(t *testing.T, expr string, c *Context) (bool, error) {
	t.Helper()
	cond, err := compileCEL(expr)
	if err != nil {
		t.Fatalf("compile %q: %v", expr, err)
	}
	return cond.Match(context.Background(), c)
}

func TestCELMatches(t *testing.T) {
	c := sampleContext()
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"context.turn.token_usage > 0.8", true},
		{"context.turn.token_usage > 1", false}, // double vs int
		{"context.turn.number >= 3.0", true},    // int vs double
		{"context.turn.number == 3 && context.turn.iteration_count < 5", true},
		{"context.turn.context_usage >= 0.5", false},
		{"context.history.failures['search'] >= 2", true},
		{"context.history.messages.size() == 2 && context.history.messages[1].role == 'assistant'", true},
		{"context.history.messages.exists(m, m.content.contains('there'))", true},
		{"context.history.tools[0].arguments.limit == 5", true},
		{"context.history.tools[0].timestamp < timestamp('2026-06-01T00:00:00Z')", true},
		{"context.state.get('count', 0) > 3", true},
		{"context.state.get('ratio', 0) < 1", true},
		{"context.state.get('missing', 10) == 10", true},
		{"context.state.get('missing') == null", true},
		{"context.state.get('warned', false)", true}, // dyn, checked at run time
		{"!context.state.get('warned', false)", false},
		{"context.settings.threshold <= context.turn.token_usage", true},
		{"context.settings.get('limit', 0) == 3", true},
		{"context.history.failures.get('search', 0) == 2 && context.history.failures.get('x', 0) == 0", true},
		{"context.event.hook == 'on_turn_start'", true},
		{"context.result.name == 'search' && !context.result.success && context.result.duration_ms > 1000", true},
		{"context.user.id.startsWith('u') && context.project.id == 'c1'", true},
		{"'HELLO'.lowerAscii() == context.history.messages[0].content", true}, // ext.Strings
		{"context.project.settings.size() == 0", true},                        // nil map is empty
	} {
		got, err := matchCEL(t, tc.expr, c)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// TestCELZeroContext: a context the runtime leaves mostly empty (nil maps
// and slices, zero time) evaluates without errors.
func TestCELZeroContext(t *testing.T) {
	got, err := matchCEL(t, "context.state.get('n', 0) == 0 && context.history.tools.size() == 0 && context.result.arguments.size() == 0", &Context{})
	if err != nil || !got {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestCELCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"context.turn.tokens > 1", "undefined field 'tokens'"},
		{"context.turn.number == 'x'", "no matching overload"},
		{"context.turn.number + 1", "want bool"},
		{"context.history.messages[0].role", "want bool"},
		{"contxt.turn.number > 1", "undeclared reference"},
		{"context.state.get(1, 2) == 2", "no matching overload"},
		{"context.turn.number >", "Syntax error"},
		{"true || " + strings.Repeat("true || ", 600) + "true", "over the limit"},
	} {
		_, err := compileCEL(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compile %.40q: err %v, want one containing %q", tc.expr, err, tc.want)
		}
	}
}

func TestCELRuntimeErrors(t *testing.T) {
	c := sampleContext()
	for _, tc := range []struct{ expr, want string }{
		// dyn that turns out not to be a bool
		{"context.state.get('count', false)", "want bool"},
		// a missing key selected directly
		{"context.state.nothing == 1", "no such key"},
	} {
		_, err := matchCEL(t, tc.expr, c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.expr, err, tc.want)
		}
	}
}

// TestCELCostLimit: a condition whose work explodes (nested
// comprehensions over a range) stops at the cost limit, quickly.
func TestCELCostLimit(t *testing.T) {
	expr := "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, " +
		"[1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))"
	start := time.Now()
	_, err := matchCEL(t, expr, sampleContext())
	if err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("err %v, want the cost limit", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
	// The same shape, small, is fine.
	if ok, err := matchCEL(t, "[1,2].all(a, [1,2].all(b, a+b > 0))", sampleContext()); err != nil || !ok {
		t.Fatalf("small: %v, %v", ok, err)
	}
}

// TestCELInterrupt: a cancelled context stops a long evaluation.
func TestCELInterrupt(t *testing.T) {
	cond, err := compileCEL("[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, a+b+c > 0)))")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cond.Match(ctx, sampleContext()); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Fatalf("err %v, want an interruption", err)
	}
	if ok, err := cond.Match(context.Background(), sampleContext()); err != nil || !ok {
		t.Fatalf("uncancelled: %v, %v", ok, err)
	}
}

func BenchmarkCEL(b *testing.B) {
	cond, err := compileCEL("context.turn.token_usage > context.settings.get('threshold', 0.8) && context.state.get('warned', false) == false")
	if err != nil {
		b.Fatal(err)
	}
	benchMatch(b, cond)
}

// TestCELReplaceBounded: replace's result grows with the product of its
// arguments' sizes, both of which may be a user's; the cost limit, counted
// once the result is built, let content.replace('a', content) on a 20 KB
// message allocate 400 MB first. The result's size is checked before.
func TestCELReplaceBounded(t *testing.T) {
	c := sampleContext()
	c.History.Messages[0].Content = strings.Repeat("a", 20000)
	for _, src := range []string{
		"context.history.messages[0].content.replace('a', context.history.messages[0].content).size() > 0",
		"context.history.messages[0].content.replace('', context.history.messages[0].content, 1000).size() > 0",
		"context.history.messages.all(m, m.content.replace('a', m.content + m.content).size() > 0)",
	} {
		cond, err := compileCEL(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = cond.Match(context.Background(), c)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: no error", src)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
			t.Errorf("%s: allocated %d bytes", src, n)
		}
	}
	for src, want := range map[string]bool{
		"'a-b-c'.replace('-', '+') == 'a+b+c'":                                    true,
		"'a-b-c'.replace('-', '', 1) == 'ab-c'":                                   true,
		"'abc'.replace('', '.') == '.a.b.c.'":                                     true,
		"'a-b'.replace('-', '--', -1) == 'a--b'":                                  true,
		"context.history.messages[1].content.replace('there', 'you') == 'hi you'": true,
	} {
		cond, err := compileCEL(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := cond.Match(context.Background(), sampleContext()); err != nil || got != want {
			t.Errorf("%s = %v, %v", src, got, err)
		}
	}
}
