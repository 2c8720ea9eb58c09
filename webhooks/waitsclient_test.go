package webhooks_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// A step calls a client tool and ask_user. Whichever is answered first,
// the loop resumes only once both are: the model is asked again once, with
// the client's result and the user's answer, and while it is asked the
// task is running and the sub-agent active. In between, the task shows
// what it still waits for: waiting (the user) or waiting_tool (the app).
func TestWaits_ClientToolAndAskUserInOneStep(t *testing.T) {
	for _, clientFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("clientFirst=%v", clientFirst), func(t *testing.T) {
			var (
				mu       sync.Mutex
				s        *stack
				statuses string // task/sub-agent when the model is asked again
			)
			fake, model := newFake(t, script{
				sub: func(n int, req map[string]any) llmtest.Step {
					if n == 0 {
						return llmtest.Step{ToolCalls: []llm.ToolCall{
							call("call_pick", "pick_file", `{"accept":"image/*"}`),
							call("call_ask", "ask_user", `{"question":"Which size?"}`),
						}}
					}
					chat := s.chat("c1")
					mu.Lock()
					statuses = field(s.get(chat+"/tasks/m1-t0"), "status") + "/" + field(s.get(chat+"/sub-agents/m1-t0"), "status")
					mu.Unlock()
					pick, _ := toolResultIn(req, "call_pick")
					ask, _ := toolResultIn(req, "call_ask")
					return llmtest.Step{Content: "picked " + pick + ", size " + lastUserText(req) + " (" + ask + ")"}
				},
			})
			s = startClientStack(t, model, pickFile(120000), "pick_file")
			s.say("c1", "m1", "Pick a picture and ask the size.")
			chat := s.chat("c1")
			task, agent, pick := chat+"/tasks/m1-t0", chat+"/sub-agents/m1-t0", chat+"/sub-agents/m1-t0/tool-calls/call_pick"
			s.waitFor("the question and the client call", 15*time.Second, func() bool {
				return len(s.questions("c1")) == 1 && field(s.get(pick), "status") == "pending"
			})
			s.settle(10 * time.Second)
			if st := field(s.get(task), "status") + "/" + field(s.get(agent), "status"); st != "waiting/waiting" {
				t.Fatalf("statuses %s while both are open", st)
			}
			answerClient := func() {
				if code := s.patchAs(pick, s.token, `{"status":"success","result":"cat.png"}`); code != 200 {
					t.Fatalf("client result: %d", code)
				}
			}
			answerUser := func() { s.answer("c1", "m2", s.questions("c1")["m1-t0"].ID, "Large") }
			first, second := answerUser, answerClient
			if clientFirst {
				first, second = answerClient, answerUser
			}
			first()
			s.settle(10 * time.Second)
			if n := len(fake.reqs("sub")); n != 1 {
				t.Fatalf("%d sub-agent requests with one of the two answered\n%s", n, s.dump())
			}
			// What is still open shows: the question (waiting), or the
			// client call (waiting_tool).
			want := "waiting_tool/waiting"
			if clientFirst {
				want = "waiting/waiting"
			}
			if st := field(s.get(task), "status") + "/" + field(s.get(agent), "status"); st != want {
				t.Fatalf("statuses %s with one of the two answered, want %s\n%s", st, want, s.dump())
			}
			second()
			s.waitFor("the task done", 15*time.Second, s.taskDone("c1", "m1-t0"))
			s.settle(10 * time.Second)

			if n := len(fake.reqs("sub")); n != 2 {
				t.Fatalf("%d sub-agent requests, want 2", n)
			}
			want = `picked "cat.png", size Large (The question was sent to the user; their reply follows.)`
			if r := field(s.get(task), "result"); r != want {
				t.Fatalf("result %q, want %q\n%s", r, want, s.dump())
			}
			mu.Lock()
			defer mu.Unlock()
			if statuses != "running/active" {
				t.Fatalf("task/sub-agent %s when the model was asked again", statuses)
			}
			if st := field(s.get(agent), "status"); st != "completed" {
				t.Fatalf("sub-agent %s", st)
			}
			s.noRetries()
		})
	}
}
