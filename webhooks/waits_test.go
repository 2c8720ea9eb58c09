package webhooks_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// ---- helpers of the wait scenarios ----

// toolResult is the content of the request's tool message answering
// callID ("" when there is none).
func toolResult(req map[string]any, callID string) string {
	for _, m := range reqMessages(req) {
		if m["role"] == "tool" && m["tool_call_id"] == callID {
			return msgText(m)
		}
	}
	return ""
}

// hasTool reports whether the request offers the tool.
func hasTool(req map[string]any, name string) bool {
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		fn, _ := tm["function"].(map[string]any)
		if fn["name"] == name {
			return true
		}
	}
	return false
}

// sayWith writes a user message with extra fields (replyTo) as the user.
func (s *stack) sayWith(chatID, msgID string, doc map[string]any) (int, map[string]any) {
	s.t.Helper()
	doc["role"], doc["userId"], doc["chatId"] = "user", s.user, chatID
	body, _ := json.Marshal(map[string]any{"doc": doc})
	return s.do("PUT", "/api/v1/databases/default/documents/"+s.chat(chatID)+"/messages/"+msgID, s.token, string(body))
}

// answer answers the question message q (replyTo).
func (s *stack) answer(chatID, msgID, q, text string) {
	s.t.Helper()
	if code, m := s.sayWith(chatID, msgID, map[string]any{"content": text, "replyTo": q}); code != 201 {
		s.t.Fatalf("reply: %d %v", code, m)
	}
}

// questions are the chat's question messages by task id.
func (s *stack) questions(chatID string) map[string]*collections.Document {
	out := map[string]*collections.Document{}
	for _, d := range s.docs(s.chat(chatID) + "/messages") {
		if field(d, "kind") == "question" {
			out[field(d, "taskId")] = d
		}
	}
	return out
}

// subToolMessages are a sub-agent's stored tool messages answering callID.
func (s *stack) subToolMessages(chatID, sa, callID string) []*collections.Document {
	var out []*collections.Document
	for _, d := range s.docs(s.chat(chatID) + "/sub-agents/" + sa + "/messages") {
		if field(d, "role") == "tool" && field(d, "toolCallId") == callID {
			out = append(out, d)
		}
	}
	return out
}

func delegateBoth(a, b string) llmtest.Step {
	argsA, _ := json.Marshal(map[string]any{"agent": "general", "instruction": a})
	argsB, _ := json.Marshal(map[string]any{"agent": "general", "instruction": b})
	return llmtest.Step{Content: "On it.", ToolCalls: []llm.ToolCall{
		{ID: "call_a", Name: "delegate_task", Arguments: string(argsA)},
		{ID: "call_b", Name: "delegate_task", Arguments: string(argsB)},
	}}
}

// ---- scenarios ----

// Two tasks of one chat wait for the user at once. A message without
// replyTo is ambiguous: the orchestrator gets it, told which tasks wait,
// and routes it with answer_task. The other is answered with replyTo
// naming its question. Each task gets its own answer.
func TestWaits_TwoWaitingTasksAnsweredOutOfOrder(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return delegateBoth("Task A: ask which colour.", "Task B: ask which city.")
			}
			if !hasTool(req, "answer_task") || !reqContains(req, "taskId m1-t1") || !reqContains(req, "taskId m1-t0") {
				t.Errorf("the orchestrator was not told which tasks wait: %v", req)
			}
			return llmtest.Step{Content: "Passing that on.", ToolCalls: []llm.ToolCall{call("call_route", "answer_task", `{"taskId":"m1-t1"}`)}}
		},
		sub: func(_ int, req map[string]any) llmtest.Step {
			task := "A"
			if reqContains(req, "Task B") {
				task = "B"
			}
			if toolResult(req, "call_ask_"+task) == "" {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_ask_"+task, "ask_user", `{"question":"Question `+task+`?"}`)}}
			}
			return llmtest.Step{Content: task + " got: " + lastUserText(req)}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Do A and B")
	s.waitFor("two questions", 15*time.Second, func() bool { return len(s.questions("c1")) == 2 })
	qs := s.questions("c1")
	for _, id := range []string{"m1-t0", "m1-t1"} {
		q, task := qs[id], s.get(s.chat("c1")+"/tasks/"+id)
		if q == nil || field(q, "waitId") == "" || field(q, "waitId") != field(task, "waitId") || field(task, "status") != "waiting" {
			t.Fatalf("question of %s: %v, task %v", id, q, task.Data)
		}
		ws, _ := task.Data["waitState"].(map[string]any)
		if ws["messageId"] != q.ID || ws["toolCallId"] == "" || numField(task, "waitUntil") <= time.Now().UnixMilli() {
			t.Fatalf("task %s: %v", id, task.Data)
		}
	}

	// No replyTo, two tasks waiting: the orchestrator routes it to B.
	s.say("c1", "m2", "Lisbon")
	s.waitFor("task B done", 15*time.Second, s.taskDone("c1", "m1-t1"))
	// A's answer names A's question.
	s.answer("c1", "m3", qs["m1-t0"].ID, "Green")
	s.waitFor("task A done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	if r := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "result"); r != "A got: Green" {
		t.Fatalf("task A result %q\n%s", r, s.dump())
	}
	if r := field(s.get(s.chat("c1")+"/tasks/m1-t1"), "result"); r != "B got: Lisbon" {
		t.Fatalf("task B result %q\n%s", r, s.dump())
	}
	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2 (the replyTo answer is not planned)", n)
	}
	if s.get(s.chat("c1")+"/messages/m3-reply") != nil {
		t.Fatal("the replyTo answer got an orchestrator reply")
	}
	if n := len(s.docs(s.chat("c1") + "/tasks")); n != 2 {
		t.Fatalf("%d tasks\n%s", n, s.dump())
	}
	s.noRetries()
}

