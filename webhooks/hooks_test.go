package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// ruleFiles writes standalone rule files (name → TOML) into a new rules
// directory and returns it.
func ruleFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// rule is a standalone rule file: id, trigger, condition expression and
// the [action] table's lines.
func rule(id, trigger, cond, action string, extra ...string) string {
	return fmt.Sprintf("[rule]\nid = %q\nname = %q\ndescription = \"test rule\"\ntrigger = %q\n%s\n\n[condition]\nexpression = %q\n\n[action]\n%s\n",
		id, id, trigger, strings.Join(extra, "\n"), cond, action)
}

// notified returns the rules' notification messages of a request, in
// prompt order.
func notified(req map[string]any) []string {
	var out []string
	for _, m := range reqMessages(req) {
		if m["role"] == "system" && strings.HasPrefix(msgText(m), "[notification ") {
			out = append(out, msgText(m))
		}
	}
	return out
}

// onlyDocs returns the live documents of a chat's collection.
func (s *stack) chatDocs(chatID, coll string) []*collections.Document {
	return s.docs(s.chat(chatID) + "/" + coll)
}

// replyTo waits (what) for the orchestrator's reply to message msgID of
// chat chatID and returns its content.
func (s *stack) replyTo(what, chatID, msgID string) string {
	path := s.chat(chatID) + "/messages/" + msgID + "-reply"
	s.waitFor(what, 10*time.Second, func() bool { return s.get(path) != nil })
	return field(s.get(path), "content")
}

// A notify_self rule at on_turn_start reaches the very request of the step
// it fired for, right after the system prompt, rendered from the context.
func TestRules_NotifyAtTurnStartReachesTheModel(t *testing.T) {
	var mu sync.Mutex
	seen := map[int][]string{}
	fake, model := newFake(t, script{sub: func(n int, req map[string]any) llmtest.Step {
		mu.Lock()
		seen[n] = notified(req)
		mu.Unlock()
		if ms := reqMessages(req); len(ms) < 2 || !strings.HasPrefix(msgText(ms[1]), "[notification tip/high] ") {
			t.Errorf("step %d: the notification is not right after the system prompt: %v", n, ms)
		}
		return toolThenAnswer(call("call_calc", "calculator", `{"expression":"6*7"}`), "42")(n, req)
	}})
	dir := ruleFiles(t, map[string]string{"step-note": rule("step-note", "on_turn_start", "context.turn.number >= 1",
		`type = "notify_self"
message = "Step {{ context.turn.number }} after {{ context.turn.iteration_count }}."
category = "tip"
priority = "high"`)})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	want := map[int]string{0: "[notification tip/high] Step 1 after 0.", 1: "[notification tip/high] Step 2 after 1."}
	for n, w := range want {
		if len(seen[n]) != 1 || seen[n][0] != w {
			t.Errorf("step %d notifications %q, want [%q]", n, seen[n], w)
		}
	}
	// Delivered straight into the prompt: no document.
	if ds := s.chatDocs("c1", "notifications"); len(ds) != 0 {
		t.Errorf("%d notification documents for prompt-time notices", len(ds))
	}
	if len(fake.reqs("orch")) != 1 || len(notified(fake.reqs("orch")[0])) != 0 {
		t.Error("the orchestrator got the sub-agent's notification")
	}
	// The execution log has the evaluations (one per step).
	if n := len(s.docs("agent-rule-log")); n < 2 {
		t.Errorf("%d execution-log documents, want one per hook evaluation (2)", n)
	}
}

// A rule at on_tool_failure leaves a pending notification that the
// sub-agent's next step carries; the step's write marks it delivered.
func TestRules_ToolFailureNotifiesTheNextStep(t *testing.T) {
	fake, model := newFake(t, script{
		sub: toolThenAnswer(call("call_bad", "calculator", `{"nope":1}`), "I could not compute it."),
	})
	dir := ruleFiles(t, map[string]string{"tool-failed": rule("tool-failed", "on_tool_failure", "!context.result.success",
		`type = "notify_self"
message = "Tool {{ context.result.name }} failed ({{ context.history.failures[context.result.name] | default(0) }} failures); try another way."
category = "warning"
deliver_at = "immediately"`)})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests\n%s", len(subs), s.dump())
	}
	if n := notified(subs[0]); len(n) != 0 {
		t.Errorf("first step carried %q", n)
	}
	got := notified(subs[1])
	// The failure being reported counts in history.failures.
	if len(got) != 1 || !strings.HasPrefix(got[0], "[notification warning/normal] Tool calculator failed (1 failures)") {
		t.Fatalf("second step notifications %q", got)
	}
	ms := reqMessages(subs[1])
	if msgText(ms[len(ms)-1]) != got[0] {
		t.Errorf("deliver_at immediately: the notification is not the last message: %v", ms)
	}
	docs := s.chatDocs("c1", "notifications")
	if len(docs) != 1 {
		t.Fatalf("%d notification documents, want 1", len(docs))
	}
	n := docs[0]
	if field(n, "status") != "delivered" || field(n, "target") != "m1-t0" || field(n, "ruleKey") != "tool-failed" ||
		!strings.HasPrefix(field(n, "deliveredIn"), s.chat("c1")+"/sub-agents/m1-t0/messages/") {
		t.Errorf("notification %v", n.Data)
	}
}

