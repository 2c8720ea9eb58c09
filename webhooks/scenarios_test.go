package webhooks_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// ---- the scripted fake LLM, routed by request kind ----

// reqKind tells who sent a chat-completions request: the orchestrator
// (offered delegate_task), a sub-agent (offered ask_user), or a no-tools
// request (a finalize summary or a context compression).
func reqKind(req map[string]any) string {
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		fn, _ := tm["function"].(map[string]any)
		switch fn["name"] {
		case "delegate_task":
			return "orch"
		case "ask_user":
			return "sub"
		}
	}
	if len(tools) == 0 {
		return "plain"
	}
	return "other"
}

// reqMessages returns the request's messages.
func reqMessages(req map[string]any) []map[string]any {
	raw, _ := req["messages"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		m, _ := r.(map[string]any)
		out = append(out, m)
	}
	return out
}

// msgText reads a message's content (a string, or text parts).
func msgText(m map[string]any) string {
	switch c := m["content"].(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			pm, _ := p.(map[string]any)
			s, _ := pm["text"].(string)
			b.WriteString(s)
		}
		return b.String()
	}
	return ""
}

// reqContains reports whether any message of the request contains s.
func reqContains(req map[string]any, s string) bool {
	for _, m := range reqMessages(req) {
		if strings.Contains(msgText(m), s) {
			return true
		}
	}
	return false
}

// isSummaryReq tells a compression request from a finalize request (both
// offer no tools).
func isSummaryReq(req map[string]any) bool {
	ms := reqMessages(req)
	return len(ms) > 0 && strings.HasPrefix(msgText(ms[0]), "Summarise this agent conversation")
}

// script answers the n-th request (0-based) of each kind.
type script struct {
	orch  func(n int, req map[string]any) llmtest.Step
	sub   func(n int, req map[string]any) llmtest.Step
	plain func(n int, req map[string]any) llmtest.Step
}

type fakeLLM struct {
	*llmtest.Server
	t testing.TB
}