// A replyTo naming a question whose wait is over is a new message for the
// orchestrator; a replyTo that is not a string is refused by the rules.
func TestWaits_ReplyToAClosedWaitGoesToTheOrchestrator(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n == 0 {
				return delegate("general", "Ask the city.")
			}
			return llmtest.Step{Content: "Noted."}
		},
		sub: toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "Done."),
	})
	s := startStack(t, stackOpts{model: model})
	if code, _ := s.sayWith("c1", "bad", map[string]any{"content": "x", "replyTo": 7}); code != 403 {
		t.Fatalf("a numeric replyTo: %d, want 403", code)
	}
	s.say("c1", "m1", "Weather?")
	s.waitFor("the question", 15*time.Second, func() bool { return len(s.questions("c1")) == 1 })
	q := s.questions("c1")["m1-t0"]
	s.answer("c1", "m2", q.ID, "Paris")
	s.waitFor("the task done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.answer("c1", "m3", q.ID, "Rome, actually")
	s.waitFor("the orchestrator's reply", 15*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m3-reply") != nil })
	s.settle(10 * time.Second)
	if n := len(fake.reqs("sub")); n != 2 {
		t.Fatalf("%d sub-agent requests, want 2", n)
	}
	if a := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "answerMessageId"); a != "m2" {
		t.Fatalf("answerMessageId %q", a)
	}
}

