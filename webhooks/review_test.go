package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// A client call must not be handed to the client app for a canceled task:
// a step of the task's loop that was written before the cancel, carried out
// after it (a redelivery after a crash, or the cancel landing between the
// step's write and its follow-up), creates no pending call; and a pending
// call the settlement missed (created after it queried the pending calls)
// is canceled when tool-runner sees it, not left to the app.
func TestReview_NoClientCallForACanceledTask(t *testing.T) {
	_, s, task, pick := pendingPick(t)
	agent := s.chat("c1") + "/sub-agents/m1-t0"
	if code := s.patchAs(task, s.token, `{"status":"canceled"}`); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	s.canceledNotice("c1", "m1-t0")
	s.settle(10 * time.Second)
	if st := field(s.get(pick), "status"); st != "canceled" {
		t.Fatalf("client call %q after the settlement", st)
	}

	// The settlement ran before the call existed: the call is pending
	// (as the step's follow-up created it after the settlement's query).
	if code := s.patchAs(pick, adminKey, `{"status":"pending"}`); code != 200 {
		t.Fatalf("re-pending the call: %d", code)
	}
	if code := s.postSigned("tool-runner", "evt-review-create", "create", s.get(pick)); code != 200 {
		t.Fatalf("tool-runner: %d", code)
	}
	if st := field(s.get(pick), "status"); st != "canceled" {
		t.Fatalf("a client call of a canceled task is %q: the app would run it\n%s", st, s.dump())
	}

	// The step's follow-up runs after the cancel (a redelivery of the
	// event the step answers): no call is created for the app.
	if code, _ := s.do("DELETE", "/api/v1/databases/default/documents/"+pick, adminKey, ""); code != 200 && code != 204 {
		t.Fatalf("deleting the call: %d", code)
	}
	step := s.get(agent + "/messages/m000002")
	if step == nil || field(step, "role") != "assistant" {
		t.Fatalf("no step at seq 2\n%s", s.dump())
	}
	instr := s.get(agent + "/messages/" + field(step, "inReplyTo"))
	if instr == nil {
		t.Fatalf("no message %q", field(step, "inReplyTo"))
	}
	if code := s.postSigned("agent-loop", "evt-review-loop", "create", instr); code != 200 {
		t.Fatalf("agent-loop: %d", code)
	}
	s.settle(10 * time.Second)
	if tc := s.get(pick); tc != nil {
		t.Fatalf("a call (%s) was created for a canceled task\n%s", field(tc, "status"), s.dump())
	}
}

// The owner's app answers a client call before tool-runner first saw it
// (it watches the pending calls and answers at once): the runtime still
// checks the call as it checks one it hands to the app, and a call the
// role does not offer gets the runtime's refusal as its outcome, not the
// app's result.
func TestReview_ClientResultForARefusedCall(t *testing.T) {
	fake, model := newFake(t, script{
		sub: func(n int, req map[string]any) llmtest.Step {
			if n == 0 {
				return llmtest.Step{ToolCalls: []llm.ToolCall{call("call_pick", "pick_file", `{"accept":"a"}`)}}
			}
			return llmtest.Step{Content: "done"}
		},
	})
	// The researcher is not offered pick_file; the model calls it anyway.
	s := startClientStack(t, model, pickFile(60000), "calculator")
	ctx := context.Background()
	if err := s.trig.Disable(ctx, "on-sub-agent-tool"); err != nil {
		t.Fatal(err)
	}
	s.say("c1", "m1", "Pick a file.")
	pick := s.chat("c1") + "/sub-agents/m1-t0/tool-calls/call_pick"
	s.waitFor("the client call", 15*time.Second, func() bool { return field(s.get(pick), "status") == "pending" })
	if code := s.patchAs(pick, s.token, `{"status":"success","result":"forged"}`); code != 200 {
		t.Fatalf("the app's result: %d", code)
	}
	s.waitFor("the model's next step", 15*time.Second, func() bool { return len(fake.reqs("sub")) == 2 })
	got, ok := toolResultIn(fake.reqs("sub")[1], "call_pick")
	if !ok || strings.Contains(got, "forged") || !strings.Contains(got, "not available") {
		t.Fatalf("the model saw %q (%v) for a call the role does not offer", got, ok)
	}
	if tc := s.get(pick); field(tc, "status") != "failed" || tc.Data["result"] != nil {
		t.Fatalf("call %v", tc.Data)
	}
	if err := s.trig.Enable(ctx, "on-sub-agent-tool"); err != nil {
		t.Fatal(err)
	}
	s.settle(10 * time.Second)
	if n := s.toolMsgCount("c1", "m1-t0", "call_pick"); n != 1 {
		t.Fatalf("%d tool messages for the call", n)
	}
}

