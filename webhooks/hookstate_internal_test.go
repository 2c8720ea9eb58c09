package webhooks

import (
	"context"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

// raceDocs is a Docs that runs before, once, ahead of the first write of a
// plugin state: another hook of the chat writing first.
type raceDocs struct {
	Docs
	before func()
}

func (r *raceDocs) race(path string) {
	if f := r.before; f != nil && strings.Contains(path, "/plugin-state/") {
		r.before = nil
		f()
	}
}

func (r *raceDocs) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	r.race(path)
	return r.Docs.Create(ctx, path, data)
}

func (r *raceDocs) Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	r.race(path)
	return r.Docs.Update(ctx, path, data, ifVersion)
}

// Two hooks of a chat that count in the same state at once (two tools'
// on_tool_complete) count twice: the one that loses the race evaluates its
// rules again over the state the other wrote, instead of writing the value
// it rendered from the state before (which counted once for both).
func TestRunHook_ConcurrentStateWritesBothCount(t *testing.T) {
	eng := testEngine(t, map[string]string{"count-tools": `
[rule]
id = "count-tools"
trigger = "on_tool_complete"

[condition]
expression = "true"

[action]
type = "set_state"
key = "tools"
value = "{{ (context.state.tools | default(0) | int) + 1 }}"
`})
	env := &rulesEnv{store: openTestStore(t)}
	docs := &raceDocs{Docs: env.serviceDocs()}
	h := offlineHandlers(t, Config{Docs: docs, Rules: eng})
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	call := func(site string) hookCall {
		return hookCall{hook: plugins.OnToolComplete, c: c, site: site, target: "s1"}
	}
	for round, want := range []string{"2", "4"} { // the first creates the document, the second updates it
		docs.before = func() {
			if _, err := h.runHook(ctx, call("other-tool-"+want)); err != nil {
				t.Errorf("the other hook: %v", err)
			}
		}
		if _, err := h.runHook(ctx, call("this-tool-"+want)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		d, err := docs.Get(ctx, c.pluginState(""))
		if err != nil {
			t.Fatal(err)
		}
		if got := stateValue(h, d, "tools"); got != want {
			t.Errorf("round %d: tools = %s, want %s (one per hook)", round, got, want)
		}
	}
}

func stateValue(h *Handlers, d *collections.Document, key string) string {
	v := h.stateValues(d)[key]
	if v == nil {
		return "<none>"
	}
	return strings.TrimSpace(strings.Trim(plainString(v), `"`))
}

func plainString(v any) string {
	b, _ := canonicalJSON(v)
	return string(b)
}