func newFake(t testing.TB, sc script) (*fakeLLM, llm.Model) {
	t.Helper()
	if sc.orch == nil {
		sc.orch = func(int, map[string]any) llmtest.Step { return delegate("researcher", "Compute 6*7.") }
	}
	if sc.plain == nil {
		sc.plain = func(_ int, req map[string]any) llmtest.Step {
			if isSummaryReq(req) {
				return llmtest.Step{Content: "SUMMARY: the user asked for calculations; several were done."}
			}
			return llmtest.Step{Content: "Summarised for you: done."}
		}
	}
	srv := llmtest.NewServer(t)
	var mu sync.Mutex
	counts := map[string]int{}
	srv.Match(func(req map[string]any) llmtest.Step {
		k := reqKind(req)
		mu.Lock()
		n := counts[k]
		counts[k]++
		mu.Unlock()
		switch k {
		case "orch":
			return sc.orch(n, req)
		case "sub":
			if sc.sub == nil {
				return llmtest.Step{Content: "The answer is 42."}
			}
			return sc.sub(n, req)
		case "plain":
			return sc.plain(n, req)
		}
		t.Errorf("unexpected request %v", req)
		return llmtest.Step{Status: 400}
	})
	m, err := llm.New(llm.Config{BaseURL: srv.URL, APIKey: "k", Model: "fake", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeLLM{Server: srv, t: t}, m
}

// reqs returns the requests of one kind so far.
func (f *fakeLLM) reqs(kind string) []map[string]any {
	var out []map[string]any
	for _, r := range f.Requests() {
		if reqKind(r) == kind {
			out = append(out, r)
		}
	}
	return out
}

// toolThenAnswer is a sub-agent that calls c on its first step and then
// answers.
func toolThenAnswer(c llm.ToolCall, answer string) func(int, map[string]any) llmtest.Step {
	return func(n int, _ map[string]any) llmtest.Step {
		if n == 0 {
			return llmtest.Step{ToolCalls: []llm.ToolCall{c}}
		}
		return llmtest.Step{Content: answer}
	}
}

func delegate(agent, instruction string) llmtest.Step {
	args, _ := json.Marshal(map[string]any{"agent": agent, "instruction": instruction})
	return llmtest.Step{Content: "Let me delegate that.", ToolCalls: []llm.ToolCall{{ID: "call_orch", Name: "delegate_task", Arguments: string(args)}}}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: args}
}

func usage(p, c int) *llm.Usage {
	return &llm.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

// ---- stack helpers ----

// settle waits (bounded) until the trigger pipeline is quiet: no pending
// delivery and no new delivery for a few polls.
func (s *stack) settle(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	stable, last := 0, -1
	for stable < 4 {
		if time.Now().After(deadline) {
			s.t.Fatalf("pipeline did not settle\n%s", s.dump())
		}
		all := s.allDeliveries()
		pending := 0
		for _, d := range all {
			if d.Status == triggers.StatusPending {
				pending++
			}
		}
		if pending == 0 && len(all) == last {
			stable++
		} else {
			stable = 0
		}
		last = len(all)
		time.Sleep(75 * time.Millisecond)
	}
}

// noRetries fails the test if a delivery needed more than one attempt. A
// scheduled delivery not yet due (a chat's idle timer) is not one.
func (s *stack) noRetries() {
	s.t.Helper()
	for _, d := range s.allDeliveries() {
		if d.Status == triggers.StatusScheduled {
			continue // a timer not yet due (a wait's timeout, a chat's idle check)
		}
		if d.Status != triggers.StatusDelivered || len(d.Attempts) != 1 {
			s.t.Errorf("delivery %s of %s: %s after %d attempts\n%s", d.ID, d.TriggerID, d.Status, len(d.Attempts), s.dump())
			return
		}
	}
}

// postSigned POSTs a correctly signed webhook event about doc to a
// handler and returns the status.
func (s *stack) postSigned(handler, eventID, typ string, doc *collections.Document) int {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"id": eventID, "triggerId": "manual", "event": map[string]any{
		"type": typ, "path": doc.Path, "id": doc.ID,
		"document": map[string]any{"id": doc.ID, "collection": doc.Collection, "path": doc.Path, "version": doc.Version,
			"createdAt": doc.CreatedAt, "updatedAt": doc.UpdatedAt, "data": doc.Data},
	}})
	wh, err := standardwebhooks.NewWebhook(hookSecret)
	if err != nil {
		s.t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(eventID, now, body)
	if err != nil {
		s.t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", s.URL+"/webhooks/"+handler, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", eventID)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	res, err := s.node.Client.Do(req)
	if err != nil {
		s.t.Error(err)
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// allDeliveries pages through the whole delivery log.
func (s *stack) allDeliveries() []*triggers.Delivery {
	s.t.Helper()
	var out []*triggers.Delivery
	cursor := ""
	for {
		ds, next, err := s.trig.Deliveries(context.Background(), triggers.DeliveryQuery{Limit: 100, Cursor: cursor})
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, ds...)
		if next == "" || len(ds) == 0 {
			return out
		}
		cursor = next
	}
}

// agentDocs snapshots every agent document: path → version.
func (s *stack) agentDocs() map[string]int64 {
	out := map[string]int64{}
	for _, coll := range []string{"users/*/orch-chats/*/messages", "users/*/orch-chats/*/tasks", "users/*/orch-chats/*/sub-agents", "users/*/orch-chats/*/sub-agents/*/messages", "users/*/orch-chats/*/sub-agents/*/tool-calls"} {
		for _, d := range s.docs(coll) {
			out[d.Path] = d.Version
		}
	}
	return out
}

// wantAgentDocs fails unless the agent documents are exactly before, at
// the same versions: what a redelivery or a refused write must leave.
func (s *stack) wantAgentDocs(before map[string]int64, when string) {
	s.t.Helper()
	after := s.agentDocs()
	if len(after) != len(before) {
		s.t.Fatalf("%d documents %s, %d before\n%s", len(after), when, len(before), s.dump())
	}
	for p, v := range before {
		if after[p] != v {
			s.t.Errorf("%s: version %d → %d %s", p, v, after[p], when)
		}
	}
}

func numField(d *collections.Document, f string) int64 {
	if d == nil {
		return -1
	}
	switch v := d.Data[f].(type) {
	case json.Number:
		i, _ := v.Int64()
		return i
	case float64:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	}
	return -1
}

func (s *stack) taskDone(chatID, taskID string) func() bool {
	return func() bool {
		st := field(s.get(s.chat(chatID)+"/tasks/"+taskID), "status")
		return (st == "success" || st == "failed") && s.get(s.chat(chatID)+"/messages/"+taskID+"-result") != nil
	}
}

// ---- tests ----

func TestAgents_ResearcherPath(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_calc", "calculator", `{"expression":"6*7"}`)}, Usage: usage(7, 3)}
			}
			return llmtest.Step{Content: "The answer is 42.", Usage: usage(11, 4)}
		},
		plain: func(int, map[string]any) llmtest.Step { return llmtest.Step{Content: "It is 42, as computed."} },
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "success" || field(task, "result") != "The answer is 42." || field(task, "name") != "agent:researcher" {
		t.Fatalf("task %v", task.Data)
	}
	sa := s.get(s.chat("c1") + "/sub-agents/m1-t0")
	if field(sa, "status") != "completed" || numField(sa, "iterationCount") != 2 || numField(sa, "tokensUsed") != 10+15 {
		t.Fatalf("sub-agent %v", sa.Data)
	}
	res := s.get(s.chat("c1") + "/messages/m1-t0-result")
	if field(res, "role") != "assistant" || field(res, "content") != "It is 42, as computed." {
		t.Fatalf("result message %v", res.Data)
	}

	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests, want 2", len(subs))
	}
	// The second step sees the call and its result.
	ms := reqMessages(subs[1])
	var sawCall, sawResult bool
	for i, m := range ms {
		if m["role"] == "assistant" {
			tcs, _ := m["tool_calls"].([]any)
			if len(tcs) == 1 && tcs[0].(map[string]any)["id"] == "call_calc" {
				sawCall = true
			}
		}
		if m["role"] == "tool" && m["tool_call_id"] == "call_calc" {
			if !sawCall || !strings.Contains(msgText(m), "42") {
				t.Fatalf("tool message #%d %v (call seen before: %v)", i, m, sawCall)
			}
			sawResult = true
		}
	}
	if !sawCall || !sawResult {
		t.Fatalf("second step request lacks the call or its result: %v", ms)
	}
	plains := fake.reqs("plain")
	if len(plains) != 1 || !reqContains(plains[0], "The answer is 42.") {
		t.Fatalf("finalize requests %v", plains)
	}
	if orch := fake.reqs("orch"); len(orch) != 1 || !reqContains(orch[0], "What is 6*7?") {
		t.Fatalf("orchestrator requests %v", orch)
	}
	tc := s.get(s.chat("c1") + "/sub-agents/m1-t0/tool-calls/call_calc")
	if field(tc, "status") != "success" || !strings.Contains(field(tc, "result"), "42") || field(tc, "visibility") != "visible" {
		t.Fatalf("tool call %v", tc)
	}
	mirror := s.get(s.chat("c1") + "/messages/tool-m1-t0-call_calc")
	if field(mirror, "kind") != "tool" || !strings.Contains(field(mirror, "content"), "calculator") || !strings.Contains(field(mirror, "content"), "42") {
		t.Fatalf("chat mirror of the tool call %v\n%s", mirror, s.dump())
	}
	s.noRetries()
}

