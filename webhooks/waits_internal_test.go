package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// A model's timeoutSeconds is bounded to 10 s..24 h; none (or none
// positive) is the configured wait_timeout, which may itself be short.
func TestWaitTimeoutFor_Bounds(t *testing.T) {
	h := offlineHandlers(t, Config{Docs: &queryLog{}, WaitTimeout: time.Second})
	f := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		secs *float64
		want time.Duration
	}{
		{nil, time.Second},
		{f(0), time.Second},
		{f(-5), time.Second},
		{f(1), 10 * time.Second},
		{f(90), 90 * time.Second},
		{f(1e12), 24 * time.Hour},
	} {
		if got := h.waitTimeoutFor(tt.secs); got != tt.want {
			t.Errorf("timeoutSeconds %v: %s, want %s", tt.secs, got, tt.want)
		}
	}
	if d := offlineHandlers(t, Config{Docs: &queryLog{}}).cfg.WaitTimeout; d != DefaultWaitTimeout {
		t.Errorf("default wait timeout %s", d)
	}
}

// send_message's arguments: recipients are "user" or roles, deduplicated
// and bounded; the text must be there and bounded; a child task messages
// no agent; the child-task budget counts what was sent before.
func TestPlanSend_Checks(t *testing.T) {
	h := offlineHandlers(t, Config{Docs: &queryLog{}, MaxChildTasks: 2})
	h.cfg.Roles = map[string]Role{"researcher": {}, "general": {}}
	root := &collections.Document{ID: "m1-t0", Data: map[string]any{}}
	child := &collections.Document{ID: "m1-t0-s2-0-general", Data: map[string]any{"parentTaskId": "m1-t0"}}
	for _, tt := range []struct {
		task *collections.Document
		args string
		used int
		want string // "" = accepted
	}{
		{root, `{"to":["user","researcher","user"],"text":"hi"}`, 0, ""},
		{root, `{"to":"user","text":"hi"}`, 0, ""},
		{root, `{"to":["nobody"],"text":"hi"}`, 0, `unknown recipient "nobody"`},
		{root, `{"to":[],"text":"hi"}`, 0, "names no recipient"},
		{root, `{"to":[1],"text":"hi"}`, 0, "list of names"},
		{root, `{"to":["user"],"text":"  "}`, 0, "empty"},
		{root, `{"to":["user"],"text":"` + strings.Repeat("x", maxMessageText+1) + `"}`, 0, "limit"},
		{root, `not json`, 0, "invalid arguments"},
		{root, `{"to":["researcher","general"],"text":"hi"}`, 1, "at most 2 messages to agents per task; 1 sent already"},
		{root, `{"to":["researcher","general"],"text":"hi"}`, 0, ""},
		{child, `{"to":["researcher"],"text":"hi"}`, 0, "cannot message agents"},
		{child, `{"to":["user"],"text":"hi","wait":true}`, 0, ""},
	} {
		p := h.planSend(tt.task, llm.ToolCall{Name: "send_message", Arguments: tt.args}, tt.used)
		if tt.want == "" && p.err != "" || tt.want != "" && !strings.Contains(p.err, tt.want) {
			t.Errorf("%.60s (used %d): err %q, want %q", tt.args, tt.used, p.err, tt.want)
		}
	}
	if p := h.planSend(root, llm.ToolCall{Arguments: `{"to":["user","researcher","user"],"text":"hi"}`}, 0); len(p.to) != 2 || len(p.agents) != 1 {
		t.Errorf("recipients %v, agents %v", p.to, p.agents)
	}
}

// The tool result of a wait: the replies, and at a timeout who did not
// reply first.
func TestWaitResult(t *testing.T) {
	ws := &waitState{Timeout: 90_000, Resolution: "timeout", WaitingFor: []waitFor{
		{Kind: "agent", Name: "researcher", Responded: false}, {Kind: "user", Name: "user", Responded: true},
	}, Replies: []waitReply{{From: "user", Name: "user", Text: "blue"}}}
	if got, want := waitResult(ws), "timeout: no reply from researcher within 1m30s\nreplies:\n- user: blue"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	ws.Replies = nil
	if got, want := waitResult(ws), "timeout: no reply from researcher within 1m30s"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	ws = &waitState{Resolution: "replied", Replies: []waitReply{{From: "agent", Name: "researcher", Text: strings.Repeat("x", maxReplyText+10)}}}
	if got := waitResult(ws); !strings.HasPrefix(got, "replies:\n- researcher (agent): xxx") || len(got) > maxReplyText+64 {
		t.Errorf("%.80q (%d bytes)", got, len(got))
	}
}