// ask_user with a 3 s wait_timeout; the node stops before waitUntil and
// restarts after it: the scheduled delivery fires once on the new node,
// and the model sees the timeout as the ask_user result exactly once.
func TestWaits_TimeoutFiresAfterARestart(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Ask the city.") },
		sub:  toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "No answer; assuming Paris."),
	})
	o := stackOpts{model: model, waitTimeout: 3 * time.Second}
	s := startStack(t, o)
	s.say("c1", "m1", "Weather?")
	taskPath := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the task waiting", 15*time.Second, func() bool {
		return field(s.get(taskPath), "status") == "waiting" && len(s.questions("c1")) == 1
	})
	until := numField(s.get(taskPath), "waitUntil")
	if err := s.node.Stop(); err != nil {
		t.Fatal(err)
	}
	if time.Now().UnixMilli() >= until {
		t.Fatalf("the node took until past waitUntil to stop: the timeout may have fired before the restart")
	}
	time.Sleep(time.Until(time.UnixMilli(until)) + 300*time.Millisecond)

	o.dataDir = s.node.DataDir
	again := startNode(t, o)
	again.user, again.token = s.user, s.token
	again.waitFor("the task done after the timeout", 15*time.Second, again.taskDone("c1", "m1-t0"))
	again.settle(10 * time.Second)

	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests, want 2", len(subs))
	}
	got := toolResult(subs[1], "call_ask")
	if got != "timeout: no reply from user within 3s" {
		t.Fatalf("the resumed step's ask_user result %q", got)
	}
	if n := len(again.subToolMessages("c1", "m1-t0", "call_ask")); n != 1 {
		t.Fatalf("%d timeout tool messages\n%s", n, again.dump())
	}
	task := again.get(taskPath)
	ws, _ := task.Data["waitState"].(map[string]any)
	if field(task, "status") != "success" || ws["resolution"] != "timeout" || task.Data["waitUntil"] != nil {
		t.Fatalf("task %v", task.Data)
	}
	// A redelivery of the timeout changes nothing.
	before := again.agentDocs()
	for _, d := range again.allDeliveries() {
		if d.TriggerID == "on-wait-timeout" {
			if err := again.trig.Replay(t.Context(), d.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	again.settle(10 * time.Second)
	again.wantAgentDocs(before, "after replaying the timeout")
	if n := len(fake.reqs("sub")); n != 2 {
		t.Fatalf("%d sub-agent requests after the replay", n)
	}
}

// send_message to a role and the user, waiting: the child task's result
// and the user's replyTo answer both come back as the tool result; the
// child's answer goes to its parent, not the chat.
func TestWaits_SendMessageToARoleAndTheUser(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Plan the trip.") },
		sub: func(_ int, req map[string]any) llmtest.Step {
			if reqContains(req, "Message from the general agent") {
				return llmtest.Step{Content: "Researcher says: Lisbon is sunny."}
			}
			if r := toolResult(req, "call_send"); r != "" {
				return llmtest.Step{Content: "Plan: " + r}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_send", "send_message",
				`{"to":["researcher","user"],"text":"Where should we go?","wait":true}`)}}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Plan a trip")
	s.waitFor("the question", 15*time.Second, func() bool { return len(s.questions("c1")) == 1 })
	q := s.questions("c1")["m1-t0"]
	if to, _ := q.Data["to"].([]any); len(to) != 2 || field(q, "content") != "Where should we go?" {
		t.Fatalf("question %v", q.Data)
	}
	s.answer("c1", "m2", q.ID, "Somewhere warm")
	s.waitFor("the parent done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	result := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "result")
	if !strings.Contains(result, "- researcher (agent): Researcher says: Lisbon is sunny.") || !strings.Contains(result, "- user: Somewhere warm") {
		t.Fatalf("parent result %q\n%s", result, s.dump())
	}
	var child *collections.Document
	for _, d := range s.docs(s.chat("c1") + "/tasks") {
		if field(d, "parentTaskId") == "m1-t0" {
			child = d
		}
	}
	if child == nil || field(child, "status") != "success" || field(child, "name") != "agent:researcher" || field(child, "parentWaitId") != field(s.get(s.chat("c1")+"/tasks/m1-t0"), "waitId") {
		t.Fatalf("child task %v\n%s", child, s.dump())
	}
	if s.get(s.chat("c1")+"/messages/"+child.ID+"-result") != nil {
		t.Fatal("the child's answer went to the chat")
	}
	if n := len(fake.reqs("orch")); n != 1 {
		t.Fatalf("%d orchestrator requests", n)
	}
	// The resumed step saw the chat marked [SEEN]/[NEW].
	var resumed map[string]any
	for _, r := range fake.reqs("sub") {
		if toolResult(r, "call_send") != "" {
			resumed = r
		}
	}
	if !reqContains(resumed, "[SEEN] user: Plan a trip") || !reqContains(resumed, "[NEW] user: Somewhere warm") {
		t.Fatalf("the resumed step's chat block: %v", reqMessages(resumed))
	}
	if id := field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "lastProcessedMessageId"); id == "m1" || id == "" {
		t.Fatalf("lastProcessedMessageId %q after the resumed step", id)
	}
	s.noRetries()

	// Every delivery again (the reply, the child's end, the wait's
	// timeout, now past its wait): nothing is written twice, the model is
	// not asked again.
	before, nreq := s.agentDocs(), len(fake.Requests())
	for _, d := range s.allDeliveries() {
		if err := s.trig.Replay(t.Context(), d.ID); err != nil {
			t.Fatalf("replay %s: %v", d.ID, err)
		}
	}
	s.settle(15 * time.Second)
	s.wantAgentDocs(before, "after the replays")
	if n := len(fake.Requests()); n != nreq {
		t.Fatalf("%d LLM requests after the replays, %d before", n, nreq)
	}
}

// A wait for a role and the user where the role does not answer in time:
// the tool result has the user's reply and names who did not reply; the
// child, still at work, is canceled by the timeout (canceledBy parent), so
// its late answer is discarded and never reaches the chat.
func TestWaits_TimeoutWithAReplyMissing(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Plan the trip.") },
		sub: func(_ int, req map[string]any) llmtest.Step {
			// The resumed parent first: its [NEW] chat messages may quote
			// the child's instruction (the child's cancel notice).
			if r := toolResult(req, "call_send"); r != "" {
				return llmtest.Step{Content: "Plan: " + r}
			}
			if reqContains(req, "Message from the general agent") {
				return llmtest.Step{Content: "Too late.", Delay: 5 * time.Second}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_send", "send_message",
				`{"to":["researcher","user"],"text":"Where should we go?","wait":true}`)}}
		},
	})
	s := startStack(t, stackOpts{model: model, waitTimeout: 2500 * time.Millisecond})
	s.say("c1", "m1", "Plan a trip")
	s.waitFor("the question", 15*time.Second, func() bool { return len(s.questions("c1")) == 1 })
	s.answer("c1", "m2", s.questions("c1")["m1-t0"].ID, "Somewhere warm")
	s.waitFor("the parent done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	result := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "result")
	if !strings.HasPrefix(result, "Plan: timeout: no reply from researcher within 2.5s") || !strings.Contains(result, "- user: Somewhere warm") {
		t.Fatalf("parent result %q\n%s", result, s.dump())
	}
	var child string
	for _, d := range s.docs(s.chat("c1") + "/tasks") {
		if field(d, "parentTaskId") == "m1-t0" {
			child = d.ID
		}
	}
	if n := s.canceledNotice("c1", child); field(n, "kind") != "notice" || !strings.Contains(field(n, "content"), "(its parent task was canceled or stopped waiting for it)") {
		t.Fatalf("the child's message in the chat: %v", n.Data)
	}
	// The child's model call (5 s) ends after the timeout: its answer is
	// discarded.
	s.settle(15 * time.Second)
	ct := s.get(s.chat("c1") + "/tasks/" + child)
	if field(ct, "status") != "canceled" || field(ct, "canceledBy") != "parent" {
		t.Fatalf("child %v\n%s", ct.Data, s.dump())
	}
	if st := field(s.get(s.chat("c1")+"/sub-agents/"+child), "status"); st != "canceled" {
		t.Fatalf("child sub-agent %s", st)
	}
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		if strings.Contains(field(d, "content"), "Too late.") {
			t.Fatalf("the child's late answer reached the chat: %v", d.Data)
		}
	}
	for _, d := range s.docs(s.chat("c1") + "/sub-agents/" + child + "/messages") {
		if field(d, "role") == "assistant" {
			t.Fatalf("the child's late step was written: %v", d.Data)
		}
	}
	if n := len(fake.reqs("sub")); n != 3 {
		t.Fatalf("%d sub-agent requests, want 3", n)
	}
}