func TestAgents_ParallelToolCalls(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{
					call("call_a", "calculator", `{"expression":"6*7"}`),
					call("call_b", "current_time", `{}`),
				}}
			}
			return llmtest.Step{Content: "42, and I know the time."}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "6*7 and the time?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	calls := s.docs(s.chat("c1") + "/sub-agents/m1-t0/tool-calls")
	if len(calls) != 2 || field(calls[0], "status") != "success" || field(calls[1], "status") != "success" {
		t.Fatalf("tool calls\n%s", s.dump())
	}
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests, want exactly 2 (one step after both results)\n%s", len(subs), s.dump())
	}
	found := map[any]bool{}
	for _, m := range reqMessages(subs[1]) {
		if m["role"] == "tool" {
			found[m["tool_call_id"]] = true
		}
	}
	if !found["call_a"] || !found["call_b"] {
		t.Fatalf("second step lacks a tool result: %v", reqMessages(subs[1]))
	}
	if field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") != "success" {
		t.Fatal(s.dump())
	}
	s.noRetries()
}

func TestAgents_ToolError(t *testing.T) {
	var gotErr sync.Map
	_, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			switch n {
			case 0:
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_div", "calculator", `{"expression":"1/0"}`)}}
			case 1:
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_bad", "calculator", `{"expr":5}`)}}
			}
			for _, m := range reqMessages(req) {
				if m["role"] == "tool" {
					gotErr.Store(m["tool_call_id"], msgText(m))
				}
			}
			return llmtest.Step{Content: "I cannot divide by zero."}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 1/0?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	for _, id := range []string{"call_div", "call_bad"} {
		tc := s.get(s.chat("c1") + "/sub-agents/m1-t0/tool-calls/" + id)
		if field(tc, "status") != "failed" || field(tc, "error") == "" {
			t.Fatalf("tool call %s: %v", id, tc)
		}
		v, ok := gotErr.Load(id)
		if !ok || !strings.HasPrefix(v.(string), "error:") {
			t.Fatalf("the model got %q for %s", v, id)
		}
	}
	if v, _ := gotErr.Load("call_div"); !strings.Contains(v.(string), "division by zero") {
		t.Fatalf("the model got %q", v)
	}
	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "success" || field(task, "result") != "I cannot divide by zero." {
		t.Fatalf("task %v", task.Data)
	}
	s.noRetries()
}

