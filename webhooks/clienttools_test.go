package webhooks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// pickFile is the client tool of these tests: the app lets the user pick a
// file and returns what was picked.
func pickFile(timeoutMs int64) config.Tool {
	return config.Tool{
		Name: "pick_file", Description: "Ask the user's app to let them pick a file.", ExecutionType: "client",
		ClientTimeout: timeoutMs,
		InputSchema: map[string]any{"type": "object", "required": []any{"accept"},
			"properties": map[string]any{"accept": map[string]any{"type": "string"}}},
	}
}

// startClientStack is startStack with the client tool configured and the
// researcher offered roleTools.
func startClientStack(t *testing.T, model llm.Model, tool config.Tool, roleTools ...string) *stack {
	t.Helper()
	node := apptest.Start(t, apptest.Options{Agents: true, Model: model, Config: func(c *config.Config) {
		c.Agents.AllowHosts = []string{"127.0.0.1"}
		c.Tools = append(c.Tools, tool)
		c.Agents.Roles = map[string]config.AgentRole{"researcher": {Tools: roleTools}}
	}})
	s := &stack{t: t, node: node, store: node.Store, trig: node.Triggers, URL: node.URL, reg: node.Registry}
	s.signup("alice")
	return s
}

// pendingPick starts a client stack whose researcher always calls
// pick_file, says "Pick a file." in c1, and waits for the call pending and
// its task waiting_tool; it returns the task's and the call's paths.
func pendingPick(t *testing.T) (fake *fakeLLM, s *stack, task, pick string) {
	t.Helper()
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_pick", "pick_file", `{"accept":"a"}`)}}
		},
	})
	s = startClientStack(t, model, pickFile(60000), "pick_file")
	s.say("c1", "m1", "Pick a file.")
	task, pick = s.chat("c1")+"/tasks/m1-t0", s.chat("c1")+"/sub-agents/m1-t0/tool-calls/call_pick"
	s.waitFor("the client call pending", 15*time.Second, func() bool {
		return field(s.get(pick), "status") == "pending" && field(s.get(task), "status") == "waiting_tool"
	})
	return fake, s, task, pick
}

// patchAs PATCHes a document as token's user and returns the status.
func (s *stack) patchAs(path, token, doc string) int {
	s.t.Helper()
	code, _ := s.do("PATCH", "/api/v1/databases/default/documents/"+path, token, `{"doc":`+doc+`}`)
	return code
}

// toolResultIn returns the content of the tool message answering callID in
// a model request, and whether there is one.
func toolResultIn(req map[string]any, callID string) (string, bool) {
	for _, m := range reqMessages(req) {
		if m["role"] == "tool" && m["tool_call_id"] == callID {
			return msgText(m), true
		}
	}
	return "", false
}

// toolMsgCount counts a sub-agent's tool messages answering callID.
func (s *stack) toolMsgCount(chatID, sa, callID string) int {
	n := 0
	for _, m := range s.docs(s.chat(chatID) + "/sub-agents/" + sa + "/messages") {
		if field(m, "role") == "tool" && field(m, "toolCallId") == callID {
			n++
		}
	}
	return n
}

