package plugins

import (
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
