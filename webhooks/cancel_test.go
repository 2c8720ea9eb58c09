package webhooks_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// patch PATCHes a document as the given user (over REST, subject to the
// security rules) and returns the status.
func (s *stack) patch(path, token string, doc map[string]any) int {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"doc": doc})
	code, _ := s.do("PATCH", "/api/v1/databases/default/documents/"+path, token, string(body))
	return code
}

// slowServer is an HTTP server whose every request blocks until release
// is called (or 10s pass).
func slowServer(t *testing.T) (url string, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprint(w, "slow page")
	}))
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before srv.Close: cleanups run last-in first-out
	return srv.URL, release
}

// toolMessages returns a sub-agent's tool messages.
func (s *stack) toolMessages(chatID, sa string) []*collections.Document {
	var out []*collections.Document
	for _, d := range s.docs(s.chat(chatID) + "/sub-agents/" + sa + "/messages") {
		if field(d, "role") == "tool" {
			out = append(out, d)
		}
	}
	return out
}

// canceledNotice waits (bounded) for a task's cancel notice in the chat and
// returns it.
func (s *stack) canceledNotice(chatID, taskID string) *collections.Document {
	s.t.Helper()
	path := s.chat(chatID) + "/messages/" + taskID + "-result"
	s.waitFor("the cancel notice of "+taskID, 15*time.Second, func() bool { return s.get(path) != nil })
	return s.get(path)
}

