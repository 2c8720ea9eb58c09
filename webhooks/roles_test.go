package webhooks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// The hard stop: a context that compression cannot bring under the
// sub-agent's budget × 1.1 fails the task with a clear message, without
// another model call.
func TestAgents_BudgetHardStop(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step { return delegate("general", "Add numbers.") },
		sub: func(n int, _ map[string]any) llmtest.Step {
			if n > 0 {
				t.Errorf("sub-agent request #%d over the budget", n+1)
			}
			return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_0", "calculator", `{"expression":"1+1"}`)}, Usage: usage(5000, 5)}
		},
	})
	s := startStack(t, stackOpts{model: model, tokenBudget: 4000})
	s.say("c1", "m1", "Add numbers")
	s.waitFor("the task to fail", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)

	const want = "the context (5000 tokens) exceeds this sub-agent's token budget of 4000 tokens"
	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "failed" || field(task, "error") != want {
		t.Fatalf("task %v", task.Data)
	}
	if !strings.Contains(field(s.get(s.chat("c1")+"/messages/m1-t0-result"), "content"), want) {
		t.Fatalf("the chat is not told\n%s", s.dump())
	}
	sa := s.get(s.chat("c1") + "/sub-agents/m1-t0")
	if field(sa, "status") != "failed" || numField(sa, "tokenBudget") != 4000 {
		t.Fatalf("sub-agent %v", sa.Data)
	}
	if n := len(fake.reqs("sub")); n != 1 {
		t.Fatalf("%d sub-agent requests, want 1", n)
	}
	if n := len(fake.reqs("plain")); n != 0 {
		t.Fatalf("%d plain requests (no compression has anything to compress, no summary of a failure)", n)
	}
	s.noRetries()
}

// A role's token_budget and max_iterations override [agents]: a prompt
// estimated over the role's budget × 1.1 fails before any model call, and
// the role's step limit ends a loop.
func TestAgents_RoleBudgetAndIterations(t *testing.T) {
	long := strings.Repeat("word ", 4000) // about 5,000 tokens
	fake, model := newFake(t, script{
		orch: func(_ int, req map[string]any) llmtest.Step {
			ms := reqMessages(req)
			if strings.Contains(msgText(ms[len(ms)-1]), "LONG") {
				return delegate("researcher", "LONG "+long)
			}
			return delegate("general", "Loop.")
		},
		sub: func(int, map[string]any) llmtest.Step {
			return llmtest.Step{ToolCalls: []llm.ToolCall{{Name: "current_time", Arguments: `{}`}}}
		},
	})
	s := startStack(t, stackOpts{model: model, tokenBudget: 16000, configure: func(c *config.Config) {
		c.Agents.Roles = map[string]config.AgentRole{
			"researcher": {TokenBudget: 4000},
			"general":    {MaxIterations: 2},
		}
	}})
	s.say("c1", "m1", "LONG please")
	s.waitFor("the long task to fail", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.say("c1", "m2", "Loop please")
	s.waitFor("the loop to end", 15*time.Second, s.taskDone("c1", "m2-t0"))
	s.settle(10 * time.Second)

	long1 := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(long1, "status") != "failed" || !strings.HasSuffix(field(long1, "error"), "exceeds this sub-agent's token budget of 4000 tokens") {
		t.Fatalf("task %v", long1.Data)
	}
	if b := numField(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "tokenBudget"); b != 4000 {
		t.Fatalf("researcher tokenBudget %d", b)
	}
	if b := numField(s.get(s.chat("c1")+"/sub-agents/m2-t0"), "tokenBudget"); b != 16000 {
		t.Fatalf("general tokenBudget %d", b)
	}
	loop := s.get(s.chat("c1") + "/tasks/m2-t0")
	if field(loop, "status") != "failed" || field(loop, "error") != "max iterations (2) reached" {
		t.Fatalf("task %v", loop.Data)
	}
	for _, r := range fake.reqs("sub") {
		if reqContains(r, "LONG") {
			t.Fatal("the over-budget prompt was sent")
		}
	}
	if n := len(fake.reqs("sub")); n != 2 {
		t.Fatalf("%d sub-agent requests, want 2", n)
	}
}

// Per-role and orchestrator models and temperatures reach the requests;
// a role without them sends the configured model and no temperature.
func TestAgents_RoleAndOrchestratorModels(t *testing.T) {
	fake, model := newFake(t, script{
		orch: func(n int, _ map[string]any) llmtest.Step {
			if n == 0 {
				return delegate("researcher", "Compute 6*7.")
			}
			return delegate("general", "Compute 6*8.")
		},
	})
	orchT, resT := 0.1, 0.0
	s := startStack(t, stackOpts{model: model, configure: func(c *config.Config) {
		c.Agents.Orchestrator = config.AgentModel{Model: "orch-model", Temperature: &orchT}
		c.Agents.Roles = map[string]config.AgentRole{"researcher": {Model: "research-model", Temperature: &resT}}
	}})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the first result", 15*time.Second, s.taskDone("c1", "m1-t0"))
	s.say("c1", "m2", "What is 6*8?")
	s.waitFor("the second result", 15*time.Second, s.taskDone("c1", "m2-t0"))
	s.settle(10 * time.Second)

	check := func(kind string, req map[string]any, model string, temp any) {
		t.Helper()
		got, has := req["temperature"]
		if req["model"] != model || (temp == nil && has) || (temp != nil && got != temp) {
			t.Errorf("%s request: model %v temperature %v (present %v), want %s %v", kind, req["model"], got, has, model, temp)
		}
	}
	orch, subs, plains := fake.reqs("orch"), fake.reqs("sub"), fake.reqs("plain")
	if len(orch) != 2 || len(subs) != 2 || len(plains) != 2 {
		t.Fatalf("requests: %d orch, %d sub, %d plain", len(orch), len(subs), len(plains))
	}
	for _, r := range orch {
		check("orchestrator", r, "orch-model", 0.1)
	}
	for _, r := range plains {
		check("finalize", r, "orch-model", 0.1)
	}
	for _, r := range subs {
		if reqContains(r, "6*7") {
			check("researcher", r, "research-model", 0.0)
		} else {
			check("general", r, "fake", nil)
		}
	}
	if m := field(s.get(s.chat("c1")+"/sub-agents/m1-t0"), "model"); m != "research-model" {
		t.Fatalf("researcher model %q", m)
	}
	if m := field(s.get(s.chat("c1")+"/sub-agents/m2-t0"), "model"); m != "fake" {
		t.Fatalf("general model %q", m)
	}
	if m := field(s.get(s.chat("c1")+"/messages/m1-reply"), "model"); m != "orch-model" {
		t.Fatalf("reply model %q", m)
	}
	s.noRetries()
}