func TestAgents_AskUserWaitsThenResumes(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Tell the weather.") },
		sub:  toolThenAnswer(call("call_ask", "ask_user", `{"question":"Which city?"}`), "Sunny in Paris."),
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What's the weather?")
	taskPath := s.chat("c1") + "/tasks/m1-t0"
	s.waitFor("the question in the chat", 15*time.Second, func() bool {
		for _, d := range s.docs(s.chat("c1") + "/messages") {
			if field(d, "kind") == "question" {
				return true
			}
		}
		return false
	})
	task := s.get(taskPath)
	if field(task, "status") != "waiting" || field(task, "question") != "Which city?" {
		t.Fatalf("task %v", task.Data)
	}
	if st := field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "status"); st != "waiting" {
		t.Fatalf("sub-agent status %q", st)
	}
	var q *collections.Document
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		if field(d, "kind") == "question" {
			q = d
		}
	}
	if field(q, "content") != "Which city?" || field(q, "role") != "assistant" {
		t.Fatalf("question message %v", q.Data)
	}
	s.settle(10 * time.Second)
	if n := len(fake.reqs("sub")); n != 1 {
		t.Fatalf("%d sub-agent requests while waiting", n)
	}

	s.say("c1", "m2", "Paris")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	if n := len(fake.reqs("orch")); n != 1 {
		t.Fatalf("%d orchestrator requests, want 1 (the answer is routed, not planned)", n)
	}
	if n := len(s.docs(s.chat("c1") + "/tasks")); n != 1 {
		t.Fatalf("%d tasks\n%s", n, s.dump())
	}
	if s.get(s.chat("c1")+"/messages/m2-reply") != nil {
		t.Fatalf("the routed answer got an orchestrator reply\n%s", s.dump())
	}
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests", len(subs))
	}
	ms := reqMessages(subs[1])
	toolAt, userAt := -1, -1
	for i, m := range ms {
		if m["role"] == "tool" && m["tool_call_id"] == "call_ask" {
			toolAt = i
		}
		if m["role"] == "user" && msgText(m) == "Paris" {
			userAt = i
		}
	}
	if toolAt < 0 || userAt < toolAt {
		t.Fatalf("resumed request: tool answer at %d, user answer at %d: %v", toolAt, userAt, ms)
	}
	task = s.get(taskPath)
	if field(task, "status") != "success" || field(task, "result") != "Sunny in Paris." || field(task, "answerMessageId") != "m2" {
		t.Fatalf("task %v", task.Data)
	}
	if field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "status") != "completed" {
		t.Fatal(s.dump())
	}
	s.noRetries()
}