// The user cancels a task while its tool runs: the call becomes canceled,
// the tool's result is discarded (no tool message, no mirror in the chat),
// the model is not asked again, and the chat gets a notice.
func TestAgents_CancelDuringASlowTool(t *testing.T) {
	url, release := slowServer(t)
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step {
			return delegate("researcher", "Look up the slow page and report on it carefully please.")
		},
		sub: func(n int, _ map[string]any) llmtest.Step {
			if n > 0 {
				t.Errorf("sub-agent request #%d after the cancel", n+1)
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_get", "http_get", fmt.Sprintf(`{"url":%q}`, url))}}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Read the slow page")
	task := s.chat("c1") + "/tasks/m1-t0"
	sub := s.chat("c1") + "/sub-agents/m1-t0"
	s.waitFor("the slow call", 15*time.Second, func() bool {
		return field(s.get(sub+"/tool-calls/call_get"), "status") == "pending" && field(s.get(task), "status") == "running"
	})
	if st := field(s.get(s.chat("c1")), "runStatus"); st != "running" {
		t.Fatalf("chat runStatus %q while the task runs\n%s", st, s.dump())
	}
	if code := s.patch(task, s.token, map[string]any{"status": "canceled"}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	notice := s.canceledNotice("c1", "m1-t0")
	release()
	s.settle(10 * time.Second)

	if field(notice, "kind") != "notice" || field(notice, "status") != "canceled" || field(notice, "role") != "assistant" ||
		field(notice, "content") != "Canceled: agent:researcher — Look up the slow page and report on…" {
		t.Fatalf("notice %v", notice.Data)
	}
	if tk := s.get(task); field(tk, "status") != "canceled" || field(tk, "canceledBy") != "user" {
		t.Fatalf("task %v", tk.Data)
	}
	if st := field(s.get(sub), "status"); st != "canceled" {
		t.Fatalf("sub-agent status %q", st)
	}
	if st := field(s.get(sub+"/tool-calls/call_get"), "status"); st != "canceled" {
		t.Fatalf("tool call status %q\n%s", st, s.dump())
	}
	if ms := s.toolMessages("c1", "m1-t0"); len(ms) != 0 {
		t.Fatalf("tool messages after the cancel\n%s", s.dump())
	}
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		if field(d, "kind") == "tool" {
			t.Fatalf("the discarded result reached the chat: %v", d.Data)
		}
	}
	if n := len(fake.reqs("sub")); n != 1 {
		t.Fatalf("%d sub-agent requests, want 1", n)
	}
	if n := len(fake.reqs("plain")); n != 0 {
		t.Fatalf("%d summary requests for a canceled task", n)
	}
	if st := field(s.get(s.chat("c1")), "runStatus"); st != "idle" {
		t.Fatalf("chat runStatus %q after the cancel\n%s", st, s.dump())
	}
	s.noRetries()

	// Redelivered, the settlement and the canceled call write nothing.
	before, nreq := s.agentDocs(), len(fake.Requests())
	for i := range 2 {
		if code := s.postSigned("orchestrator-finalize", fmt.Sprint("evt_fin_", i), "update", s.get(task)); code != 200 {
			t.Fatalf("finalize again: %d", code)
		}
		if code := s.postSigned("tool-runner", fmt.Sprint("evt_tool_", i), "create", s.get(sub+"/tool-calls/call_get")); code != 200 {
			t.Fatalf("tool-runner again: %d", code)
		}
	}
	s.settle(10 * time.Second)
	s.wantAgentDocs(before, "after the redeliveries")
	if n := len(fake.Requests()); n != nreq {
		t.Fatalf("%d LLM requests after the redeliveries, %d before", n, nreq)
	}
}

// The user cancels a task that waits for their answer: on_session_end
// runs with the status canceled, the sub-agent is canceled, a later
// message is not routed to it (the orchestrator answers it), and a
// canceled task cannot be canceled again.
func TestAgents_CancelWhileWaitingForTheUser(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n == 0 {
				return delegate("general", "Tell the weather.")
			}
			return llmtest.Step{Content: "Fine, never mind."}
		},
		sub: toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "Sunny in Paris."),
	})
	dir := ruleFiles(t, map[string]string{"ended": rule("ended", "on_session_end", "true", `type = "notify_self"
message = "Task {{ context.event.task_id }} ended: {{ context.event.status }} ({{ context.event.error }})"`)})
	s := startStack(t, stackOpts{model: model, rulesDir: dir})
	s.say("c1", "m1", "What's the weather?")
	task := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the task waiting", 15*time.Second, func() bool { return field(s.get(task), "status") == "waiting" })
	waiting := s.get(task)
	question := s.chat("c1") + "/messages/" + field(waiting, "waitId") + "-q"
	s.waitFor("the question", 15*time.Second, func() bool { return s.get(question) != nil })
	if code := s.patch(task, s.token, map[string]any{"status": "canceled"}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	notice := s.canceledNotice("c1", "m1-t0")
	if field(notice, "content") != "Canceled: agent:general — Tell the weather." {
		t.Fatalf("notice %v", notice.Data)
	}
	// orchestrator-notify delivered late (after the cancel) asks nothing.
	if code, _ := s.do("DELETE", "/api/v1/databases/default/documents/"+question, adminKey, ""); code != 200 && code != 204 {
		t.Fatalf("delete the question: %d", code)
	}
	if code := s.postSigned("orchestrator-notify", "evt_late_question", "update", waiting); code != 200 {
		t.Fatalf("late notify: %d", code)
	}
	if s.get(question) != nil {
		t.Fatalf("a question for a canceled task\n%s", s.dump())
	}
	s.waitFor("the sub-agent canceled", 15*time.Second, func() bool {
		return field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "status") == "canceled"
	})
	s.say("c1", "m2", "Paris")
	s.waitFor("the orchestrator's reply", 15*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m2-reply") != nil })
	s.settle(10 * time.Second)

	if n := len(fake.reqs("sub")); n != 1 {
		t.Fatalf("%d sub-agent requests, want 1", n)
	}
	if orch := fake.reqs("orch"); len(orch) != 2 || !reqContains(orch[1], "Task m1-t0 ended: canceled (canceled)") {
		t.Fatalf("the next decision lacks the session-end notification\n%s", s.dump())
	}
	for _, d := range s.docs(s.chat("c1") + "/sub-agents/m1-t0/messages") {
		if field(d, "content") == "Paris" {
			t.Fatalf("the message was routed to the canceled task\n%s", s.dump())
		}
	}
	if field(s.get(task), "status") != "canceled" || field(s.get(task), "answerMessageId") != "" {
		t.Fatal(s.dump())
	}
	before := s.agentDocs()
	if code := s.patch(task, s.token, map[string]any{"status": "canceled"}); code != 403 {
		t.Fatalf("cancel of a canceled task: %d", code)
	}
	s.wantAgentDocs(before, "after the refused cancel")
	s.noRetries()
}