// The round trip: the model calls a client tool (with a server tool in the
// same step); the call stays pending for the app (the server runs only the
// server tool), the task waits in waiting_tool; writes that are not the
// owner's outcome of a pending client call are refused and change nothing;
// the owner's result resumes the loop, the model's next request carries it,
// and the answer reaches the chat. A redelivered result event writes
// nothing twice.
func TestClientTool_RoundTrip(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{
					call("call_pick", "pick_file", `{"accept":"image/*"}`),
					call("call_calc", "calculator", `{"expression":"6*7"}`),
				}}
			}
			return llmtest.Step{Content: "You picked cat.png; 6*7 is 42."}
		},
		plain: func(int, map[string]any) llmtest.Step { return llmtest.Step{Content: "You picked cat.png."} },
	})
	s := startClientStack(t, model, pickFile(120000), "calculator", "pick_file")
	s.say("c1", "m1", "Pick a picture and compute 6*7.")

	chat := s.chat("c1")
	task, agent := chat+"/tasks/m1-t0", chat+"/sub-agents/m1-t0"
	pick, calc := agent+"/tool-calls/call_pick", agent+"/tool-calls/call_calc"
	s.waitFor("the server call's result and the client call pending", 15*time.Second, func() bool {
		return field(s.get(calc), "status") == "success" && s.toolMsgCount("c1", "m1-t0", "call_calc") == 1 &&
			field(s.get(task), "status") == "waiting_tool"
	})
	tc := s.get(pick)
	if field(tc, "status") != "pending" || field(tc, "executionType") != "client" || field(tc, "toolName") != "pick_file" {
		t.Fatalf("client call %v", tc.Data)
	}
	if until := numField(tc, "waitUntil"); until < tc.CreatedAt+100_000 || until > tc.CreatedAt+120_000 {
		t.Fatalf("waitUntil %d, created %d, timeout 120 s", until, tc.CreatedAt)
	}
	if st := field(s.get(agent), "status"); st != "waiting" {
		t.Fatalf("sub-agent status %q, want waiting", st)
	}
	// The app finds the pending client calls of its user with a query.
	code, res := s.do("POST", "/api/v1/databases/default/query", s.token, `{"collection":"users/`+s.user+`/orch-chats/*/sub-agents/*/tool-calls",`+
		`"filters":[{"field":"status","op":"==","value":"pending"},{"field":"executionType","op":"==","value":"client"}]}`)
	if docs, _ := res["docs"].([]any); code != 200 || len(docs) != 1 {
		t.Fatalf("query for pending client calls: %d %v", code, res)
	}
	// Nothing runs it meanwhile: no tool message, no further model step.
	time.Sleep(300 * time.Millisecond)
	if n := s.toolMsgCount("c1", "m1-t0", "call_pick"); n != 0 || len(fake.reqs("sub")) != 1 || field(s.get(pick), "status") != "pending" {
		t.Fatalf("client call answered by the server (%d tool messages, %d model steps)\n%s", n, len(fake.reqs("sub")), s.dump())
	}

	// Writes that must be refused, each leaving every document as it was.
	bob := s.node.SignUp(t, "bob")
	before := s.agentDocs()
	for _, w := range []struct{ name, path, token, doc string }{
		{"another user", pick, bob.Token, `{"status":"success","result":"x"}`},
		{"anonymous", pick, "", `{"status":"success","result":"x"}`},
		{"a sealed field too", pick, s.token, `{"status":"success","result":"x","toolName":"calculator"}`},
		{"the arguments too", pick, s.token, `{"status":"success","result":"x","argsJson":"{}"}`},
		{"a new field", pick, s.token, `{"status":"success","result":"x","durationMs":1}`},
		{"a field removed", pick, s.token, `{"status":"success","result":"x","visibility":null}`},
		{"its deadline", pick, s.token, `{"waitUntil":1}`},
		{"executionType", pick, s.token, `{"status":"success","executionType":"builtin"}`},
		{"status canceled", pick, s.token, `{"status":"canceled"}`},
		{"status running", pick, s.token, `{"status":"running","result":"x"}`},
		{"a result without a status", pick, s.token, `{"result":"x"}`},
		{"failed without an error", pick, s.token, `{"status":"failed"}`},
		{"failed with a non-text error", pick, s.token, `{"status":"failed","error":{"code":1}}`},
		{"failed with a result", pick, s.token, `{"status":"failed","error":"e","result":"x"}`},
		{"success with an error", pick, s.token, `{"status":"success","result":"x","error":"e"}`},
		{"a server call, finished", calc, s.token, `{"status":"success","result":"43"}`},
		{"a server call made client", calc, s.token, `{"executionType":"client","status":"failed","error":"e"}`},
		{"the task", task, s.token, `{"status":"running"}`},
	} {
		if code := s.patchAs(w.path, w.token, w.doc); code != 403 && code != 401 {
			t.Errorf("%s: PATCH answered %d, want 403", w.name, code)
		}
	}
	for _, w := range []struct{ name, method, path, token, body string }{
		{"replace", "PUT", pick, s.token, `{"doc":{"status":"success","result":"x"}}`},
		{"delete", "DELETE", pick, s.token, ``},
		{"create a call", "PUT", agent + "/tool-calls/forged", s.token, `{"doc":{"executionType":"client","status":"pending","toolName":"pick_file"}}`},
	} {
		if code, _ := s.do(w.method, "/api/v1/databases/default/documents/"+w.path, w.token, w.body); code != 403 {
			t.Errorf("%s: %s answered %d, want 403", w.name, w.method, code)
		}
	}
	s.wantAgentDocs(before, "after refused writes")

	// The owner's app writes the result.
	if code := s.patchAs(pick, s.token, `{"status":"success","result":{"file":"cat.png","size":1234}}`); code != 200 {
		t.Fatalf("owner's result: %d", code)
	}
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d model steps, want 2\n%s", len(subs), s.dump())
	}
	if got, ok := toolResultIn(subs[1], "call_pick"); !ok || got != `{"file":"cat.png","size":1234}` {
		t.Fatalf("the model saw %q (%v) for the client call", got, ok)
	}
	if got, _ := toolResultIn(subs[1], "call_calc"); !strings.Contains(got, "42") {
		t.Fatalf("the model saw %q for the server call", got)
	}
	if st := field(s.get(task), "status"); st != "success" || field(s.get(agent), "status") != "completed" {
		t.Fatalf("task %q, sub-agent %q", st, field(s.get(agent), "status"))
	}
	if m := s.get(chat + "/messages/m1-t0-result"); field(m, "content") != "You picked cat.png." {
		t.Fatalf("chat result %v", m)
	}
	if m := s.get(chat + "/messages/tool-m1-t0-call_pick"); !strings.Contains(field(m, "content"), "pick_file") || !strings.Contains(field(m, "content"), "cat.png") {
		t.Fatalf("chat mirror %v", m)
	}

	// A finished call is not the owner's to write any more.
	if code := s.patchAs(pick, s.token, `{"status":"failed","error":"late"}`); code != 403 {
		t.Fatalf("a second outcome: %d, want 403", code)
	}
	// A redelivered result event (and a replayed create) writes nothing.
	s.waitFor("the pipeline to settle", 10*time.Second, func() bool { return s.toolMsgCount("c1", "m1-t0", "call_pick") == 1 })
	time.Sleep(200 * time.Millisecond)
	before = s.agentDocs()
	done := s.get(pick)
	for i, typ := range []string{"update", "update", "create"} {
		if code := s.postSigned("tool-runner", "evt-redeliver-"+typ+string(rune('a'+i)), typ, done); code != 200 {
			t.Fatalf("redelivery %s: %d", typ, code)
		}
	}
	s.wantAgentDocs(before, "after redelivering the result")
	if n := s.toolMsgCount("c1", "m1-t0", "call_pick"); n != 1 || len(fake.reqs("sub")) != 2 {
		t.Fatalf("%d tool messages, %d model steps after redelivery", n, len(fake.reqs("sub")))
	}
}