// send_message's limits: an unknown name, more agents than max_child_tasks,
// and a child task messaging an agent are tool errors the model sees;
// nothing is sent for them.
func TestWaits_SendMessageLimits(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Coordinate.") },
		sub: func(_ int, req map[string]any) llmtest.Step {
			if reqContains(req, "Message from the general agent") {
				if toolResult(req, "call_deep") == "" {
					return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_deep", "send_message", `{"to":["general"],"text":"Deeper?"}`)}}
				}
				return llmtest.Step{Content: "child: " + toolResult(req, "call_deep")}
			}
			if toolResult(req, "call_ok") != "" {
				return llmtest.Step{Content: "unknown=" + toolResult(req, "call_unknown") + " | many=" + toolResult(req, "call_many") + " | ok=" + toolResult(req, "call_ok")}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{
				call("call_unknown", "send_message", `{"to":["nobody"],"text":"Hi"}`),
				call("call_many", "send_message", `{"to":["researcher","general"],"text":"Hi"}`),
				call("call_ok", "send_message", `{"to":["researcher","user"],"text":"FYI"}`),
			}}
		},
	})
	s := startStack(t, stackOpts{model: model, maxChildTasks: 1})
	s.say("c1", "m1", "Coordinate")
	s.waitFor("the parent done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	var child string
	for _, d := range s.docs(s.chat("c1") + "/tasks") {
		if field(d, "parentTaskId") == "m1-t0" {
			if child != "" {
				t.Fatalf("two child tasks\n%s", s.dump())
			}
			child = d.ID
		}
	}
	if child == "" {
		t.Fatalf("no child task\n%s", s.dump())
	}
	s.waitFor("the child done", 15*time.Second, s.taskDone("c1", child))
	s.settle(10 * time.Second)
	result := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "result")
	for _, want := range []string{`unknown=error: unknown recipient "nobody"`, "many=error: at most 1 messages to agents per task; 0 sent already", "ok=sent to researcher, user"} {
		if !strings.Contains(result, want) {
			t.Errorf("parent result %q lacks %q", result, want)
		}
	}
	if r := field(s.get(s.chat("c1")+"/tasks/"+child), "result"); !strings.HasPrefix(r, "child: error: this task was started by another agent's message") {
		t.Fatalf("child result %q", r)
	}
	// The message to the user is in the chat; the child's answer too (its
	// parent did not wait for it).
	var sent bool
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		sent = sent || (field(d, "kind") == "message" && field(d, "content") == "FYI" && field(d, "taskId") == "m1-t0")
	}
	if !sent || s.get(s.chat("c1")+"/messages/"+child+"-result") == nil {
		t.Fatalf("chat messages\n%s", s.dump())
	}
	if n := len(s.docs(s.chat("c1") + "/tasks")); n != 2 {
		t.Fatalf("%d tasks", n)
	}
	_ = fake
	s.noRetries()
}