// The orchestrator carries out a plan of several run_tool calls one after
// the other; the user cancels the chat's run while the first tool runs:
// the later ones do not run (their tasks are canceled), and the first one's
// result is discarded.
func TestReview_ChatCancelStopsTheRestOfAPlan(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		fmt.Fprint(w, "page")
	}))
	var once sync.Once
	t.Cleanup(srv.Close)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	runTool := func(id, url string) llm.ToolCall {
		args, _ := json.Marshal(map[string]any{"name": "http_get", "args": map[string]any{"url": url}})
		return llm.ToolCall{ID: id, Name: "run_tool", Arguments: string(args)}
	}
	_, model := newFake(t, script{
		orch: func(int, map[string]any) llmtest.Step {
			return llmtest.Step{Content: "Fetching.", ToolCalls: []llm.ToolCall{runTool("call_a", srv.URL+"/slow"), runTool("call_b", srv.URL+"/after")}}
		},
	})
	s := startStack(t, stackOpts{model: model})
	s.say("c1", "m1", "Fetch two pages")
	first, second := s.chat("c1")+"/tasks/m1-t0", s.chat("c1")+"/tasks/m1-t1"
	s.waitFor("the first tool running", 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hits["/slow"] == 1 && field(s.get(first), "status") == "running"
	})
	// The orchestrator created the chat document with the user's first
	// message: the app patches it.
	if code := s.write("PATCH", s.chat("c1"), s.token, map[string]any{"runStatus": "canceled"}); code != 200 {
		t.Fatalf("cancel the chat: %d", code)
	}
	s.waitFor("the first task canceled", 15*time.Second, func() bool { return field(s.get(first), "status") == "canceled" })
	once.Do(func() { close(release) })
	s.settle(10 * time.Second)
	mu.Lock()
	after := hits["/after"]
	mu.Unlock()
	if after != 0 {
		t.Fatalf("the plan's next tool ran after the chat's run was canceled\n%s", s.dump())
	}
	if tk := s.get(second); tk != nil && field(tk, "status") != "canceled" {
		t.Fatalf("the plan's next task %v", tk.Data)
	}
	if tk := s.get(first); field(tk, "status") != "canceled" || tk.Data["result"] != nil {
		t.Fatalf("the first task %v", tk.Data)
	}
}

// A task that fails while a client call of its step is pending (a
// handler's permanent failure, an operator): the call is canceled, not
// left pending for the app to run, and a late result is refused.
func TestReview_FailedTaskCancelsItsPendingClientCalls(t *testing.T) {
	_, s, task, pick := pendingPick(t)
	if code := s.patchAs(task, adminKey, `{"status":"failed","error":"stopped"}`); code != 200 {
		t.Fatalf("ending the task: %d", code)
	}
	s.waitFor("the failure in the chat", 10*time.Second, s.taskDone("c1", "m1-t0"))
	s.settle(10 * time.Second)
	if st := field(s.get(pick), "status"); st != "canceled" {
		t.Fatalf("the client call of a failed task is %q\n%s", st, s.dump())
	}
	if code := s.patchAs(pick, s.token, `{"status":"success","result":"late"}`); code != 403 {
		t.Fatalf("a late result: %d, want 403", code)
	}
}