// Two client calls in one step: the loop waits for both. A large result is
// cut for the model (the document keeps it); a failure reaches the model as
// "error: …".
func TestClientTool_TwoCalls_OversizedAndFailed(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{
					call("call_a", "pick_file", `{"accept":"text/*"}`),
					call("call_b", "pick_file", `{"accept":"image/*"}`),
				}}
			}
			return llmtest.Step{Content: "Got the text; no picture."}
		},
	})
	s := startClientStack(t, model, pickFile(0), "pick_file")
	s.say("c1", "m1", "Pick a text and a picture.")
	chat := s.chat("c1")
	task, agent := chat+"/tasks/m1-t0", chat+"/sub-agents/m1-t0"
	a, b := agent+"/tool-calls/call_a", agent+"/tool-calls/call_b"
	s.waitFor("both client calls pending", 15*time.Second, func() bool {
		return field(s.get(a), "status") == "pending" && field(s.get(b), "status") == "pending" && field(s.get(task), "status") == "waiting_tool"
	})
	// The default timeout: 10 minutes.
	if tc := s.get(a); numField(tc, "waitUntil") < tc.CreatedAt+9*60_000 {
		t.Fatalf("waitUntil %d, created %d", numField(tc, "waitUntil"), tc.CreatedAt)
	}

	big := strings.Repeat("é", 30_000) // 60,000 bytes of text
	body, _ := json.Marshal(map[string]any{"status": "success", "result": map[string]any{"text": big}})
	if code := s.patchAs(a, s.token, string(body)); code != 200 {
		t.Fatalf("result a: %d", code)
	}
	s.waitFor("a's tool message", 10*time.Second, func() bool { return s.toolMsgCount("c1", "m1-t0", "call_a") == 1 })
	time.Sleep(300 * time.Millisecond)
	if len(fake.reqs("sub")) != 1 || field(s.get(task), "status") != "waiting_tool" || field(s.get(agent), "status") != "waiting" {
		t.Fatalf("the loop went on with a client call pending\n%s", s.dump())
	}
	if code := s.patchAs(b, s.token, `{"status":"failed","error":"the user closed the dialog"}`); code != 200 {
		t.Fatalf("result b: %d", code)
	}
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d model steps, want 2", len(subs))
	}
	gotA, _ := toolResultIn(subs[1], "call_a")
	if !strings.HasSuffix(gotA, "…(truncated)") || len(gotA) > 16<<10+len("…(truncated)") || len(gotA) < 16<<10-4 ||
		!strings.HasPrefix(gotA, `{"text":"éé`) || !json.Valid([]byte(`"`+strings.TrimPrefix(gotA, `{"text":"`)[:100]+`"`)) {
		t.Fatalf("the model saw %d bytes for the large result: %.80q … %q", len(gotA), gotA, gotA[max(0, len(gotA)-20):])
	}
	if m, ok := s.get(a).Data["result"].(map[string]any); !ok || m["text"] != big {
		t.Fatal("the document lost the client's result")
	}
	if gotB, _ := toolResultIn(subs[1], "call_b"); gotB != "error: the user closed the dialog" {
		t.Fatalf("the model saw %q for the failed call", gotB)
	}
	if field(s.get(task), "status") != "success" {
		t.Fatalf("task %v", s.get(task).Data)
	}
}

