package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// ---- helpers for the poisoning tests ----

// longID is a legal document id of exactly collections.MaxIDBytes bytes.
func longID(prefix string) string {
	return prefix + strings.Repeat("x", collections.MaxIDBytes-len(prefix))
}

// answersTo returns the runtime's assistant messages in the chat that
// answer (replyTo) the message msgID.
func (s *stack) answersTo(chatID, msgID string) []*collections.Document {
	var out []*collections.Document
	for _, d := range s.docs(s.chat(chatID) + "/messages") {
		if field(d, "role") == "assistant" && field(d, "replyTo") == msgID {
			out = append(out, d)
		}
	}
	return out
}

// answered reports whether msgID got a final answer: a direct reply, the
// result of its task, or a recorded error.
func (s *stack) answered(chatID, msgID string) bool {
	for _, d := range s.answersTo(chatID, msgID) {
		if st := field(d, "status"); st == "done" || st == "success" || st == "failed" {
			return true
		}
	}
	return false
}

// allDelivered fails the test unless every delivery was delivered (and
// the log has them: a change whose outbox row was never committed has
// none).
func (s *stack) allDelivered() {
	s.t.Helper()
	all := s.allDeliveries()
	if len(all) == 0 {
		s.t.Fatalf("no delivery in the log\n%s", s.dump())
	}
	for _, d := range all {
		if d.Status == triggers.StatusScheduled {
			continue // a timer not yet due (a wait's timeout, a chat's idle check)
		}
		if d.Status != triggers.StatusDelivered {
			s.t.Fatalf("delivery %s of %s is %s after %d attempts\n%s", d.ID, d.TriggerID, d.Status, len(d.Attempts), s.dump())
		}
	}
}

// builtinsEnabled fails the test unless every trigger is enabled.
func (s *stack) builtinsEnabled() {
	s.t.Helper()
	list, _, err := s.trig.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, in := range list {
		if in.Status != "enabled" {
			s.t.Fatalf("trigger %s is %s: %s", in.ID, in.Status, in.DisabledReason)
		}
	}
}

// lastRole is the role of a request's last message.
func lastRole(req map[string]any) string {
	ms := reqMessages(req)
	if len(ms) == 0 {
		return ""
	}
	r, _ := ms[len(ms)-1]["role"].(string)
	return r
}

// lastUserText is the content of a request's last user message.
func lastUserText(req map[string]any) string {
	ms := reqMessages(req)
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i]["role"] == "user" {
			return msgText(ms[i])
		}
	}
	return ""
}

// ---- tests ----

// A user posts 21 messages with legal 128-byte ids: every id the runtime
// derives from them (replies, tasks, sub-agents, tool calls with a model's
// overlong invalid call id, mirrors, results, questions, routed answers)
// must be valid, so every message is answered, no delivery goes dead and
// on-user-message stays enabled; another user's chat works afterwards.
func TestAgents_LongIDsDoNotPoisonTheRuntime(t *testing.T) {
	longCall := "call/" + strings.Repeat("é", 150) // 305 bytes, not a legal id
	_, model := newFake(t, script{
		orch: func(_ int, req map[string]any) llmtest.Step {
			switch last := lastUserText(req); {
			case strings.Contains(last, "please delegate"):
				return delegate("researcher", "Compute 6*7.")
			case strings.Contains(last, "please ask"):
				return delegate("general", "PLEASE-ASK the user for a colour.")
			}
			return llmtest.Step{Content: "Hello there."}
		},
		sub: func(_ int, req map[string]any) llmtest.Step {
			switch {
			case reqContains(req, "my answer is blue"):
				return llmtest.Step{Content: "Blue it is."}
			case lastRole(req) == "tool":
				return llmtest.Step{Content: "The answer is 42."}
			case reqContains(req, "PLEASE-ASK"):
				return llmtest.Step{ToolCalls: []llm.ToolCall{call(longCall+"-ask", "ask_user", `{"question":"Which colour?"}`)}}
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call(longCall, "calculator", `{"expression":"6*7"}`)}}
		},
	})
	s := startStack(t, stackOpts{model: model, userTokensPerDay: -1, userConcurrentRuns: -1})
	alice := s.user

	var ids []string
	for i := range 21 {
		// Every message delegates: messages written within one millisecond
		// may come in either order in the orchestrator's history, so the
		// last user message it shows may be another one of these.
		id := longID(fmt.Sprintf("m%02d-", i))
		s.say("c1", id, "please delegate this")
		ids = append(ids, id)
	}
	// A task that asks the user, answered with a 128-byte message id.
	askID := longID("ask-")
	s.say("c2", askID, "please ask me")
	s.waitFor("the question", 30*time.Second, func() bool {
		for _, d := range s.docs(s.chat("c2") + "/messages") {
			if field(d, "kind") == "question" {
				return true
			}
		}
		return false
	})
	s.say("c2", longID("answer-"), "my answer is blue")

	s.waitFor("every message answered", 60*time.Second, func() bool {
		for _, id := range ids {
			if !s.answered("c1", id) {
				return false
			}
		}
		return s.answered("c2", askID)
	})
	s.settle(20 * time.Second)
	s.allDelivered()
	s.builtinsEnabled()

	for i, id := range ids {
		answers := s.answersTo("c1", id)
		ok := false
		for _, d := range answers {
			ok = ok || (field(d, "status") == "success" && strings.Contains(field(d, "content"), "Summarised"))
		}
		if !ok {
			t.Fatalf("message %d has no task result\n%s", i, s.dump())
		}
		for _, d := range answers {
			if len(d.ID) > collections.MaxIDBytes || field(d, "status") == "failed" {
				t.Fatalf("answer %s to message %d: %v", d.ID, i, d.Data)
			}
		}
	}
	// The tool calls ran under their derived ids and were mirrored.
	var mirrors int
	for _, d := range s.docs(s.chat("c1") + "/messages") {
		if field(d, "kind") == "tool" && strings.Contains(field(d, "content"), "42") {
			mirrors++
		}
	}
	if mirrors != len(ids) {
		t.Fatalf("%d tool mirrors, want %d\n%s", mirrors, len(ids), s.dump())
	}
	var blue bool
	for _, d := range s.answersTo("c2", askID) {
		blue = blue || (field(d, "status") == "success" && strings.Contains(field(d, "content"), "Summarised"))
	}
	if !blue {
		t.Fatalf("the asking task did not finish\n%s", s.dump())
	}

	// Another user's chat still works.
	s.signup("bob")
	if s.user == alice {
		t.Fatal("signup did not switch users")
	}
	s.say("b1", "hi", "just saying hello")
	s.waitFor("bob's answer", 15*time.Second, func() bool { return s.answered("b1", "hi") })
	s.settle(10 * time.Second)
	s.allDelivered()
	s.builtinsEnabled()
}