func TestAgents_MaxIterations(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(int, map[string]any) llmtest.Step {
			return llmtest.Step{ToolCalls: []llm.ToolCall{{Name: "current_time", Arguments: `{}`}}}
		},
	})
	s := startStack(t, stackOpts{model: model, maxIterations: 3})
	s.say("c1", "m1", "Loop forever")
	s.waitFor("the failure in the chat", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "failed" || !strings.Contains(field(task, "error"), "max iterations") {
		t.Fatalf("task %v", task.Data)
	}
	sa := s.get(s.chat("c1") + "/sub-agents/m1-t0")
	if field(sa, "status") != "failed" || numField(sa, "iterationCount") != 3 {
		t.Fatalf("sub-agent %v", sa.Data)
	}
	if n := len(fake.reqs("sub")); n != 3 {
		t.Fatalf("%d sub-agent requests, want 3", n)
	}
	res := s.get(s.chat("c1") + "/messages/m1-t0-result")
	if field(res, "status") != "failed" || !strings.Contains(field(res, "content"), "max iterations") {
		t.Fatalf("chat message %v", res.Data)
	}
	if n := len(fake.reqs("plain")); n != 0 {
		t.Fatalf("a failure is reported without the model, got %d requests", n)
	}
	s.noRetries()
}

// Compression: the sub-agent runs five calculator steps with small
// contexts; the fifth reports 4,100 prompt tokens (over the budget of
// 4,000, within its overflow),
// so the sixth step is preceded by exactly one summary request. The cut
// keeps the last keepRecent (6) messages plus whatever follows the cut
// point, and never separates a tool call from its result: here the
// instruction and the first step (call + result) are summarised.
func TestAgents_BudgetCompression(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step {
			return delegate("general", "Add up some numbers, INSTRUCTION-MARK.")
		},
		sub: func(n int, req map[string]any) llmtest.Step {
			if n < 5 {
				u := usage(10, 5)
				if n == 4 {
					u = usage(4100, 5)
				}
				return llmtest.Step{ToolCalls: []llm.ToolCall{call(fmt.Sprintf("call_%d", n), "calculator", fmt.Sprintf(`{"expression":"%d+1"}`, n))}, Usage: u}
			}
			return llmtest.Step{Content: "Done adding.", Usage: usage(4100, 5)}
		},
	})
	s := startStack(t, stackOpts{model: model, tokenBudget: 4000})
	s.say("c1", "m1", "Add numbers")
	s.waitFor("the chat result", 20*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	var kinds []string
	var summaryReq, lastSub map[string]any
	for _, r := range fake.Requests() {
		k := reqKind(r)
		if k == "plain" && isSummaryReq(r) {
			k, summaryReq = "summary", r
		}
		if k == "sub" {
			lastSub = r
		}
		kinds = append(kinds, k)
	}
	want := "orch,sub,sub,sub,sub,sub,summary,sub,plain"
	if strings.Join(kinds, ",") != want {
		t.Fatalf("requests %v, want %s\n%s", kinds, want, s.dump())
	}
	if !reqContains(summaryReq, "INSTRUCTION-MARK") || !reqContains(summaryReq, "calculator") {
		t.Fatalf("summary request %v", reqMessages(summaryReq))
	}
	sa := s.get(s.chat("c1") + "/sub-agents/m1-t0")
	if !strings.HasPrefix(field(sa, "summary"), "SUMMARY:") || numField(sa, "summaryThroughSeq") != 3 {
		t.Fatalf("sub-agent %v", sa.Data)
	}
	ms := reqMessages(lastSub)
	if len(ms) < 2 || ms[1]["role"] != "system" || !strings.HasPrefix(msgText(ms[1]), "Summary of the earlier conversation") {
		t.Fatalf("step after compression: %v", ms)
	}
	if reqContains(lastSub, "INSTRUCTION-MARK") {
		t.Fatalf("the summarised instruction is still in the context: %v", ms)
	}
	ids := map[any]bool{}
	for _, m := range ms {
		if m["role"] == "tool" {
			ids[m["tool_call_id"]] = true
		}
	}
	if ids["call_0"] || !ids["call_1"] || !ids["call_4"] {
		t.Fatalf("tool results after compression %v", ids)
	}
	if field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") != "success" {
		t.Fatal(s.dump())
	}
	s.noRetries()
}