// A client call the server would refuse fails at once, and the model sees
// why: arguments against the tool's schema, a tool the role does not offer.
// The task does not stay waiting for the client.
func TestClientTool_BadCallsFailAtOnce(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_bad", "pick_file", `{"accept":3}`)}}
			}
			return llmtest.Step{Content: "I could not pick a file."}
		},
	})
	s := startClientStack(t, model, pickFile(60000), "pick_file")
	s.say("c1", "m1", "Pick a file.")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	tc := s.get(s.chat("c1") + "/sub-agents/m1-t0/tool-calls/call_bad")
	if field(tc, "status") != "failed" || !strings.Contains(field(tc, "error"), "invalid tool arguments") {
		t.Fatalf("call %v", tc.Data)
	}
	if got, _ := toolResultIn(fake.reqs("sub")[1], "call_bad"); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, `"/accept"`) {
		t.Fatalf("the model saw %q", got)
	}

	// Not in the role: refused, the model hears it.
	fake2, model2 := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_x", "pick_file", `{"accept":"a"}`)}}
			}
			return llmtest.Step{Content: "No file."}
		},
	})
	s2 := startClientStack(t, model2, pickFile(60000), "calculator")
	s2.say("c1", "m1", "Pick a file.")
	s2.waitFor("the chat result", 15*time.Second, s2.taskDone("c1", "m1-t0"))
	if got, _ := toolResultIn(fake2.reqs("sub")[1], "call_x"); !strings.Contains(got, "not available to the researcher role") {
		t.Fatalf("the model saw %q", got)
	}
	if st := field(s2.get(s2.chat("c1")+"/tasks/m1-t0"), "status"); st != "success" {
		t.Fatalf("task %q", st)
	}
}