// A document whose content makes a runtime write too large fails the same
// way on every attempt: the failure is recorded where the user sees it,
// and the delivery completes on its first attempt instead of being retried
// until it goes dead.
func TestAgents_ContentFailuresAreRecordedNotRetried(t *testing.T) {
	big := func(overhead map[string]any) string {
		b, _ := json.Marshal(overhead)
		return strings.Repeat("a", 1<<20-len(b)-16) // fits in a document of its own, not with much more
	}
	_, model := newFake(t, script{
		orch: func(_ int, req map[string]any) llmtest.Step {
			if reqContains(req, "short question") {
				return delegate("general", "Answer at length.")
			}
			// No instruction: the task takes the whole message as its
			// instruction, and no longer fits in a document.
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_1", "delegate_task", `{"agent":"general"}`)}}
		},
		sub: func(int, map[string]any) llmtest.Step {
			// An answer too large to be stored with the task.
			return llmtest.Step{Content: big(map[string]any{"role": "assistant"})}
		},
	})
	s := startStack(t, stackOpts{model: model, userTokensPerDay: -1, userConcurrentRuns: -1})

	s.say("c1", "huge", big(map[string]any{"role": "user", "content": "", "userId": s.user, "chatId": "c1"}))
	s.say("c2", "short", "short question")
	s.waitFor("both failures recorded", 30*time.Second, func() bool {
		return s.answered("c1", "huge") && s.answered("c2", "short")
	})
	s.settle(20 * time.Second)
	s.allDelivered()
	s.noRetries()
	s.builtinsEnabled()
	var userMessages int
	for _, d := range s.allDeliveries() {
		if d.TriggerID == "on-user-message" {
			userMessages++
		}
	}
	if userMessages != 2 {
		t.Fatalf("%d on-user-message deliveries in the log, want 2\n%s", userMessages, s.dump())
	}

	var failed int
	for _, d := range s.answersTo("c1", "huge") {
		if field(d, "status") == "failed" && strings.Contains(field(d, "content"), "larger than the size limit") {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d error messages for the huge message\n%s", failed, s.dump())
	}
	// The delivery log says why the delivery completed.
	var logged bool
	for _, d := range s.allDeliveries() {
		logged = logged || (d.TriggerID == "on-user-message" && strings.Contains(d.Attempts[0].Response, "larger than the size limit"))
	}
	if !logged {
		t.Fatalf("no delivery response names the failure\n%s", s.dump())
	}
	var task *collections.Document
	for _, d := range s.docs(s.chat("c2") + "/tasks") {
		task = d
	}
	if field(task, "status") != "failed" || !strings.Contains(field(task, "error"), "larger than the size limit") {
		t.Fatalf("task %v\n%s", task, s.dump())
	}
	if st := field(s.get(s.chat("c2")+"/sub-agents/"+task.ID), "status"); st != "failed" {
		t.Fatalf("sub-agent %s", st)
	}
	var told bool
	for _, d := range s.answersTo("c2", "short") {
		told = told || (field(d, "status") == "failed" && strings.Contains(field(d, "content"), "failed"))
	}
	if !told {
		t.Fatalf("the user was not told\n%s", s.dump())
	}
}

// A conversation the model refuses to summarise (a 400: its context is too
// long) fails the compression on every attempt: the task fails and the
// user is told, rather than the sub-agent's delivery being retried until
// it goes dead.
func TestAgents_RefusedCompressionFailsTheTask(t *testing.T) {
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Add up some numbers.") },
		sub: func(n int, req map[string]any) llmtest.Step {
			return llmtest.Step{ToolCalls: []llm.ToolCall{call(fmt.Sprintf("call_%d", n), "calculator", fmt.Sprintf(`{"expression":"%d+1"}`, n))},
				Usage: usage(4100, 5)}
		},
		plain: func(_ int, req map[string]any) llmtest.Step {
			if isSummaryReq(req) {
				return llmtest.Step{Status: 400, Content: "This model's maximum context length is exceeded."}
			}
			return llmtest.Step{Content: "Summarised for you: done."}
		},
	})
	s := startStack(t, stackOpts{model: model, tokenBudget: 4000, userTokensPerDay: -1, userConcurrentRuns: -1})
	s.say("c1", "m1", "Add numbers")
	s.waitFor("the task to end", 30*time.Second, func() bool { return s.answered("c1", "m1") })
	s.settle(10 * time.Second)
	s.allDelivered()

	var task *collections.Document
	for _, d := range s.docs(s.chat("c1") + "/tasks") {
		task = d
	}
	if field(task, "status") != "failed" || !strings.Contains(field(task, "error"), "model could not handle") {
		t.Fatalf("task %v\n%s", task, s.dump())
	}
}