// The user cancels the chat's whole run: both running tasks are canceled
// (canceledBy "chat"), the chat records canceledThrough, a message from
// before the cancel starts nothing, and a message after it runs.
func TestAgents_CancelTheChatRun(t *testing.T) {
	url, release := slowServer(t)
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n > 1 {
				t.Errorf("orchestrator request #%d", n+1)
			}
			if n == 1 {
				return delegate("general", "Compute 6*7.")
			}
			a, _ := json.Marshal(map[string]any{"agent": "researcher", "instruction": "SLOW one"})
			b, _ := json.Marshal(map[string]any{"agent": "researcher", "instruction": "SLOW two"})
			return llmtest.Step{Content: "Two at once.", ToolCalls: []llm.ToolCall{
				{ID: "call_a", Name: "delegate_task", Arguments: string(a)},
				{ID: "call_b", Name: "delegate_task", Arguments: string(b)},
			}}
		},
		sub: func(_ int, req map[string]any) llmtest.Step {
			if reqContains(req, "SLOW") {
				if reqContains(req, "slow page") {
					t.Errorf("a canceled task's step after its tool ran")
				}
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_get", "http_get", fmt.Sprintf(`{"url":%q}`, url))}}
			}
			return llmtest.Step{Content: "The answer is 42."}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Two slow things")
	for _, id := range []string{"m1-t0", "m1-t1"} {
		s.waitFor("the slow call of "+id, 15*time.Second, func() bool {
			return field(s.get(s.chat("c1")+"/sub-agents/"+id+"/tool-calls/call_get"), "status") == "pending"
		})
	}
	if code := s.patch(s.chat("c1"), s.token, map[string]any{"runStatus": "canceled"}); code != 200 {
		t.Fatalf("cancel the chat: %d", code)
	}
	for _, id := range []string{"m1-t0", "m1-t1"} {
		n := s.canceledNotice("c1", id)
		if !strings.HasSuffix(field(n, "content"), "(the chat's run was canceled)") {
			t.Fatalf("notice %v", n.Data)
		}
	}
	release()
	s.waitFor("canceledThrough", 15*time.Second, func() bool { return numField(s.get(s.chat("c1")), "canceledThrough") > 0 })
	s.settle(10 * time.Second)
	chatDoc := s.get(s.chat("c1"))
	through := numField(chatDoc, "canceledThrough")
	if field(chatDoc, "runStatus") != "idle" {
		t.Fatalf("chat %v", chatDoc.Data)
	}
	for _, id := range []string{"m1-t0", "m1-t1"} {
		tk := s.get(s.chat("c1") + "/tasks/" + id)
		if field(tk, "status") != "canceled" || field(tk, "canceledBy") != "chat" {
			t.Fatalf("task %s %v", id, tk.Data)
		}
		if st := field(s.get(s.chat("c1")+"/sub-agents/"+id+"/tool-calls/call_get"), "status"); st != "canceled" {
			t.Fatalf("tool call of %s: %s", id, st)
		}
		if len(s.toolMessages("c1", id)) != 0 {
			t.Fatalf("tool message of %s\n%s", id, s.dump())
		}
	}

	// A user message created at the cancel (a delivery that comes late)
	// starts nothing: no decision, no reply, no task.
	nreq := len(fake.Requests())
	old := &collections.Document{ID: "m0", Collection: s.chat("c1") + "/messages", Path: s.chat("c1") + "/messages/m0",
		Version: 1, CreatedAt: through, UpdatedAt: through, Data: map[string]any{"role": "user", "content": "late", "userId": s.user, "chatId": "c1"}}
	if code := s.postSigned("orchestrator", "evt_late", "create", old); code != 200 {
		t.Fatalf("late message: %d", code)
	}
	if n := len(fake.Requests()); n != nreq || s.get(s.chat("c1")+"/messages/m0-reply") != nil {
		t.Fatalf("a message from before the cancel was decided on\n%s", s.dump())
	}

	// A new message runs normally.
	s.say("c1", "m2", "What is 6*7?")
	s.waitFor("the new run's result", 15*time.Second, s.taskDone("c1", "m2-t0"))
	s.settle(10 * time.Second)
	if field(s.get(s.chat("c1")+"/tasks/m2-t0"), "status") != "success" || field(s.get(s.chat("c1")), "runStatus") != "idle" {
		t.Fatal(s.dump())
	}
	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2", n)
	}
	s.noRetries()
}

// A user may move their task only to canceled, from an unfinished status,
// and change nothing else; another user nothing at all. Each refused write
// is a 403 and leaves every document as it was.
func TestAgents_UserTaskWritesAreBounded(t *testing.T) {
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Tell the weather.") },
		sub:  toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "Sunny in Paris."),
	})
	s := startStack(t, stackOpts{model: model})
	alice := s.token
	s.say("c1", "m1", "What's the weather?")
	task := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the task waiting", 15*time.Second, func() bool { return field(s.get(task), "status") == "waiting" })
	s.settle(10 * time.Second)
	chatPath := s.chat("c1")
	code, m := s.do("POST", "/auth/v1/signup", "", `{"username":"bob","password":"correct horse battery"}`)
	if code != 200 {
		t.Fatalf("signup: %d %v", code, m)
	}
	bob, _ := m["access_token"].(string)

	tests := []struct {
		name  string
		path  string
		token string
		doc   map[string]any
	}{
		{"another status", task, alice, map[string]any{"status": "success"}},
		{"failed", task, alice, map[string]any{"status": "failed", "error": "x"}},
		{"back to running", task, alice, map[string]any{"status": "running"}},
		{"cancel with a result", task, alice, map[string]any{"status": "canceled", "result": "forged"}},
		{"cancel naming who", task, alice, map[string]any{"status": "canceled", "canceledBy": "chat"}},
		{"the instruction", task, alice, map[string]any{"instruction": "do evil"}},
		{"remove a field", task, alice, map[string]any{"status": "canceled", "question": nil}},
		{"bob cancels", task, bob, map[string]any{"status": "canceled"}},
		{"chat runStatus idle", chatPath, alice, map[string]any{"runStatus": "idle"}},
		{"chat canceledThrough", chatPath, alice, map[string]any{"canceledThrough": 0}},
		{"bob cancels the chat", chatPath, bob, map[string]any{"runStatus": "canceled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.agentDocs()
			chatV := s.get(chatPath).Version
			if code := s.patch(tt.path, tt.token, tt.doc); code != 403 {
				t.Fatalf("PATCH %v: %d, want 403", tt.doc, code)
			}
			s.wantAgentDocs(before, "after the refused write")
			if v := s.get(chatPath).Version; v != chatV {
				t.Fatalf("chat document version %d → %d", chatV, v)
			}
		})
	}
	if field(s.get(task), "status") != "waiting" {
		t.Fatal(s.dump())
	}
}