// A result for a call whose task has ended is discarded: no tool message,
// no model step, the task as it was.
func TestClientTool_ResultAfterTaskEnded(t *testing.T) {
	fake, s, task, pick := pendingPick(t)
	// The task ends meanwhile (as a cancel or a budget stop would end it),
	// and the result comes with it, before finalize settled the end (which
	// cancels the pending call: a result after that is refused). One
	// commit, by the admin.
	body := `{"writes":[{"type":"update","path":"` + task + `","data":{"status":"failed","error":"stopped"}},` +
		`{"type":"update","path":"` + pick + `","data":{"status":"success","result":"late"}}]}`
	if code, res := s.do("POST", "/api/v1/databases/default/batch", adminKey, body); code != 200 {
		t.Fatalf("ending the task with the result: %d %v", code, res)
	}
	s.waitFor("the failure in the chat", 10*time.Second, s.taskDone("c1", "m1-t0"))
	s.waitFor("the result's delivery", 10*time.Second, func() bool {
		for _, d := range s.allDeliveries() {
			if d.TriggerID == "on-client-tool-result" && d.Status != "pending" {
				return true
			}
		}
		return false
	})
	if n := s.toolMsgCount("c1", "m1-t0", "call_pick"); n != 0 || len(fake.reqs("sub")) != 1 || field(s.get(task), "status") != "failed" {
		t.Fatalf("%d tool messages, %d model steps, task %v", n, len(fake.reqs("sub")), s.get(task).Data)
	}
	if s.get(s.chat("c1")+"/messages/tool-m1-t0-call_pick") != nil {
		t.Fatal("the discarded result was mirrored")
	}
}

// A client call nobody answers times out at its waitUntil (a scheduled
// delivery): it fails with a timeout the model sees, once, and the owner
// can no longer answer it. A result that comes first stands: the timeout's
// delivery then changes nothing.
func TestClientTool_Timeout(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			for _, m := range reqMessages(req) {
				if m["role"] == "tool" {
					return llmtest.Step{Content: "Done: " + msgText(m)}
				}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_pick", "pick_file", `{"accept":"a"}`)}}
		},
		plain: func(_ int, req map[string]any) llmtest.Step { return llmtest.Step{Content: "ok"} },
	})
	// Longer than the 2 s a delivery may come early (clientSkew): only the
	// scheduled delivery can time the call out.
	s := startClientStack(t, model, pickFile(2500), "pick_file")
	s.say("c1", "m1", "Pick a file (nobody will).")
	s.say("c2", "m2", "Pick a file (the app answers).")
	pick1 := s.chat("c1") + "/sub-agents/m1-t0/tool-calls/call_pick"
	pick2 := s.chat("c2") + "/sub-agents/m2-t0/tool-calls/call_pick"
	s.waitFor("c2's client call", 15*time.Second, func() bool { return field(s.get(pick2), "status") == "pending" })
	if code := s.patchAs(pick2, s.token, `{"status":"success","result":"in time"}`); code != 200 {
		t.Fatalf("result: %d", code)
	}
	s.waitFor("both tasks", 20*time.Second, func() bool { return s.taskDone("c1", "m1-t0")() && s.taskDone("c2", "m2-t0")() })

	tc := s.get(pick1)
	want := "timeout: the client did not return a result within 2500 milliseconds"
	if field(tc, "status") != "failed" || field(tc, "error") != want {
		t.Fatalf("timed-out call %v", tc.Data)
	}
	// The call times out at its waitUntil (docs/agent-runs.md), which the
	// runtime sets to now + 2500 ms just before it creates the call: at
	// most 2500 ms after CreatedAt, less by the create's latency. Measured
	// from CreatedAt, the timeout could look a few ms early (it did, under
	// -race); it must never come before waitUntil.
	wu := numField(tc, "waitUntil")
	if wu > tc.CreatedAt+2500 || wu < tc.CreatedAt+1500 {
		t.Fatalf("waitUntil %d is %d ms after the call's creation, want just under 2500", wu, wu-tc.CreatedAt)
	}
	if tc.UpdatedAt < wu {
		t.Fatalf("timed out at %d, %d ms before its waitUntil", tc.UpdatedAt, wu-tc.UpdatedAt)
	}
	if code := s.patchAs(pick1, s.token, `{"status":"success","result":"too late"}`); code != 403 {
		t.Fatalf("a result after the timeout: %d, want 403", code)
	}
	if tc := s.get(pick2); field(tc, "status") != "success" || tc.Data["result"] != "in time" {
		t.Fatalf("answered call %v", tc.Data)
	}
	var sawTimeout, sawResult bool
	for _, req := range fake.reqs("sub") {
		if got, ok := toolResultIn(req, "call_pick"); ok {
			sawTimeout = sawTimeout || got == "error: "+want
			sawResult = sawResult || got == `"in time"`
		}
	}
	if !sawTimeout || !sawResult {
		t.Fatalf("the model saw the timeout: %v, the result: %v", sawTimeout, sawResult)
	}
	if st := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status"); st != "success" {
		t.Fatalf("task after the timeout %q", st)
	}
	// Both scheduled deliveries were made; the one for the answered call
	// changed nothing, and neither wrote a second tool message.
	s.waitFor("the timeout deliveries", 15*time.Second, func() bool {
		n := 0
		for _, d := range s.allDeliveries() {
			if d.TriggerID == "on-client-tool-timeout" && d.Status == "delivered" {
				n++
			}
		}
		return n == 2
	})
	if s.toolMsgCount("c1", "m1-t0", "call_pick") != 1 || s.toolMsgCount("c2", "m2-t0", "call_pick") != 1 || len(fake.reqs("sub")) != 4 {
		t.Fatalf("tool messages or steps written twice\n%s", s.dump())
	}
	// One timeout counted, for the call that timed out.
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	timeouts := -1.0
	for _, mf := range mfs {
		if mf.GetName() != "loom_agent_tool_runs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tool"] == "pick_file" && labels["outcome"] == "timeout" {
				timeouts = m.GetCounter().GetValue()
			}
		}
	}
	if timeouts != 1 {
		t.Fatalf("loom_agent_tool_runs_total{tool=pick_file,outcome=timeout} = %v, want 1", timeouts)
	}
	// A late redelivery of either timeout writes nothing.
	s.settle(10 * time.Second)
	before := s.agentDocs()
	for i, p := range []string{pick1, pick2} {
		if code := s.postSigned("tool-runner", "evt-timeout-again-"+string(rune('a'+i)), "create", s.get(p)); code != 200 {
			t.Fatalf("redelivery: %d", code)
		}
	}
	s.wantAgentDocs(before, "after redelivering the timeouts")
}

