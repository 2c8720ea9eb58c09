package plugins

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchCEL are realistic conditions at on_tool_complete; the first ones
// hold for benchContext (see benchFiring).
var benchCEL = []string{
	// hold
	`context.result.name == 'http_get' && size(context.result.result) > 1000`,
	`context.history.tools.filter(t, t.name == 'http_get' && t.success).size() >= 10`,
	`context.turn.iteration_count >= 20`,
	// do not hold
	`context.turn.token_usage > 0.8`,
	`context.turn.context_usage > 0.9 && context.state.get('compacted', false) == false`,
	`context.result.name in context.history.failures && context.history.failures[context.result.name] >= 3`,
	`context.history.failures.exists(k, context.history.failures[k] > 5)`,
	`context.history.messages.exists(m, m.role == 'user' && m.content.contains('urgent'))`,
	`context.result.success == false`,
	`context.settings.max_sources < context.history.tools.size() && context.settings.strict`,
	`context.result.duration_ms > 30000`,
	`context.turn.number > 45 && context.turn.token_usage > 0.5`,
	`context.history.tools.size() > 0 && context.history.tools[context.history.tools.size() - 1].name == 'shell'`,
	`context.result.result.startsWith('ERROR')`,
	`context.history.messages.size() > 100`,
	`context.state.get('nudged', 0) > 2`,
	`context.event.hook == 'on_tool_complete' && context.result.name == 'search' && size(context.result.result) == 0`,
}

// benchLua are Lua scripts; the first holds.
var benchLua = []string{
	// holds: two or more successful fetches of one host
	`local seen = {}
for _, t in ipairs(context.history.tools) do
  if t.name == "http_get" and t.success then
    local url = t.arguments.url or ""
    seen[url] = (seen[url] or 0) + 1
    if seen[url] >= 2 then return true end
  end
end
return false`,
	// do not hold
	`local n = 0
for _, t in ipairs(context.history.tools) do
  if not t.success then n = n + 1 end
end
return n > 10`,
	`return context.turn.token_usage > 0.95`,
	`for _, m in ipairs(context.history.messages) do
  if m.role == "user" and string.find(m.content, "stop", 1, true) then return true end
end
return false`,
	`return context.result.name == "shell" and #context.result.result > 10000`,
}

const benchFiring = 4 // 3 CEL + 1 Lua hold; see benchRules

func benchContext() *Context {
	c := &Context{
		Turn:    Turn{Number: 24, TokenUsage: 0.42, ContextUsage: 0.37, IterationCount: 24},
		Event:   map[string]any{"hook": "on_tool_complete"},
		Result:  ToolResult{Name: "http_get", Arguments: map[string]any{"url": "https://example.org/a"}, Result: strings.Repeat("lorem ipsum ", 200), Success: true, DurationMs: 420},
		History: History{Failures: map[string]int64{"shell": 1, "search": 2}},
		User:    User{ID: "u1"},
		Project: Project{ID: "chat-1"},
	}
	for i := 0; i < 20; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c.History.Messages = append(c.History.Messages, Message{Role: role, Content: strings.Repeat("words of a message ", 20)})
	}
	now := time.Now()
	for i := 0; i < 30; i++ {
		name, ok := "http_get", true
		switch {
		case i%5 == 0:
			name = "search"
		case i%7 == 0:
			name, ok = "shell", false
		}
		c.History.Tools = append(c.History.Tools, ToolCall{Name: name, Success: ok, Timestamp: now,
			Arguments: map[string]any{"url": "https://example.org/" + strconv.Itoa(i%12)}, Result: "some result text"})
	}
	return c
}