// The timeout handler acts only on the wait it was scheduled for, and only
// when it is due: delivered early it answers 5xx (the delivery is
// retried); for a wait that is not the task's it does nothing.
func TestWaits_TimeoutHandlerChecksTheWaitAndTheTime(t *testing.T) {
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Ask the city.") },
		sub:  toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "Done."),
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Weather?")
	taskPath := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the task waiting", 15*time.Second, func() bool { return len(s.questions("c1")) == 1 })
	s.settle(10 * time.Second)
	before := s.agentDocs()
	task := s.get(taskPath)
	if code := s.postSigned("wait-timeout", "evt_early", "update", task); code != 500 {
		t.Fatalf("an early timeout: %d, want 500", code)
	}
	other := *task
	other.Data = map[string]any{}
	for k, v := range task.Data {
		other.Data[k] = v
	}
	other.Data["waitId"] = "m1-t0-w99"
	if code := s.postSigned("wait-timeout", "evt_other", "update", &other); code != 200 {
		t.Fatalf("another wait's timeout: %d, want 200", code)
	}
	s.wantAgentDocs(before, "after the early and the foreign timeout")
	if field(s.get(taskPath), "status") != "waiting" {
		t.Fatal(s.dump())
	}
}

// The user cancels a task that waits for a role's reply: the child task is
// canceled with it (canceledBy parent), the wait's timeout later finds the
// task canceled and resumes nothing, and the model is not asked again.
func TestWaits_CancelWhileWaiting(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Plan the trip.") },
		sub: func(_ int, req map[string]any) llmtest.Step {
			if reqContains(req, "Message from the general agent") {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_ask", "ask_user", `{"question":"Which season?"}`)}}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_send", "send_message", `{"to":["researcher"],"text":"Where?","wait":true}`)}}
		},
	})
	s := startStack(t, stackOpts{model: model, waitTimeout: 1500 * time.Millisecond})
	s.say("c1", "m1", "Plan a trip")
	parent := s.chat("c1") + "/tasks/m1-t0"
	var child string
	s.waitFor("the child waiting for the user", 15*time.Second, func() bool {
		for _, d := range s.docs(s.chat("c1") + "/tasks") {
			if field(d, "parentTaskId") == "m1-t0" && field(d, "status") == "waiting" {
				child = d.ID
				return field(s.get(parent), "status") == "waiting"
			}
		}
		return false
	})
	if code := s.patch(parent, s.token, map[string]any{"status": "canceled"}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	s.canceledNotice("c1", "m1-t0")
	s.waitFor("the child canceled", 15*time.Second, func() bool {
		return field(s.get(s.chat("c1")+"/tasks/"+child), "status") == "canceled"
	})
	if by := field(s.get(s.chat("c1")+"/tasks/"+child), "canceledBy"); by != "parent" {
		t.Fatalf("child canceledBy %q", by)
	}
	until := max(numField(s.get(parent), "waitUntil"), numField(s.get(s.chat("c1")+"/tasks/"+child), "waitUntil"))
	time.Sleep(time.Until(time.UnixMilli(until)) + 300*time.Millisecond)
	s.waitFor("the timeouts delivered", 15*time.Second, func() bool {
		n := 0
		for _, d := range s.allDeliveries() {
			if d.TriggerID == "on-wait-timeout" && len(d.Attempts) > 0 && d.Status == triggers.StatusDelivered {
				n++
			}
		}
		return n == 2
	})
	s.settle(10 * time.Second)
	if st := field(s.get(parent), "status"); st != "canceled" {
		t.Fatalf("parent %s\n%s", st, s.dump())
	}
	if n := len(s.toolMessages("c1", "m1-t0")) + len(s.toolMessages("c1", child)); n != 0 {
		t.Fatalf("%d tool messages after the cancel\n%s", n, s.dump())
	}
	if n := len(fake.reqs("sub")); n != 2 {
		t.Fatalf("%d sub-agent requests, want 2", n)
	}
}