func TestAgents_RedeliveryCreatesNoDuplicates(t *testing.T) {
	fake, model := newFake(t, script{
		sub: toolThenAnswer(call("call_calc", "calculator", `{"expression":"6*7"}`), "The answer is 42."),
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	before := s.agentDocs()
	nreq := len(fake.Requests())
	ds := s.allDeliveries()
	if len(ds) < 6 {
		t.Fatalf("only %d deliveries\n%s", len(ds), s.dump())
	}
	attempts := map[string]int{}
	for _, d := range ds {
		attempts[d.ID] = len(d.Attempts)
		if err := s.trig.Replay(context.Background(), d.ID); err != nil {
			t.Fatalf("replay %s: %v", d.ID, err)
		}
	}
	s.waitFor("every replay delivered", 15*time.Second, func() bool {
		for _, d := range s.allDeliveries() {
			if d.Status != triggers.StatusDelivered || len(d.Attempts) <= attempts[d.ID] {
				return false
			}
		}
		return true
	})
	s.settle(10 * time.Second)
	s.wantAgentDocs(before, "after the replays")
	if n := len(fake.Requests()); n != nreq {
		t.Fatalf("%d LLM requests after the replays, %d before", n, nreq)
	}
	if n := len(s.allDeliveries()); n != len(ds) {
		t.Fatalf("the replays caused %d new deliveries", n-len(ds))
	}

	// Every create/update event again, each POSTed twice concurrently.
	type ev struct {
		handler, typ string
		doc          *collections.Document
	}
	var evs []ev
	c := s.chat("c1")
	evs = append(evs, ev{"orchestrator", "create", s.get(c + "/messages/m1")},
		ev{"agent-init", "create", s.get(c + "/tasks/m1-t0")},
		ev{"orchestrator-finalize", "update", s.get(c + "/tasks/m1-t0")})
	for _, d := range s.docs(c + "/sub-agents/m1-t0/messages") {
		if r := field(d, "role"); r == "user" || r == "tool" {
			evs = append(evs, ev{"agent-loop", "create", d})
		}
	}
	for _, d := range s.docs(c + "/sub-agents/m1-t0/tool-calls") {
		evs = append(evs, ev{"tool-runner", "create", d})
	}
	var wg sync.WaitGroup
	for i, e := range evs {
		for range 2 {
			wg.Go(func() {
				if code := s.postSigned(e.handler, fmt.Sprintf("evt_manual_%d", i), e.typ, e.doc); code != 200 {
					t.Errorf("%s %s: %d", e.handler, e.doc.Path, code)
				}
			})
		}
	}
	wg.Wait()
	s.settle(10 * time.Second)
	s.wantAgentDocs(before, "after the concurrent posts")
	if n := len(fake.Requests()); n != nreq {
		t.Fatalf("%d LLM requests after the concurrent posts, %d before", n, nreq)
	}
	if field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") != "success" ||
		field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "status") != "completed" {
		t.Fatal(s.dump())
	}
}

// TestAgents_BadSignature: an unsigned or wrongly signed delivery, and one
// to an unknown handler, are refused and write nothing. The handlers answer
// only after their writes, so the check right after each response sees
// anything the request wrote (requests_test.go); no sleep.
func TestAgents_BadSignature(t *testing.T) {
	s := startStack(t, stackOpts{})
	nothingWritten := s.noWrites()
	body := s.userMessageEvent("evt_x")
	post := func(path string, hdr http.Header, body []byte) webhookReply {
		return postWebhook(t, "POST", s.URL+path, hdr, bytes.NewReader(body))
	}
	ts := fmt.Sprint(time.Now().Unix())
	bad := webhookReply{status: 401, err: "invalid webhook signature"}
	otherSecret, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("not the node's secret, 32 bytes!")))
	if err != nil {
		t.Fatal(err)
	}
	otherSig, err := otherSecret.Sign("evt_x", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(body, []byte("What is 6*7?"), []byte("What is 7*7?"), 1)
	for _, c := range []struct {
		name string
		hdr  http.Header
		body []byte
	}{
		{"unsigned", http.Header{"Content-Type": {"application/json"}}, body},
		{"wrong signature", http.Header{"Content-Type": {"application/json"}, "Webhook-Id": {"evt_x"}, "Webhook-Timestamp": {ts},
			"Webhook-Signature": {"v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}, body},
		{"signed with another secret", http.Header{"Content-Type": {"application/json"}, "Webhook-Id": {"evt_x"}, "Webhook-Timestamp": {ts},
			"Webhook-Signature": {otherSig}}, body},
		{"body changed after signing", signedHeaders(t, "evt_x", time.Now(), body), tampered},
	} {
		if got := post("/webhooks/orchestrator", c.hdr, c.body); got != bad {
			t.Errorf("%s: %+v, want %+v", c.name, got, bad)
		}
		nothingWritten(c.name)
	}
	if got, want := post("/webhooks/nope", nil, body), (webhookReply{status: 404, err: "no webhook handler /webhooks/nope"}); got != want {
		t.Errorf("unknown handler: %+v, want %+v", got, want)
	}
	nothingWritten("unknown handler")
	if n := len(s.agentDocs()); n != 0 {
		t.Fatalf("%d documents written\n%s", n, s.dump())
	}
}

func TestAgents_UsersSeeOnlyTheirOwnChat(t *testing.T) {
	s := startStack(t, stackOpts{})
	alice := s.token
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))

	code, m := s.do("POST", "/auth/v1/signup", "", `{"username":"bob","password":"correct horse battery"}`)
	if code != 200 {
		t.Fatalf("signup: %d %v", code, m)
	}
	bob, _ := m["access_token"].(string)

	var paths []string
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		paths = append(paths, d.Path)
	}
	paths = append(paths, s.chat("c1")+"/tasks/m1-t0", s.chat("c1")+"/sub-agents/m1-t0")
	for _, d := range s.docs(s.chat("c1") + "/sub-agents/m1-t0/messages") {
		paths = append(paths, d.Path)
	}
	for _, d := range s.docs(s.chat("c1") + "/sub-agents/m1-t0/tool-calls") {
		paths = append(paths, d.Path)
	}
	if len(paths) < 10 {
		t.Fatalf("only %d documents\n%s", len(paths), s.dump())
	}
	for _, p := range paths {
		if code, body := s.do("GET", "/api/v1/databases/default/documents/"+p, bob, ""); code != 403 {
			t.Errorf("bob GET %s: %d %v", p, code, body)
		}
		if code, body := s.do("GET", "/api/v1/databases/default/documents/"+p, alice, ""); code != 200 {
			t.Errorf("alice GET %s: %d %v", p, code, body)
		}
	}
	// Bob cannot write into alice's chat either (no orchestrator run).
	body, _ := json.Marshal(map[string]any{"doc": map[string]any{"role": "user", "content": "hi", "userId": s.user, "chatId": "c1"}})
	if code, _ := s.do("PUT", "/api/v1/databases/default/documents/"+s.chat("c1")+"/messages/evil", bob, string(body)); code != 403 {
		t.Errorf("bob PUT into alice's chat: %d", code)
	}
}