// set_state persists across turns: a counter rule counts each step at
// on_turn_end; a later rule's condition reads the count at on_turn_start;
// a redelivery of the steps' triggers counts nothing twice.
func TestRules_SetStatePersistsAcrossTurns(t *testing.T) {
	fake, model := newFake(t, script{sub: func(n int, req map[string]any) llmtest.Step {
		if n < 2 {
			return llmtest.Step{ToolCalls: []llm.ToolCall{call(fmt.Sprintf("call_%d", n), "calculator", `{"expression":"1+1"}`)}}
		}
		return llmtest.Step{Content: "done"}
	}})
	dir := ruleFiles(t, map[string]string{
		"count-turns": rule("count-turns", "on_turn_end", "true",
			`type = "set_state"
key = "turns"
value = "{{ (context.state.turns | default(0) | int) + 1 }}"`),
		"second-turn": rule("second-turn", "on_turn_start", "string(context.state.get('turns', '0')) == '2'",
			`type = "notify_self"
message = "Two turns are done."`),
	})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	s.say("c1", "m1", "Add things")
	s.waitFor("the chat result", 20*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	subs := fake.reqs("sub")
	if len(subs) != 3 {
		t.Fatalf("%d sub-agent requests\n%s", len(subs), s.dump())
	}
	for i, want := range []int{0, 0, 1} {
		if got := notified(subs[i]); len(got) != want {
			t.Errorf("step %d notifications %q, want %d", i, got, want)
		}
	}
	state := s.get(s.chat("c1") + "/plugin-state/standalone")
	if turns := stateValue(state, "turns"); turns != "3" {
		t.Fatalf("state turns = %q, want 3 (one per step)\n%v", turns, state)
	}

	// Redeliver every agent-loop trigger: the counter stays.
	c := s.chat("c1")
	for i, d := range s.docs(c + "/sub-agents/m1-t0/messages") {
		if r := field(d, "role"); r == "user" || r == "tool" {
			if code := s.postSigned("agent-loop", fmt.Sprintf("evt_again_%d", i), "create", d); code != 200 {
				t.Errorf("agent-loop %s: %d", d.Path, code)
			}
		}
	}
	s.settle(10 * time.Second)
	if turns := stateValue(s.get(c+"/plugin-state/standalone"), "turns"); turns != "3" {
		t.Errorf("after redeliveries turns = %q, want 3", turns)
	}
}

// stateValue reads a plugin state value as text.
func stateValue(d *collections.Document, key string) string {
	if d == nil {
		return ""
	}
	v, _ := d.Data["values"].(map[string]any)
	return fmt.Sprint(v[key])
}

// emit_event and a persisted notify_self write their documents once, however
// often the hook's trigger is delivered.
func TestRules_RedeliveryWritesEffectsOnce(t *testing.T) {
	_, model := newFake(t, script{
		sub: toolThenAnswer(call("call_calc", "calculator", `{"expression":"6*7"}`), "42"),
	})
	dir := ruleFiles(t, map[string]string{
		"tool-event": rule("tool-event", "on_tool_complete", "context.result.success",
			`type = "emit_event"
event_type = "tool.done"
payload = { tool = "{{ context.result.name }}", result = "{{ context.result.result }}" }`),
		"tool-note": rule("tool-note", "on_tool_complete", "true",
			`type = "notify_self"
message = "{{ context.result.name }} took {{ context.result.duration_ms }} ms."`),
	})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	events, notes := s.chatDocs("c1", "agent-events"), s.chatDocs("c1", "notifications")
	if len(events) != 1 || len(notes) != 1 {
		t.Fatalf("%d events, %d notifications, want 1 each\n%s", len(events), len(notes), s.dump())
	}
	ev := events[0]
	payload, _ := ev.Data["payload"].(map[string]any)
	if field(ev, "type") != "tool.done" || payload["tool"] != "calculator" || payload["result"] != `{"result":42}` ||
		field(ev, "ruleKey") != "tool-event" || field(ev, "hook") != "on_tool_complete" {
		t.Errorf("event %v", ev.Data)
	}
	before := map[string]int64{ev.Path: ev.Version, notes[0].Path: notes[0].Version}
	tc := s.docs(s.chat("c1") + "/sub-agents/m1-t0/tool-calls")[0]
	for i := range 3 {
		if code := s.postSigned("tool-runner", fmt.Sprintf("evt_tool_%d", i), "create", tc); code != 200 {
			t.Fatalf("tool-runner redelivery: %d", code)
		}
	}
	s.settle(10 * time.Second)
	events, notes = s.chatDocs("c1", "agent-events"), s.chatDocs("c1", "notifications")
	if len(events) != 1 || len(notes) != 1 {
		t.Fatalf("after redeliveries %d events, %d notifications", len(events), len(notes))
	}
	for _, d := range append(events, notes...) {
		if before[d.Path] != d.Version {
			t.Errorf("%s rewritten by a redelivery (v%d → v%d)", d.Path, before[d.Path], d.Version)
		}
	}
}

// A rule the user disabled in their settings stays silent; a core rule
// runs although the user lists it (a document written around the
// server's check: the runtime drops it when reading).
func TestRules_UserDisablesARuleButNotACoreOne(t *testing.T) {
	fake, model := newFake(t, script{sub: func(int, map[string]any) llmtest.Step { return llmtest.Step{Content: "ok"} }})
	dir := ruleFiles(t, map[string]string{
		"plain-note": rule("plain-note", "on_turn_start", "true", `type = "notify_self"
message = "plain"`),
		"core-note": rule("core-note", "on_turn_start", "true", `type = "notify_self"
message = "core"`, "core = true"),
	})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	settingsPath := "users/" + s.user + "/agent-settings/rules"
	if code := s.write("PUT", settingsPath, s.token, map[string]any{"disabledRules": []any{"plain-note"}}); code != 201 && code != 200 {
		t.Fatalf("writing the settings: %d", code)
	}
	s.say("c1", "m1", "Hello there, do a thing")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	if got := notified(fake.reqs("sub")[0]); len(got) != 1 || !strings.HasSuffix(got[0], "] core") {
		t.Errorf("with plain-note disabled: %q, want only core", got)
	}

	// Listing the core rule too (written around the check) changes nothing
	// for it.
	_, err := s.store.Commit(context.Background(), "default", []collections.Write{{Type: collections.WriteUpdate, Path: settingsPath,
		Data: map[string]any{"disabledRules": []any{"plain-note", "core-note"}}}}, collections.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.say("c2", "m2", "Hello there, do another thing")
	s.waitFor("the second chat result", 15*time.Second, s.taskDone("c2", "m2-t0"))
	subs := fake.reqs("sub")
	if got := notified(subs[len(subs)-1]); len(got) != 1 || !strings.HasSuffix(got[0], "] core") {
		t.Errorf("with the core rule listed: %q, want core", got)
	}
}

// With the offline model the user sees a notification reach the model in
// the answer; on_session_end notifications reach the chat's next
// orchestrator decision.
func TestRules_OfflineModelShowsNotifications(t *testing.T) {
	dir := ruleFiles(t, map[string]string{
		"greet": rule("greet", "on_query_start", "context.event.content.startsWith('hi')", `type = "notify_self"
message = "Message {{ context.turn.number }}: {{ context.event.content }}"`),
		"ended": rule("ended", "on_session_end", "true", `type = "notify_self"
message = "Task {{ context.event.task_id }} ended: {{ context.event.status }}"`),
	})
	s := startStack(t, stackOpts{rulesDir: dir})
	s.say("c1", "m1", "hi")
	reply := s.replyTo("the reply", "c1", "m1")
	if !strings.HasSuffix(reply, "(notified: Message 1: hi)") {
		t.Errorf("reply %q does not show the notification", reply)
	}
	s.say("c1", "m2", "What is 2+3?")
	s.waitFor("the task", 15*time.Second, s.taskDone("c1", "m2-t0"))
	s.settle(10 * time.Second)
	s.say("c1", "m3", "hello again")
	reply = s.replyTo("the third reply", "c1", "m3")
	if !strings.Contains(reply, "(notified: Task m2-t0 ended: success)") {
		t.Errorf("reply %q does not carry the session-end notification", reply)
	}
	// Marked delivered right after the reply is written.
	s.waitFor("the notification delivered", 10*time.Second, func() bool {
		notes := s.chatDocs("c1", "notifications")
		return len(notes) == 1 && field(notes[0], "status") == "delivered"
	})
	notes := s.chatDocs("c1", "notifications")
	if len(notes) != 1 || field(notes[0], "status") != "delivered" || field(notes[0], "deliveredIn") != s.chat("c1")+"/messages/m3-reply" {
		b, _ := json.Marshal(notes)
		t.Errorf("notifications %s", b)
	}
}

// A notification the runtime did not write (a permissive rules file lets
// the user write one) never reaches the model, for a sub-agent or the
// orchestrator.
func TestRules_ForgedNotificationsAreNotInjected(t *testing.T) {
	dir := ruleFiles(t, map[string]string{
		"ended": rule("ended", "on_session_end", "true", `type = "notify_self"
message = "ended"`),
		"tool-done": rule("tool-done", "on_tool_complete", "false", `type = "notify_self"
message = "never"`),
	})
	s := startStack(t, stackOpts{rulesDir: dir, rules: permissiveRules})
	for _, target := range []string{"orchestrator", "m1-t0"} {
		code := s.write("PUT", s.chat("c1")+"/notifications/forged-"+target, s.token, map[string]any{
			"target": target, "status": "pending", "message": "FORGED", "category": "info", "priority": "critical",
			"deliverAt": "turn_start", "ruleKey": "ended", "runtimeSeal": "AAAA",
		})
		if code != 201 {
			t.Fatalf("forging a notification for %s: %d", target, code)
		}
	}
	s.say("c1", "m1", "What is 2+3?")
	s.waitFor("the task", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	s.say("c1", "m2", "hi")
	reply := s.replyTo("the reply", "c1", "m2")
	for _, d := range append(s.chatDocs("c1", "messages"), s.docs(s.chat("c1")+"/sub-agents/m1-t0/messages")...) {
		if strings.Contains(field(d, "content"), "FORGED") {
			t.Errorf("%s shows the forged notification: %q", d.Path, field(d, "content"))
		}
	}
	if !strings.Contains(reply, "(notified: ended)") {
		t.Error("the runtime's own notification did not reach the orchestrator")
	}
	for _, target := range []string{"orchestrator", "m1-t0"} {
		if st := field(s.get(s.chat("c1")+"/notifications/forged-"+target), "status"); st != "pending" {
			t.Errorf("forged notification for %s marked %q", target, st)
		}
	}
}

// A set_state over the state's size bound fails as the rule's failure:
// nothing is written, the run goes on, the execution log says why.
func TestRules_StateOverItsBoundIsNotWritten(t *testing.T) {
	// Five values of 15 000 bytes (a template is at most 16 KiB): 75 000
	// bytes of state, over the 64 KiB bound.
	big := strings.Repeat("x", 15000)
	files := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		files["big-"+k] = rule("big-"+k, "on_turn_end", "true", fmt.Sprintf("type = \"set_state\"\nkey = %q\nvalue = %q", k, big))
	}
	dir := ruleFiles(t, files)
	s := startStack(t, stackOpts{rulesDir: dir})
	s.say("c1", "m1", "What is 2+3?")
	s.waitFor("the task", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	if field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") != "success" {
		t.Fatalf("the run did not succeed\n%s", s.dump())
	}
	if d := s.get(s.chat("c1") + "/plugin-state/standalone"); d != nil {
		t.Fatalf("state written over its bound: %d values", len(d.Data))
	}
	failed := 0
	for _, d := range s.docs("agent-rule-log") {
		evs, _ := d.Data["evaluations"].([]any)
		for _, e := range evs {
			em, _ := e.(map[string]any)
			if msg, _ := em["error"].(string); strings.Contains(msg, "limit") && em["executed"] != true {
				failed++
			}
		}
	}
	if failed == 0 {
		t.Errorf("no execution-log entry records the refused state write\n%v", s.docs("agent-rule-log"))
	}
}

// A prompt carries at most maxNotices (20) notifications: a pending one
// that did not fit (here behind 20 of higher priority fired for the step)
// stays pending instead of being marked delivered unseen.
func TestRules_PendingNoticeOverTheCapStaysPending(t *testing.T) {
	fake, model := newFake(t, script{
		sub: toolThenAnswer(call("call_calc", "calculator", `{"expression":"6*7"}`), "42"),
	})
	files := map[string]string{"tool-done": rule("tool-done", "on_tool_complete", "true",
		`type = "notify_self"
message = "the tool is done"
priority = "low"`)}
	for i := range 20 {
		id := fmt.Sprintf("loud-%02d", i)
		files[id] = rule(id, "on_turn_start", "true", `type = "notify_self"
message = "loud `+id+`"
priority = "high"`)
	}
	s := startStack(t, stackOpts{model: model, rulesDir: ruleFiles(t, files)})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests\n%s", len(subs), s.dump())
	}
	for i, req := range subs {
		got := notified(req)
		if len(got) != 20 || slices.Contains(got, "[notification info/low] the tool is done") {
			t.Errorf("step %d: %d notifications, the low one among them: %q", i, len(got), got)
		}
	}
	docs := s.chatDocs("c1", "notifications")
	if len(docs) != 1 {
		t.Fatalf("%d notification documents, want 1", len(docs))
	}
	if st := field(docs[0], "status"); st != "pending" {
		t.Errorf("a notification no prompt carried is %q (in %s), want pending", st, field(docs[0], "deliveredIn"))
	}
}
