package webhooks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// commit applies writes to the store directly (no rules, no runtime).
func (s *stack) commit(writes ...collections.Write) {
	s.t.Helper()
	if _, err := s.store.Commit(context.Background(), "default", writes, collections.CommitOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// makeLegacy rewrites a task waiting in an ask_user wait, its sub-agent
// and its question as the runtime left them before waits had ids: the task
// waiting with its question and no waitId, waitUntil or waitState; the
// sub-agent "waiting_for_user" with no waitId or lastProcessedMessageId;
// the question message {taskId}-q{task version}, sealed, with no waitId.
// It returns the question's id.
func (s *stack) makeLegacy(chatID, taskID string) string {
	s.t.Helper()
	chat := s.chat(chatID)
	task := s.get(chat + "/tasks/" + taskID)
	newQ := chat + "/messages/" + field(task, "waitId") + "-q"
	if field(task, "status") != "waiting" || s.get(newQ) == nil {
		s.t.Fatalf("task %s is not waiting with its question\n%s", taskID, s.dump())
	}
	s.commit(
		collections.Write{Type: collections.WriteUpdate, Path: task.Path, Data: map[string]any{"waitId": nil, "waitUntil": nil, "waitState": nil}},
		collections.Write{Type: collections.WriteUpdate, Path: chat + "/sub-agents/" + taskID,
			Data: map[string]any{"status": "waiting_for_user", "waitId": nil, "lastProcessedMessageId": nil}},
		collections.Write{Type: collections.WriteDelete, Path: newQ},
	)
	task = s.get(task.Path)
	qID := fmt.Sprintf("%s-q%d", taskID, task.Version)
	qPath := chat + "/messages/" + qID
	s.commit(collections.Write{Type: collections.WriteCreate, Path: qPath, Data: webhooks.SealChatMessage(hookSecret, qPath, map[string]any{
		"userId": s.user, "chatId": chatID, "role": "assistant", "content": field(task, "question"),
		"taskId": taskID, "kind": "question", "status": "waiting",
	})})
	if _, ok := task.Data["waitState"]; ok || field(task, "waitId") != "" || field(task, "question") == "" {
		s.t.Fatalf("legacy task %v", task.Data)
	}
	return qID
}

// askLegacy is a sub-agent for two tasks (A and B) that asks the user with
// a wait of a day (so no timer of its own fires in the test), then answers
// with what it got: the user's answer, or the ask_user result when that is
// not the synthesised note.
func askLegacy() func(int, map[string]any) llmtest.Step {
	return func(_ int, req map[string]any) llmtest.Step {
		task := "A"
		if reqContains(req, "Task B") {
			task = "B"
		}
		r := toolResult(req, "call_ask_"+task)
		switch {
		case r == "":
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_ask_"+task, "ask_user", `{"question":"Question `+task+`?","timeoutSeconds":86400}`)}}
		case r == "The question was sent to the user; their reply follows.":
			return llmtest.Step{Content: task + " got: " + lastUserText(req)}
		}
		return llmtest.Step{Content: task + " result: " + r}
	}
}

// Two tasks wait for the user as the runtime left them before waits had
// ids. The one whose old question a replyTo names gets that message; the
// other, then the only task waiting, gets a message without replyTo. Each
// resumes its sub-agent with its answer; the orchestrator plans neither.
func TestWaits_LegacyWaitsGetTheirAnswers(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n == 0 {
				return delegateBoth("Task A: ask which colour.", "Task B: ask which city.")
			}
			return llmtest.Step{Content: "Noted."}
		},
		sub: askLegacy(),
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Do A and B")
	s.waitFor("two questions", 15*time.Second, func() bool { return len(s.questions("c1")) == 2 })
	s.settle(10 * time.Second)
	qA, qB := s.makeLegacy("c1", "m1-t0"), s.makeLegacy("c1", "m1-t1")

	s.answer("c1", "m2", qA, "Green")
	s.waitFor("task A done", 15*time.Second, s.taskDone("c1", "m1-t0"))
	if r := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "result"); r != "A got: Green" {
		t.Fatalf("task A result %q\n%s", r, s.dump())
	}
	// B was not touched by A's answer: still as the old runtime left it.
	if b := s.get(s.chat("c1") + "/tasks/m1-t1"); field(b, "waitId") != "" || field(b, "status") != "waiting" {
		t.Fatalf("task B %v", b.Data)
	}
	s.say("c1", "m3", "Lisbon")
	s.waitFor("task B done", 15*time.Second, s.taskDone("c1", "m1-t1"))
	if r := field(s.get(s.chat("c1")+"/tasks/m1-t1"), "result"); r != "B got: Lisbon" {
		t.Fatalf("task B result %q\n%s", r, s.dump())
	}
	// A replyTo naming the old question of a wait that is over is a new
	// message.
	s.answer("c1", "m4", qB, "Porto, actually")
	s.waitFor("the orchestrator's reply", 15*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m4-reply") != nil })
	s.settle(10 * time.Second)

	for id, want := range map[string]struct{ answer, q string }{"m1-t0": {"m2", qA}, "m1-t1": {"m3", qB}} {
		task := s.get(s.chat("c1") + "/tasks/" + id)
		ws, _ := task.Data["waitState"].(map[string]any)
		if field(task, "answerMessageId") != want.answer || ws["resolution"] != "replied" || ws["messageId"] != want.q || field(task, "waitId") == "" {
			t.Fatalf("task %s: %v", id, task.Data)
		}
		if st := field(s.get(s.chat("c1")+"/sub-agents/"+id), "status"); st != "completed" {
			t.Fatalf("sub-agent %s: %s", id, st)
		}
	}
	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2 (the answers are not planned)", n)
	}
	if n := len(fake.reqs("sub")); n != 4 {
		t.Fatalf("%d sub-agent requests, want 4", n)
	}
	for _, id := range []string{"m2", "m3"} {
		if s.get(s.chat("c1")+"/messages/"+id+"-reply") != nil {
			t.Fatalf("the answer %s got an orchestrator reply", id)
		}
	}
	s.noRetries()
}

