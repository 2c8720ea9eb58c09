package webhooks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// A model error that no retry can fix (a 4xx such as a bad request, or the
// token limit with nothing produced) ends the task as failed and tells the
// user, instead of leaving it running behind dead deliveries.
func TestAgents_PermanentModelErrorFailsTheTask(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(int, map[string]any) llmtest.Step { return llmtest.Step{Status: 400} },
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the task to fail", 10*time.Second, s.taskDone("c1", "m1-t0"))
	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "failed" || !strings.Contains(field(task, "error"), "the model failed") {
		t.Fatalf("task %v", task.Data)
	}
	// The sub-agent follows its task (written first, version-checked).
	s.waitFor("the sub-agent to fail", 10*time.Second, func() bool {
		return field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "status") == "failed"
	})
	if n := len(fake.reqs("sub")); n != 1 {
		t.Fatalf("%d sub-agent requests, want 1 (no retry of a 400)", n)
	}
	if !strings.Contains(field(s.get(s.chat("c1")+"/messages/m1-t0-result"), "content"), "failed") {
		t.Fatalf("chat not told:\n%s", s.dump())
	}
}

func TestAgents_PermanentModelErrorInTheOrchestrator(t *testing.T) {
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return llmtest.Step{Status: 401} },
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "hello")
	s.waitFor("the failure reply", 10*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m1-reply") != nil })
	reply := s.get(s.chat("c1") + "/messages/m1-reply")
	if field(reply, "status") != "failed" || !strings.Contains(field(reply, "content"), "401") {
		t.Fatalf("reply %v", reply.Data)
	}
	if tasks := s.docs(s.chat("c1") + "/tasks"); len(tasks) != 0 {
		t.Fatalf("%d tasks", len(tasks))
	}
}

// The provider's error message is the operator's, not the user's: the chat
// and the task say what failed (the status) without quoting it.
func TestAgents_ModelErrorMessageIsNotShown(t *testing.T) {
	const secret = "Incorrect API key provided: sk-proj-****abcd"
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return llmtest.Step{Status: 401, Content: secret} },
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "hello")
	s.waitFor("the failure reply", 10*time.Second, func() bool { return s.get(s.chat("c1")+"/messages/m1-reply") != nil })
	content := field(s.get(s.chat("c1")+"/messages/m1-reply"), "content")
	if !strings.Contains(content, "401") || strings.Contains(content, "sk-proj") {
		t.Fatalf("reply %q: want the status without the provider's message", content)
	}

	_, model = newFake(t, script{
		sub: func(int, map[string]any) llmtest.Step { return llmtest.Step{Status: 400, Content: secret} },
	})
	s = startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the task to fail", 10*time.Second, s.taskDone("c1", "m1-t0"))
	if e := field(s.get(s.chat("c1")+"/tasks/m1-t0"), "error"); !strings.Contains(e, "400") || strings.Contains(e, "sk-proj") {
		t.Fatalf("task error %q: want the status without the provider's message", e)
	}
}