func TestAgents_HandlerFailureIsRetried(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{Status: 500, Content: "upstream overloaded"}
			}
			return delegate("researcher", "Compute 6*7.")
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the chat result after a retry", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2", n)
	}
	ds, _, err := s.trig.Deliveries(context.Background(), triggers.DeliveryQuery{TriggerID: "on-user-message", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != triggers.StatusDelivered || len(ds[0].Attempts) != 2 ||
		ds[0].Attempts[0].Status != 500 || ds[0].Attempts[1].Status != 200 {
		t.Fatalf("orchestrator deliveries\n%s", s.dump())
	}
	var replies, results int
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		switch {
		case d.ID == "m1-reply":
			replies++
		case strings.HasSuffix(d.ID, "-result"):
			results++
		}
	}
	if replies != 1 || results != 1 || len(s.docs(s.chat("c1")+"/tasks")) != 1 {
		t.Fatalf("replies %d results %d\n%s", replies, results, s.dump())
	}
}

// The user answers an ask_user while another call of the same step is
// still running: the answer must not take the seq (the document id) that
// the running call's tool message will use.
func TestAgents_AnswerWhileAToolIsStillRunning(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprint(w, "slow page")
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("researcher", "Look it up.") },
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{
					call("call_time", "current_time", `{}`),
					call("call_get", "http_get", fmt.Sprintf(`{"url":%q}`, slow.URL)),
					call("call_ask", "ask_user", `{"question":"Which city?"}`),
				}}
			}
			return llmtest.Step{Content: "Done."}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Look it up")
	sub := s.chat("c1") + "/sub-agents/m1-t0"
	s.waitFor("the question and the first tool result", 15*time.Second, func() bool {
		return field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") == "waiting" &&
			field(s.get(sub+"/tool-calls/call_time"), "status") == "success"
	})
	if st := field(s.get(sub+"/tool-calls/call_get"), "status"); st != "pending" {
		t.Fatalf("the slow call is %s already\n%s", st, s.dump())
	}
	s.say("c1", "m2", "Paris")
	s.waitFor("the answer routed", 15*time.Second, func() bool {
		for _, d := range s.docs(sub + "/messages") {
			if field(d, "content") == "Paris" {
				return true
			}
		}
		return false
	})
	close(release)
	s.waitFor("the chat result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	seen := map[string]bool{}
	for _, d := range s.docs(sub + "/messages") {
		seen[field(d, "role")+":"+field(d, "toolCallId")+":"+field(d, "content")] = true
	}
	if !seen["user::Paris"] || !seen["tool:call_get:"+field(s.get(sub+"/tool-calls/call_get"), "result")] {
		t.Fatalf("a message is missing\n%s", s.dump())
	}
	if field(s.get(s.chat("c1")+"/tasks/m1-t0"), "status") != "success" {
		t.Fatal(s.dump())
	}
	// Every seq is unique, and the answer comes after the step's results.
	seqs := map[int64]string{}
	for _, d := range s.docs(sub + "/messages") {
		if prev, dup := seqs[numField(d, "seq")]; dup {
			t.Fatalf("seq %d used by %s and %s\n%s", numField(d, "seq"), prev, d.ID, s.dump())
		}
		seqs[numField(d, "seq")] = d.ID
	}
	subs := fake.reqs("sub")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent requests", len(subs))
	}
	var roles []string
	for _, m := range reqMessages(subs[1]) {
		r, _ := m["role"].(string)
		roles = append(roles, r)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,tool,tool,user,system" { // the last: the chat block after the wait
		t.Fatalf("resumed context roles %s", got)
	}
}
