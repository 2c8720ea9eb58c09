package plugins

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The seed's example message renders unchanged.
func TestTemplateSeedExample(t *testing.T) {
	tp, err := compileTemplate("seed", "Token budget at {{ (context.turn.token_usage * 100) | int }}%. Consider wrapping up or summarizing.")
	if err != nil {
		t.Fatal(err)
	}
	c := &Context{Turn: Turn{TokenUsage: 0.853}}
	got, err := tp.Render(c.Map())
	if err != nil || got != "Token budget at 85%. Consider wrapping up or summarizing." {
		t.Fatalf("%q %v", got, err)
	}
}

// Templates cannot reach other templates or files.
func TestTemplateNoFiles(t *testing.T) {
	for _, src := range []string{
		"{% include '/etc/passwd' %}",
		"{% include 'manifest.toml' %}",
		"{% extends '/etc/passwd' %}",
		"{% import '/etc/passwd' as x %}",
		"{% from '/etc/passwd' import x %}",
		"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
		"{% block b %}{% endblock %}",
	} {
		if _, err := compileTemplate("t", src); err == nil {
			t.Errorf("%q compiled", src)
		}
	}
}

// What one rendering may spend is bounded: output, range() items, and a
// panic in the engine is an error.
func TestTemplateBounds(t *testing.T) {
	cases := []struct{ src, err string }{
		{"{{ 'x' * 100000 }}", "output above"},
		{"{% for i in range(100000) %}{{ i }}{% endfor %}", "more than 10000 items"},
		{"{% for i in range(200) %}{% for j in range(200) %}{% endfor %}{% endfor %}", "more than 10000 items"},
		{"{{ 'x' * -1 }}", "template engine failed"},
		{"{% for i in context.history.messages %}{{ i.content }}{% endfor %}", "output above"},
	}
	c := &Context{}
	for i := 0; i < 3; i++ {
		c.History.Messages = append(c.History.Messages, Message{Role: "user", Content: strings.Repeat("y", 30000)})
	}
	for _, tc := range cases {
		tp, err := compileTemplate("t", tc.src)
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		out, err := tp.Render(c.Map())
		if err == nil || !strings.Contains(err.Error(), tc.err) || out != "" {
			t.Errorf("%q: %q %v, want error %q", tc.src, out, err, tc.err)
		}
	}
	tp, _ := compileTemplate("t", "{% for i in range(3) %}{{ i }}{% if i == 1 %}{% break %}{% endif %}{% endfor %}")
	if out, err := tp.Render(c.Map()); out != "01" || err != nil {
		t.Fatalf("range: %q %v", out, err)
	}
	if _, err := compileTemplate("t", strings.Repeat("x", maxTemplateSource+1)); err == nil {
		t.Fatal("oversized template compiled")
	}
}

// A set_state value and an emit_event payload are trees whose strings are
// templates; other values pass through.
func TestRenderTrees(t *testing.T) {
	useFakeConditions(t)
	src := `[rule]
id = "ev"
trigger = "on_tool_complete"
[condition]
expression = "true"
[action]
type = "emit_event"
event_type = "tool.done"
[action.payload]
tool = "{{ context.result.name }}"
count = 3
flags = [true, "{{ context.turn.number }}"]
[action.payload.nested]
ok = "{{ context.result.success }}"
`
	r, errs := parseRule("x.toml", src)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c := &Context{Turn: Turn{Number: 2}, Result: ToolResult{Name: "http_get", Success: true}}
	got, err := r.Action.render(c.Map())
	if err != nil {
		t.Fatal(err)
	}
	p := got.Payload
	if p["tool"] != "http_get" || p["count"] != int64(3) || p["flags"].([]any)[0] != true || p["flags"].([]any)[1] != "2" ||
		p["nested"].(map[string]any)["ok"] != "True" || got.EventType != "tool.done" {
		t.Fatalf("payload %#v", p)
	}
}