// Two legacy waits and a message that names neither: the orchestrator is
// told both wait (and does not route the message). Both waits were adopted
// for it, with the configured timeout, and time out like any wait.
func TestWaits_LegacyWaitsTimeOutOnceAdopted(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return delegateBoth("Task A: ask which colour.", "Task B: ask which city.")
			}
			if !hasTool(req, "answer_task") || !reqContains(req, "taskId m1-t0") || !reqContains(req, "taskId m1-t1") {
				t.Errorf("the orchestrator was not told which tasks wait: %v", reqMessages(req))
			}
			return llmtest.Step{Content: "Hello!"}
		},
		sub: askLegacy(),
	})
	s := startStack(t, stackOpts{model: model, waitTimeout: 2 * time.Second})
	s.say("c1", "m1", "Do A and B")
	s.waitFor("two questions", 15*time.Second, func() bool { return len(s.questions("c1")) == 2 })
	s.settle(10 * time.Second)
	s.makeLegacy("c1", "m1-t0")
	s.makeLegacy("c1", "m1-t1")

	s.say("c1", "m2", "Hello")
	s.waitFor("both tasks done", 20*time.Second, func() bool { return s.taskDone("c1", "m1-t0")() && s.taskDone("c1", "m1-t1")() })
	s.settle(10 * time.Second)
	for _, id := range []string{"m1-t0", "m1-t1"} {
		task := s.get(s.chat("c1") + "/tasks/" + id)
		if r := field(task, "result"); !strings.HasSuffix(r, " result: timeout: no reply from user within 2s") {
			t.Fatalf("task %s result %q\n%s", id, r, s.dump())
		}
		if ws, _ := task.Data["waitState"].(map[string]any); ws["resolution"] != "timeout" {
			t.Fatalf("task %s: %v", id, task.Data)
		}
	}
	if n := len(fake.reqs("orch")); n != 2 {
		t.Fatalf("%d orchestrator requests, want 2", n)
	}
	if n := len(fake.reqs("sub")); n != 4 {
		t.Fatalf("%d sub-agent requests, want 4", n)
	}
	s.noRetries()
}