// benchRules writes a plugin "bench" of 50 rules at on_tool_complete: 35
// CEL and 15 Lua conditions; benchFiring of them (the first CEL ones and
// the first Lua one) hold for benchContext and render templates.
func benchRules(tb testing.TB) string {
	files := map[string]string{
		"bench/manifest.toml": pluginManifest("bench", true, `
[settings.max_sources]
type = "integer"
default = 10
[settings.strict]
type = "boolean"
default = false
`),
	}
	action := func(i int, fires bool) string {
		msg := "rule " + strconv.Itoa(i) + " fired"
		if fires {
			msg = "Rule " + strconv.Itoa(i) + ": {{ context.result.name }} returned {{ context.result.result | length }} characters after {{ context.history.tools | length }} calls ({{ (context.turn.token_usage * 100) | int }}% of the budget)."
		}
		return "[action]\ntype = \"notify_self\"\nmessage = \"" + msg + "\"\npriority = \"high\"\n"
	}
	for i := 0; i < 35; i++ {
		cond := benchCEL[i%len(benchCEL)]
		fires := i < 3
		if !fires && i%len(benchCEL) < 3 {
			cond = benchCEL[3+i%5] // keep the firing count at benchFiring
		}
		files[fmt.Sprintf("bench/rules/cel-%d.toml", i)] = fmt.Sprintf("[rule]\nid = \"cel-%d\"\ntrigger = \"on_tool_complete\"\npriority = %d\n[condition]\nexpression = %q\n%s",
			i, 1+i*7%500, cond, action(i, fires))
	}
	for i := 0; i < 15; i++ {
		src := benchLua[i%len(benchLua)]
		fires := i == 0
		if !fires && i%len(benchLua) == 0 {
			src = benchLua[1]
		}
		files[fmt.Sprintf("bench/scripts/lua-%d.lua", i)] = src
		files[fmt.Sprintf("bench/rules/lua-%d.toml", i)] = fmt.Sprintf("[rule]\nid = \"lua-%d\"\ntrigger = \"on_tool_complete\"\npriority = %d\n[condition]\nscript = \"../scripts/lua-%d.lua\"\n%s",
			i, 1+i*13%500, i, action(100+i, fires))
	}
	return writeTree(tb, files)
}

// BenchmarkHook50Rules: one Evaluate of 50 rules at one hook, CEL and Lua
// mixed, a few firing with templates. Reports the p50 and p99 of one
// Evaluate (target: p99 < 1ms).
//
// An Evaluate allocates ~360 KB, and the Go GC runs when the heap has grown
// by GOGC% of the live heap. With a live heap of a few MB (this binary; a
// fresh loom serve node has ~4 MB) a collection starts every dozen
// evaluations and its work lands in the p99; with a larger working set
// (connections, caches) collections are rarer. The sub-benchmarks keep 0
// and 64 MiB reachable to show both.
func BenchmarkHook50Rules(b *testing.B) {
	for _, live := range []int{0, 64 << 20} {
		b.Run(fmt.Sprintf("liveheap=%dMiB", live>>20), func(b *testing.B) {
			ballast := make([]byte, live)
			benchHook50Rules(b)
			runtime.KeepAlive(ballast)
		})
	}
}

func benchHook50Rules(b *testing.B) {
	set, err := Load(LoadOptions{PluginsDir: benchRules(b)})
	if err != nil {
		b.Fatal(err)
	}
	if n := len(set.ByHook(OnToolComplete)); n != 50 {
		b.Fatalf("%d rules", n)
	}
	e, err := NewEngine(set, EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c := benchContext()
	scope := Scope{State: func(string) map[string]any { return map[string]any{"nudged": int64(1)} }}
	ctx := context.Background()
	fired, evals := e.Evaluate(ctx, OnToolComplete, c, scope)
	for _, ev := range evals {
		if ev.Err != "" {
			b.Fatalf("%s: %s", ev.Rule, ev.Err)
		}
	}
	if len(fired) != benchFiring {
		b.Fatalf("%d fired, want %d", len(fired), benchFiring)
	}
	// Wall time (what a hook costs the user) and the thread's CPU time
	// (what it costs the machine, and a steadier number on a machine shared
	// with other work: a descheduled run does not count).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	wall := make([]int64, 0, b.N)
	cpu := make([]int64, 0, b.N)
	var ts0, ts1 unix.Timespec
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts0)
		t0 := time.Now()
		e.Evaluate(ctx, OnToolComplete, c, scope)
		wall = append(wall, int64(time.Since(t0)))
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts1)
		cpu = append(cpu, ts1.Nano()-ts0.Nano())
	}
	b.StopTimer()
	b.ReportMetric(percentile(wall, 0.50), "p50-ns")
	b.ReportMetric(percentile(wall, 0.99), "p99-ns")
	b.ReportMetric(percentile(cpu, 0.50), "p50-cpu-ns")
	b.ReportMetric(percentile(cpu, 0.99), "p99-cpu-ns")
}

// percentile sorts xs and returns its p-quantile.
func percentile(xs []int64, p float64) float64 {
	slices.Sort(xs)
	return float64(xs[int(float64(len(xs)-1)*p)])
}