// A compiled template renders concurrently (the engine shares it between
// every user's hook).
func TestTemplateConcurrent(t *testing.T) {
	tp, err := compileTemplate("t", "{% for i in range(3) %}{{ i }}{% endfor %} {{ context.turn.number }} {{ context.history.tools | length }}{% set x = 1 %}{{ x }}")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			c := &Context{Turn: Turn{Number: int64(g)}}
			for i := 0; i < 50; i++ {
				out, err := tp.Render(c.Map())
				if want := "012 " + strconv.Itoa(g) + " 01"; err != nil || out != want {
					t.Errorf("%q %v, want %q", out, err, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestTemplateWidthsBounded: a filter's width or count may come from data
// (a plugin setting, a tool's arguments), and replace's result grows with
// the product of two data sizes; a result above what a rendering may
// write is refused before the filter allocates it, not after.
func TestTemplateWidthsBounded(t *testing.T) {
	m := map[string]any{"n": 100_000_000, "s": "abc", "l": []any{1, 2, 3},
		"big": strings.Repeat("a", 100_000), "sep": strings.Repeat("-", 1024), "tabs": strings.Repeat("\t", 1000)}
	for _, src := range []string{
		"{{ context.big | replace('a', context.sep) }}",
		"{{ context.s.center(context.n) }}",
		"{{ context.s.ljust(context.n) }}",
		"{{ context.s.rjust(context.n, '-') }}",
		"{{ context.s.zfill(context.n) }}",
		"{{ '{:>{}}'.format(context.s, context.n) }}",
		"{{ context.big.replace('a', context.sep, -1) }}",
		"{{ context.tabs.expandtabs('', context.n) }}",
		"{{ context.big | replace('', context.sep, count=50000) }}",
		"{{ context.s | center(context.n) }}",
		"{{ context.s | indent(context.n, true) }}",
		"{{ context.s | indent(width=context.n, first=true) }}",
		"{{ context.l | batch(context.n, 0) | length }}",
		"{{ context.l | tojson(indent=context.n) }}",
	} {
		tmpl, err := compileTemplate("t", src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = tmpl.Render(m)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: no error", src)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
			t.Errorf("%s: allocated %d bytes", src, n)
		}
	}
	// Within the bound the filters work as before.
	tmpl, err := compileTemplate("t", "[{{ 'ab' | center(6) }}]{{ [1, 2, 3] | batch(2, 0) | list | length }}{{ 'a-b-c' | replace('-', '+', count=1) }}{{ 'x'.center(3, '*') }}{{ 'a-b'.replace('-', '+', 1) }}{{ '{:>3}'.format(7) }}")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render(nil); err != nil || got != "[  ab  ]2a+b-c*x*a+b  7" {
		t.Errorf("got %q, %v", got, err)
	}
}

// TestRenderLeavesContextAlone: gonja's list.reverse() changes its
// receiver in place (its dict methods work on a copy today); a template
// calling them must not rewrite the runtime's values (a plugin's state
// outside set_state, a tool's arguments) nor what the next rule sees.
func TestRenderLeavesContextAlone(t *testing.T) {
	useFakeConditions(t)
	src := `[rule]
id = "mut"
trigger = "on_tool_complete"
[condition]
expression = "true"
[action]
type = "log"
message = "{% set context.state.count = 98 %}{%- set context.result.arguments['q'] = 'z' %}{% do context.state.update({'count': 99}) %}{% do context.result.arguments.clear() %}{% do context.history.messages.reverse() %}{% do context.state.items.reverse() %}{{ context.state.items[0] }}"
`
	r, errs := parseRule("x.toml", src)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	state := map[string]any{"count": 1, "items": []any{"x", "y"}}
	args := map[string]any{"q": "x"}
	c := &Context{State: state, Result: ToolResult{Arguments: args},
		History: History{Messages: []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}}}
	m := c.Map()
	got, err := r.Action.render(m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Message != "y" {
		t.Errorf("message %q", got.Message)
	}
	if state["count"] != 1 || state["items"].([]any)[0] != "x" || len(args) != 1 || args["q"] != "x" {
		t.Errorf("state %v, arguments %v", state, args)
	}
	if first := m["history"].(map[string]any)["messages"].([]any)[0].(map[string]any)["content"]; first != "a" {
		t.Errorf("messages reordered: first is %v", first)
	}
}

// Templates that cannot change their values render without a copy; the
// others are recognised, whatever their spelling.
func TestTemplatesMutate(t *testing.T) {
	for src, want := range map[string]bool{
		"{{ context.history.tools | length }} {{ context.result.name | upper }}": false,
		"{% set n = context.turn.number %}{{ n }}":                               false,
		"{% set context.state.k = 1 %}":                                          true,
		"{%- set x[0] = 1 %}":                                                    true,
		"{%set context.state['k'] = 1%}":                                         true,
		"{% do context.history.messages.reverse() %}":                            true,
		"{{ context.state.items.append(1) }}":                                    true,
		"{{ context.state . pop ('k') }}":                                        true,
	} {
		if got := templatesMutate([]string{src}); got != want {
			t.Errorf("templatesMutate(%q) = %v, want %v", src, got, want)
		}
	}
}