// The app's side, as docs/agent-runs.md describes it: a WebSocket
// subscription to the user's pending client calls sees the call arrive,
// the app writes the result, and the call leaves the subscription.
func TestClientTool_AppWatchesOverWebSocket(t *testing.T) {
	_, model := newFake(t, script{sub: func(n int, req map[string]any) llmtest.Step {
		if n == 0 {
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_pick", "pick_file", `{"accept":"image/*"}`)}}
		}
		return llmtest.Step{Content: "Thanks for the picture."}
	}})
	s := startClientStack(t, model, pickFile(60000), "pick_file")
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/realtime/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(m map[string]any) {
		if err := c.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}
	type delta struct {
		Type     string         `json:"type"`
		Path     string         `json:"path"`
		Document map[string]any `json:"document"`
	}
	read := func(want string) delta {
		for {
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, raw, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("waiting for %s: %v\n%s", want, err, s.dump())
			}
			var m struct {
				Type    string `json:"type"`
				Payload struct {
					Delta delta `json:"delta"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			switch {
			case m.Type == "error":
				t.Fatalf("server error: %s", raw)
			case m.Type == want && want == "subscribe_ack":
				return delta{}
			case m.Type == "event" && m.Payload.Delta.Type == want:
				return m.Payload.Delta
			}
		}
	}
	send(map[string]any{"id": "a", "type": "auth", "payload": map[string]any{"token": s.token}})
	send(map[string]any{"id": "calls", "type": "subscribe", "payload": map[string]any{"query": map[string]any{
		"collection": "users/" + s.user + "/orch-chats/*/sub-agents/*/tool-calls",
		"filters": []any{
			map[string]any{"field": "executionType", "op": "==", "value": "client"},
			map[string]any{"field": "status", "op": "==", "value": "pending"},
		},
	}}})
	read("subscribe_ack")
	// The same subscription over SSE, as the docs' curl opens it.
	filters := `[{"field":"executionType","op":"==","value":"client"},{"field":"status","op":"==","value":"pending"}]`
	sseReq, _ := http.NewRequest("GET", s.URL+"/realtime/sse?database=default&collection="+url.QueryEscape("users/"+s.user+"/orch-chats/*/sub-agents/*/tool-calls")+
		"&filters="+url.QueryEscape(filters)+"&access_token="+url.QueryEscape(s.token), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sse, err := s.node.Client.Do(sseReq.WithContext(ctx))
	if err != nil || sse.StatusCode != 200 {
		t.Fatalf("SSE: %v %v", err, sse)
	}
	defer sse.Body.Close()
	sseLines := bufio.NewScanner(sse.Body)
	sseLines.Buffer(nil, 1<<20)
	s.say("c1", "m1", "Send me a picture.")

	d := read("create")
	if d.Document["toolName"] != "pick_file" || d.Document["argsJson"] != `{"accept":"image/*"}` {
		t.Fatalf("pending call %v", d.Document)
	}
	sawSSE := false
	for !sawSSE && sseLines.Scan() {
		if line := sseLines.Text(); strings.HasPrefix(line, "data:") && strings.Contains(line, `"type":"create"`) {
			if !strings.Contains(line, `"toolName":"pick_file"`) {
				t.Fatalf("SSE event %s", line)
			}
			sawSSE = true
		}
	}
	if !sawSSE {
		t.Fatalf("SSE ended without the pending call: %v", sseLines.Err())
	}
	if code := s.patchAs(d.Path, s.token, `{"status":"success","result":{"file":"cat.png"}}`); code != 200 {
		t.Fatalf("result: %d", code)
	}
	if gone := read("delete"); gone.Path != d.Path {
		t.Fatalf("left the subscription: %s, want %s", gone.Path, d.Path)
	}
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
}

// The timeout is durable: a node stopped while a client call is pending,
// and restarted after its deadline, still times the call out, once.
func TestClientTool_TimeoutAfterRestart(t *testing.T) {
	fake, model := newFake(t, script{sub: func(n int, req map[string]any) llmtest.Step {
		if got, ok := toolResultIn(req, "call_pick"); ok {
			return llmtest.Step{Content: "Gave up: " + got}
		}
		return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_pick", "pick_file", `{"accept":"a"}`)}}
	}})
	dir := t.TempDir()
	opts := apptest.Options{Agents: true, Model: model, DataDir: dir, Config: func(c *config.Config) {
		c.Tools = append(c.Tools, pickFile(3000))
		c.Agents.Roles = map[string]config.AgentRole{"researcher": {Tools: []string{"pick_file"}}}
	}}
	node := apptest.Start(t, opts)
	s := &stack{t: t, node: node, store: node.Store, trig: node.Triggers, URL: node.URL, reg: node.Registry}
	s.signup("alice")
	s.say("c1", "m1", "Pick a file.")
	pick := s.chat("c1") + "/sub-agents/m1-t0/tool-calls/call_pick"
	s.waitFor("the pending client call", 15*time.Second, func() bool { return field(s.get(pick), "status") == "pending" })
	until := time.UnixMilli(numField(s.get(pick), "waitUntil"))
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(until) + 100*time.Millisecond) // due while the node is down

	node = apptest.Start(t, opts)
	s = &stack{t: t, node: node, store: node.Store, trig: node.Triggers, URL: node.URL, reg: node.Registry, user: s.user, token: s.token}
	s.waitFor("the task after the restart", 15*time.Second, s.taskDone("c1", "m1-t0"))
	if tc := s.get(pick); field(tc, "status") != "failed" || !strings.HasPrefix(field(tc, "error"), "timeout: ") {
		t.Fatalf("call %v", tc.Data)
	}
	subs := fake.reqs("sub")
	if got, _ := toolResultIn(subs[len(subs)-1], "call_pick"); got != "error: timeout: the client did not return a result within 3 seconds" {
		t.Fatalf("the model saw %q", got)
	}
	s.settle(10 * time.Second)
	n := 0
	for _, d := range s.allDeliveries() {
		if d.TriggerID == "on-client-tool-timeout" {
			n++
			if d.Status != "delivered" {
				t.Errorf("timeout delivery %s", d.Status)
			}
		}
	}
	if n != 1 || s.toolMsgCount("c1", "m1-t0", "call_pick") != 1 || len(subs) != 2 {
		t.Fatalf("%d timeout deliveries, %d tool messages, %d model steps", n, s.toolMsgCount("c1", "m1-t0", "call_pick"), len(subs))
	}
}
