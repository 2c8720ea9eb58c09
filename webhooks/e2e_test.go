package webhooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// finalAnswer returns the chat message that reports a finished task.
func (s *stack) finalAnswer(chatID string) *collections.Document {
	for _, d := range s.docs(s.chat(chatID) + "/messages") {
		if strings.HasSuffix(d.ID, "-result") {
			return d
		}
	}
	return nil
}

// The demo with no LLM configured: one user message runs orchestrator →
// researcher → calculator → answer, every step a document.
func TestAgents_OfflineModelRunsTheWholePipeline(t *testing.T) {
	s := startStack(t, stackOpts{})
	s.say("c1", "m1", "What is 6*7?")
	s.waitFor("the final answer in the chat", 15*time.Second, func() bool { return s.finalAnswer("c1") != nil })

	ans := s.finalAnswer("c1")
	if !strings.Contains(field(ans, "content"), "42") || field(ans, "role") != "assistant" {
		t.Fatalf("answer %v", ans.Data)
	}
	reply := s.get(s.chat("c1") + "/messages/m1-reply")
	if !strings.HasPrefix(field(reply, "content"), "[offline model]") {
		t.Fatalf("orchestrator reply %v", reply)
	}
	task := s.get(s.chat("c1") + "/tasks/m1-t0")
	if field(task, "status") != "success" || field(task, "type") != "agent" || field(task, "name") != "agent:researcher" ||
		field(task, "triggerMessageId") != "m1" || field(task, "subAgentId") != "m1-t0" {
		t.Fatalf("task %v", task.Data)
	}
	sa := s.get(s.chat("c1") + "/sub-agents/m1-t0")
	if field(sa, "status") != "completed" || field(sa, "taskId") != "m1-t0" {
		t.Fatalf("sub-agent %v", sa.Data)
	}
	var roles []string
	for _, m := range s.docs(s.chat("c1") + "/sub-agents/m1-t0/messages") {
		roles = append(roles, field(m, "role"))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,assistant" {
		t.Fatalf("sub-agent messages %v\n%s", roles, s.dump())
	}
	calls := s.docs(s.chat("c1") + "/sub-agents/m1-t0/tool-calls")
	if len(calls) != 1 || field(calls[0], "toolName") != "calculator" || field(calls[0], "status") != "success" {
		t.Fatalf("tool calls %v", s.dump())
	}
	// Every delivery succeeded on its first attempt (the last ones may
	// still be recording their outcome when the answer appears).
	var ds []*triggers.Delivery
	s.waitFor("every delivery recorded", 5*time.Second, func() bool {
		var err error
		ds, _, err = s.trig.Deliveries(context.Background(), triggers.DeliveryQuery{Status: triggers.StatusPending, Limit: 100})
		return err == nil && len(ds) == 0
	})
	ds, _, err := s.trig.Deliveries(context.Background(), triggers.DeliveryQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Status == triggers.StatusScheduled {
			continue // the chat's idle timer, not yet due
		}
		if d.Status != triggers.StatusDelivered || len(d.Attempts) != 1 {
			t.Fatalf("delivery %s of %s: %s after %d attempts\n%s", d.ID, d.TriggerID, d.Status, len(d.Attempts), s.dump())
		}
	}
}
