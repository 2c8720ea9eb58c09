package webhooks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
)

// withNotices puts turn_start notifications right after the leading system
// messages and immediate ones last, higher priority first, older first
// among equals.
func TestWithNotices_PlacesByDeliverAtAndPriority(t *testing.T) {
	msgs := []llm.Message{{Role: "system", Content: "prompt"}, {Role: "system", Content: "summary"},
		{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}
	notes := []notice{
		{message: "low-start", category: "info", priority: "low", deliverAt: "turn_start", createdAt: 1},
		{message: "now-normal", category: "tip", priority: "normal", deliverAt: "immediately", createdAt: 2},
		{message: "crit-start", category: "warning", priority: "critical", deliverAt: "turn_start", createdAt: 3},
		{message: "normal-start-old", category: "info", priority: "normal", deliverAt: "turn_start", createdAt: 1},
		{message: "normal-start-new", category: "info", priority: "normal", deliverAt: "turn_start", createdAt: 5},
		{message: "now-high", category: "tip", priority: "high", deliverAt: "immediately", createdAt: 9},
	}
	var got []string
	for _, m := range withNotices(msgs, notes) {
		got = append(got, m.Role+":"+m.Content)
	}
	want := []string{"system:prompt", "system:summary",
		"system:[notification warning/critical] crit-start",
		"system:[notification info/normal] normal-start-old",
		"system:[notification info/normal] normal-start-new",
		"system:[notification info/low] low-start",
		"user:q", "assistant:a",
		"system:[notification tip/high] now-high",
		"system:[notification tip/normal] now-normal"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("prompt:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(msgs) != 4 || msgs[2].Content != "q" {
		t.Error("withNotices changed its input")
	}
	if out := withNotices(msgs, nil); len(out) != len(msgs) {
		t.Error("no notices must leave the prompt as it is")
	}
	many := make([]notice, 3*maxNotices)
	if out := withNotices(msgs, many); len(out) != len(msgs)+maxNotices {
		t.Errorf("%d messages with %d notices, want at most %d added", len(out), len(many), maxNotices)
	}
}

// Effect ids are valid document ids, stable, and distinct per hook, site
// and rule.
func TestEffectID_StableAndDistinct(t *testing.T) {
	base := hookCall{hook: plugins.OnToolFailure, site: "users/u/orch-chats/c/sub-agents/s/tool-calls/x"}
	id := effectID(base, "plug/rule")
	if id != effectID(base, "plug/rule") {
		t.Error("not deterministic")
	}
	other := base
	other.hook = plugins.OnToolComplete
	seen := map[string]bool{id: true}
	for _, got := range []string{effectID(base, "plug/other"), effectID(other, "plug/rule"),
		effectID(hookCall{hook: base.hook, site: base.site + "y"}, "plug/rule")} {
		if seen[got] {
			t.Errorf("id %s repeats", got)
		}
		seen[got] = true
	}
	for s := range seen {
		if len(s) > 128 || strings.ContainsAny(s, "/ ") {
			t.Errorf("id %q is not a plain segment", s)
		}
	}
}

// Values read from documents reach the rules as int64/float64, maps and
// []any, however deep.
func TestPlainValue(t *testing.T) {
	in := map[string]any{"n": json.Number("3"), "f": json.Number("2.5"),
		"m": map[string]any{"l": []any{json.Number("1"), "x"}}, "s": []string{"a"}}
	want := map[string]any{"n": int64(3), "f": 2.5, "m": map[string]any{"l": []any{int64(1), "x"}}, "s": []any{"a"}}
	if got := plainMap(in); !reflect.DeepEqual(got, want) {
		t.Errorf("plainMap = %#v", got)
	}
	if plainMap(nil) != nil {
		t.Error("nil map must stay nil")
	}
}

func TestValidStateKey(t *testing.T) {
	for k, ok := range map[string]bool{"count": true, "a_b-9": true, "": false, "a.b": false, "a/b": false,
		strings.Repeat("k", 129): false, "{{x}}": false} {
		if validStateKey(k) != ok {
			t.Errorf("validStateKey(%q) = %v", k, !ok)
		}
	}
}

func TestTruncate_RuneBoundary(t *testing.T) {
	if got := truncate("héllo", 2); got != "h…" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("abc", 5); got != "abc" {
		t.Errorf("truncate = %q", got)
	}
	// An invalid byte before the cut keeps the text before the cut.
	if got := truncate("a\xffbcdef", 4); got != "a\xffbc…" {
		t.Errorf("truncate = %q", got)
	}
	if got := cutText("héllo", 2); got != "h…(truncated)" {
		t.Errorf("cutText = %q", got)
	}
	if got := cutText("héllo", 6); got != "héllo" {
		t.Errorf("cutText = %q", got)
	}
}

// A tool call's arguments reach the context bounded: a model can put a
// whole file (or a thousand keys) in them.
func TestArgsOf_Bounded(t *testing.T) {
	big := strings.Repeat("x", 10*maxContextText)
	many := map[string]any{}
	for i := range 5000 {
		many[fmt.Sprintf("key-%05d", i)] = []any{"v", 1}
	}
	for name, in := range map[string]any{
		"long string": map[string]any{"path": "a.txt", "content": big},
		"many keys":   many,
		"long list":   map[string]any{"items": make([]any, 100000)},
	} {
		b, _ := json.Marshal(in)
		out, _ := json.Marshal(argsOf(string(b)))
		if len(out) > 2*maxContextText {
			t.Errorf("%s: %d bytes of arguments in the context, want at most about %d", name, len(out), maxContextText)
		}
	}
	got := argsOf(`{"path":"a.txt","content":"` + big + `"}`)
	if got["path"] != "a.txt" {
		t.Errorf("a short argument was lost: %v", got["path"])
	}
	if got := argsOf(`{"n": 3, "s": "é"}`); got["n"] != float64(3) || got["s"] != "é" {
		t.Errorf("small arguments changed: %v", got)
	}
}