// The user cancels a task while its model call is in flight: the answer
// is discarded (no step, no tool call is written) and its tokens still
// count in the user's usage.
func TestAgents_CancelDuringAModelCall(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, _ map[string]any) llmtest.Step {
			if n > 0 {
				t.Errorf("sub-agent request #%d after the cancel", n+1)
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_calc", "calculator", `{"expression":"6*7"}`)}, Delay: time.Second}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	task := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the model asked", 15*time.Second, func() bool { return len(fake.reqs("sub")) == 1 })
	if code := s.patch(task, s.token, map[string]any{"status": "canceled"}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	s.canceledNotice("c1", "m1-t0")
	s.settle(10 * time.Second)

	for _, d := range s.docs(s.chat("c1") + "/sub-agents/m1-t0/messages") {
		if field(d, "role") == "assistant" {
			t.Fatalf("the discarded step was written\n%s", s.dump())
		}
	}
	if n := len(s.docs(s.chat("c1") + "/sub-agents/m1-t0/tool-calls")); n != 0 {
		t.Fatalf("%d tool calls of a discarded step", n)
	}
	if st := field(s.get(task), "status"); st != "canceled" {
		t.Fatalf("task %s", st)
	}
	var tokens int64
	for _, d := range s.docs("users/" + s.user + "/agent-usage") {
		tokens += numField(d, "tokens")
	}
	if tokens != 2*15 { // the orchestrator's decision and the discarded step
		t.Fatalf("usage %d tokens, want 30", tokens)
	}
	s.noRetries()
}

// A message sent after a chat's cancel but handled before chat-cancel has
// recorded the cancel's time waits for that record (its delivery is
// retried) and then runs: the runtime's own writes of the chat document in
// between (the message's activity) must not make it pass for a message
// from before the cancel.
func TestAgents_MessageAfterAnUnsettledChatCancelRuns(t *testing.T) {
	fake, model := newFake(t, script{orch: func(int, map[string]any) llmtest.Step { return llmtest.Step{Content: "Hello."} }})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Hi")
	s.waitFor("the first reply", 15*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m1-reply") != nil })
	// The first message's turn ends with the chat document's write (its
	// tokens, after the reply): the cancel's snapshot below is taken after
	// it, so that its updatedAt is the cancel's time.
	s.waitFor("the first turn's chat write", 15*time.Second, func() bool { return field(s.get(s.chat("c1")), "lastModel") != "" })
	// chat-cancel must not run on its own: the test delivers it below.
	if code, res := s.do("POST", "/admin/v1/triggers/on-chat-cancel/disable", adminKey, ""); code != 200 {
		t.Fatalf("disable on-chat-cancel: %d %v", code, res)
	}
	if code := s.patch(s.chat("c1"), s.token, map[string]any{"runStatus": "canceled"}); code != 200 {
		t.Fatalf("cancel the chat: %d", code)
	}
	canceled := s.get(s.chat("c1"))
	s.say("c1", "m2", "Still there?")
	time.Sleep(time.Second)
	if s.get(s.chat("c1")+"/messages/m2-reply") != nil || len(fake.reqs("orch")) != 1 {
		t.Fatalf("decided before the cancel was settled\n%s", s.dump())
	}
	if code := s.postSigned("chat-cancel", "evt_cancel", "update", canceled); code != 200 {
		t.Fatalf("chat-cancel: %d", code)
	}
	s.waitFor("the reply after the cancel", 20*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m2-reply") != nil })
	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2", n)
	}
	if through := numField(s.get(s.chat("c1")), "canceledThrough"); through != canceled.UpdatedAt {
		t.Fatalf("canceledThrough %d, want the cancel's time %d", through, canceled.UpdatedAt)
	}
}
