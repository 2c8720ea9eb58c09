package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

func newClient(t *testing.T, srv *llmtest.Server, mod func(*llm.Config)) llm.Model {
	t.Helper()
	cfg := llm.Config{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "test-model", Timeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	m, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func user(s string) llm.Message { return llm.Message{Role: "user", Content: s} }

func TestPlainAnswer(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Step{Content: "Paris.", Check: func(t testing.TB, req map[string]any) {
		if req["model"] != "test-model" {
			t.Errorf("model = %v", req["model"])
		}
		if _, ok := req["tools"]; ok {
			t.Errorf("tools sent without tools: %v", req["tools"])
		}
		msgs := req["messages"].([]any)
		if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[1].(map[string]any)["content"] != "Capital of France?" {
			t.Errorf("messages = %v", msgs)
		}
	}})
	m := newClient(t, srv, nil)
	if m.Name() != "test-model" {
		t.Errorf("Name = %q", m.Name())
	}
	resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: "system", Content: "Be brief."}, user("Capital of France?")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "Paris." || resp.FinishReason != "stop" || len(resp.ToolCalls) != 0 || resp.Model != "test-model" {
		t.Errorf("resp = %+v", resp)
	}
	if resp.Usage != (llm.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestParallelToolCallsAndToolsSent(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{"expression": map[string]any{"type": "string"}}, "required": []any{"expression"}}
	srv := llmtest.NewServer(t, llmtest.Step{
		ToolCalls: []llm.ToolCall{
			{ID: "call_a", Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{ID: "call_b", Name: "current_time", Arguments: `{}`},
		},
		Usage: &llm.Usage{PromptTokens: 123, CompletionTokens: 45, TotalTokens: 168},
		Check: func(t testing.TB, req map[string]any) {
			tools := req["tools"].([]any)
			if len(tools) != 2 {
				t.Errorf("tools = %v", tools)
				return
			}
			t0 := tools[0].(map[string]any)
			fn := t0["function"].(map[string]any)
			if t0["type"] != "function" || fn["name"] != "calculator" || fn["description"] != "Evaluates arithmetic." {
				t.Errorf("tool 0 = %v", t0)
			}
			params := fn["parameters"].(map[string]any)
			if params["type"] != "object" || params["properties"].(map[string]any)["expression"] == nil || params["required"].([]any)[0] != "expression" {
				t.Errorf("parameters = %v", params)
			}
			p1 := tools[1].(map[string]any)["function"].(map[string]any)["parameters"].(map[string]any)
			if p1["type"] != "object" {
				t.Errorf("default parameters = %v", p1)
			}
			if req["parallel_tool_calls"] != true {
				t.Errorf("parallel_tool_calls = %v", req["parallel_tool_calls"])
			}
			if req["max_tokens"] != float64(256) {
				t.Errorf("max_tokens = %v", req["max_tokens"])
			}
		},
	})
	m := newClient(t, srv, nil)
	resp, err := m.Complete(context.Background(), llm.Request{
		Messages:  []llm.Message{user("6*7 and the time?")},
		Tools:     []llm.Tool{{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: schema}, {Name: "current_time"}},
		MaxTokens: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "call_a", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_b", Name: "current_time", Arguments: `{}`},
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0] != want[0] || resp.ToolCalls[1] != want[1] {
		t.Errorf("tool calls = %+v", resp.ToolCalls)
	}
	if resp.FinishReason != "tool_calls" || resp.Content != "" {
		t.Errorf("resp = %+v", resp)
	}
	if resp.Usage != (llm.Usage{PromptTokens: 123, CompletionTokens: 45, TotalTokens: 168}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestConversationShape(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Step{Content: "42 it is.", Check: func(t testing.TB, req map[string]any) {
		msgs := req["messages"].([]any)
		if len(msgs) != 5 {
			t.Errorf("messages = %v", msgs)
			return
		}
		a := msgs[2].(map[string]any)
		if a["role"] != "assistant" {
			t.Errorf("msg 2 = %v", a)
		}
		calls := a["tool_calls"].([]any)
		if len(calls) != 2 {
			t.Errorf("tool_calls = %v", calls)
			return
		}
		c0 := calls[0].(map[string]any)
		f0 := c0["function"].(map[string]any)
		if c0["id"] != "call_1" || c0["type"] != "function" || f0["name"] != "calculator" || f0["arguments"] != `{"expression":"6*7"}` {
			t.Errorf("call 0 = %v", c0)
		}
		if calls[1].(map[string]any)["function"].(map[string]any)["name"] != "current_time" {
			t.Errorf("call 1 = %v", calls[1])
		}
		for i, id := range map[int]string{3: "call_1", 4: "call_2"} {
			tm := msgs[i].(map[string]any)
			if tm["role"] != "tool" || tm["tool_call_id"] != id {
				t.Errorf("msg %d = %v", i, tm)
			}
		}
		if msgs[3].(map[string]any)["content"] != `{"result":42}` {
			t.Errorf("tool content = %v", msgs[3])
		}
		if msgs[1].(map[string]any)["name"] != "alice" {
			t.Errorf("user name = %v", msgs[1])
		}
	}})
	m := newClient(t, srv, nil)
	resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{
		{Role: "system", Content: "You are a researcher."},
		{Role: "user", Content: "6*7 and time?", Name: "alice"},
		{Role: "assistant", ToolCalls: []llm.ToolCall{
			{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{ID: "call_2", Name: "current_time", Arguments: `{}`},
		}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"result":42}`},
		{Role: "tool", ToolCallID: "call_2", Content: `{"time":"12:00"}`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "42 it is." {
		t.Errorf("content = %q", resp.Content)
	}
	if got := len(srv.Requests()); got != 1 {
		t.Errorf("requests = %d", got)
	}
}

func TestBadMessages(t *testing.T) {
	srv := llmtest.NewServer(t)
	m := newClient(t, srv, nil)
	for _, msgs := range [][]llm.Message{{{Role: "robot", Content: "x"}}, {{Role: "tool", Content: "x"}}} {
		if _, err := m.Complete(context.Background(), llm.Request{Messages: msgs}); err == nil {
			t.Errorf("%v: no error", msgs)
		}
	}
}

func TestFinishReasonLength(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Step{Content: "A partial ans", FinishReason: "length"},
		llmtest.Step{FinishReason: "length"},
	)
	m := newClient(t, srv, nil)
	resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("long essay")}})
	if err != nil || resp.FinishReason != "length" || resp.Content != "A partial ans" {
		t.Fatalf("partial: %+v %v", resp, err)
	}
	_, err = m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("long essay")}})
	if !errors.Is(err, llm.ErrLength) {
		t.Fatalf("empty length: err = %v", err)
	}
}

func TestHTTPErrors(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Step{Status: 500, Content: "upstream exploded"},
		llmtest.Step{Status: 401, Content: "Incorrect API key provided"},
	)
	m := newClient(t, srv, func(c *llm.Config) { c.MaxRetries = -1 })
	_, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("hi")}})
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "upstream exploded") || llm.StatusCode(err) != 500 {
		t.Errorf("500: err = %v", err)
	}
	_, err = m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("hi")}})
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "Incorrect API key") || llm.StatusCode(err) != 401 {
		t.Errorf("401: err = %v", err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("requests = %d, want 2 (no retries)", n)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Step{Status: 503}, llmtest.Step{Content: "ok"})
	m := newClient(t, srv, nil) // default retries
	resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("hi")}})
	if err != nil || resp.Content != "ok" {
		t.Fatalf("resp = %+v, err = %v", resp, err)
	}
}

// TestTimeout: an attempt that outlives Config.Timeout fails with an error
// that wraps context.DeadlineExceeded and carries no HTTP status. The agent
// runtime relies on both: webhooks' permanent() treats DeadlineExceeded as
// transient (the handler answers 5xx and the delivery is retried), and a
// 4xx status would make it a permanent model error recorded for the user.
func TestTimeout(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Step{Content: "too late", Delay: 3 * time.Second})
	m := newClient(t, srv, func(c *llm.Config) { c.Timeout = 150 * time.Millisecond; c.MaxRetries = -1 })
	start := time.Now()
	_, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("hi")}})
	if err == nil {
		t.Fatal("no error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout error %q does not wrap context.DeadlineExceeded", err)
	}
	if code := llm.StatusCode(err); code != 0 {
		t.Errorf("timeout error %q carries HTTP status %d, want none", err, code)
	}
	if !strings.HasPrefix(err.Error(), "llm: test-model: ") {
		t.Errorf("timeout error %q does not name the model", err)
	}
}

func TestMatchConcurrent(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Match(func(req map[string]any) llmtest.Step {
		msgs := req["messages"].([]any)
		return llmtest.Step{Content: "echo " + msgs[len(msgs)-1].(map[string]any)["content"].(string)}
	})
	m := newClient(t, srv, nil)
	errs := make(chan error, 5)
	for i := range 5 {
		go func() {
			q := strings.Repeat("x", i+1)
			resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user(q)}})
			if err == nil && resp.Content != "echo "+q {
				err = errors.New("wrong answer " + resp.Content)
			}
			errs <- err
		}()
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("requests = %d", n)
	}
}

func TestNewOfflineAndInvalid(t *testing.T) {
	m, err := llm.New(llm.Config{})
	if err != nil || m.Name() != "offline" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := llm.New(llm.Config{BaseURL: "ftp://x"}); err == nil {
		t.Error("ftp base url accepted")
	}
	m, err = llm.New(llm.Config{BaseURL: "http://localhost:1/v1"})
	if err != nil || m.Name() != llm.DefaultModel {
		t.Errorf("%v %v", m, err)
	}
}

// ---- offline model ----

var (
	orchTools = []llm.Tool{{Name: "delegate_task"}, {Name: "run_tool"}}
	subTools  = []llm.Tool{{Name: "calculator"}, {Name: "current_time"}, {Name: "ask_user"}}
)

func offline(t *testing.T, req llm.Request) *llm.Response {
	t.Helper()
	resp, err := llm.Offline().Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "" && !strings.HasPrefix(resp.Content, llm.OfflinePrefix) {
		t.Errorf("content not labelled: %q", resp.Content)
	}
	for _, tc := range resp.ToolCalls {
		if !json.Valid([]byte(tc.Arguments)) || !strings.HasPrefix(tc.ID, "call_") || len(tc.ID) != 17 {
			t.Errorf("bad call %+v", tc)
		}
	}
	if (len(resp.ToolCalls) > 0) != (resp.FinishReason == "tool_calls") || (len(resp.ToolCalls) == 0 && resp.FinishReason != "stop") {
		t.Errorf("finish reason %q with %d calls", resp.FinishReason, len(resp.ToolCalls))
	}
	if resp.Model != "offline" || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens || resp.Usage.PromptTokens == 0 {
		t.Errorf("model/usage: %+v", resp)
	}
	return resp
}

func args(t *testing.T, tc llm.ToolCall) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(tc.Arguments), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOfflineOrchestratorDelegates(t *testing.T) {
	q := "Research the history of the Eiffel Tower"
	resp := offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{{Role: "system", Content: "orchestrate"}, user(q)}})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "delegate_task" {
		t.Fatalf("%+v", resp)
	}
	a := args(t, resp.ToolCalls[0])
	if a["agent"] != "researcher" || a["instruction"] != q {
		t.Errorf("args = %v", a)
	}
	if resp.Content != "[offline model] Delegating to the researcher." {
		t.Errorf("content = %q", resp.Content)
	}
}

func TestOfflineGreeting(t *testing.T) {
	for _, g := range []string{"hi", "Hello!", "hey there", "HI THERE YOU"} {
		resp := offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{user(g)}})
		if len(resp.ToolCalls) != 0 || resp.Content != "[offline model] Hello! Ask me something and I will delegate it to a researcher." {
			t.Errorf("%q: %+v", g, resp)
		}
	}
	resp := offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{user("hi can you research whales")}})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "delegate_task" {
		t.Errorf("long greeting-ish: %+v", resp)
	}
}

func TestOfflineToolCommand(t *testing.T) {
	resp := offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{user(`/tool calculator {"expression": "2+2"}`)}})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "run_tool" {
		t.Fatalf("%+v", resp)
	}
	a := args(t, resp.ToolCalls[0])
	if a["name"] != "calculator" || a["args"].(map[string]any)["expression"] != "2+2" {
		t.Errorf("args = %v", a)
	}
	resp = offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{user(`/tool current_time`)}})
	if a := args(t, resp.ToolCalls[0]); a["name"] != "current_time" || len(a["args"].(map[string]any)) != 0 {
		t.Errorf("no-args: %v", a)
	}
}

func TestOfflineSubAgentCalculatorThenResult(t *testing.T) {
	msgs := []llm.Message{{Role: "system", Content: "researcher"}, user("what is 6*7?")}
	resp := offline(t, llm.Request{Tools: subTools, Messages: msgs})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "calculator" || args(t, resp.ToolCalls[0])["expression"] != "6*7" {
		t.Fatalf("%+v", resp)
	}
	resp2 := offline(t, llm.Request{Tools: subTools, Messages: msgs})
	if resp2.ToolCalls[0].ID != resp.ToolCalls[0].ID || resp2.ToolCalls[0].Arguments != resp.ToolCalls[0].Arguments || resp2.Usage != resp.Usage {
		t.Errorf("not deterministic: %+v vs %+v", resp, resp2)
	}
	msgs = append(msgs,
		llm.Message{Role: "assistant", ToolCalls: resp.ToolCalls},
		llm.Message{Role: "tool", ToolCallID: resp.ToolCalls[0].ID, Content: `{"result":42}`},
	)
	final := offline(t, llm.Request{Tools: subTools, Messages: msgs})
	if len(final.ToolCalls) != 0 || final.Content != `[offline model] Result: {"result":42}` || final.FinishReason != "stop" {
		t.Errorf("final = %+v", final)
	}
	// Two tool results are joined.
	msgs = append(msgs, llm.Message{Role: "tool", ToolCallID: "x", Content: "second"})
	if got := offline(t, llm.Request{Tools: subTools, Messages: msgs}).Content; got != `[offline model] Result: {"result":42}; second` {
		t.Errorf("joined = %q", got)
	}
	// Different conversation → different id.
	other := offline(t, llm.Request{Tools: subTools, Messages: []llm.Message{user("what is 6*8?")}})
	if other.ToolCalls[0].ID == resp.ToolCalls[0].ID {
		t.Error("ids collide across conversations")
	}
	// An expression with parentheses and spaces.
	p := offline(t, llm.Request{Tools: subTools, Messages: []llm.Message{user("compute (2 + 3) * 4 please")}})
	if args(t, p.ToolCalls[0])["expression"] != "(2 + 3) * 4" {
		t.Errorf("expr = %v", p.ToolCalls[0].Arguments)
	}
}

func TestOfflineSubAgentAskUserAndTime(t *testing.T) {
	resp := offline(t, llm.Request{Tools: subTools, Messages: []llm.Message{user("Please ASK ME what to research")}})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "ask_user" || args(t, resp.ToolCalls[0])["question"] != "[offline model] What exactly should I look into?" {
		t.Fatalf("%+v", resp)
	}
	// The user's answer arrives as a new user message: decide again on it.
	resp = offline(t, llm.Request{Tools: subTools, Messages: []llm.Message{
		user("ask me"), {Role: "assistant", ToolCalls: resp.ToolCalls}, user("the time please"),
	}})
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "current_time" || resp.ToolCalls[0].Arguments != "{}" {
		t.Fatalf("%+v", resp)
	}
	// Arithmetic without a calculator → current_time; without either → direct answer.
	resp = offline(t, llm.Request{Tools: []llm.Tool{{Name: "current_time"}, {Name: "ask_user"}}, Messages: []llm.Message{user("1+1")}})
	if resp.ToolCalls[0].Name != "current_time" {
		t.Errorf("%+v", resp)
	}
	resp = offline(t, llm.Request{Tools: []llm.Tool{{Name: "ask_user"}}, Messages: []llm.Message{user("tell me about owls")}})
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Content, "owls") {
		t.Errorf("%+v", resp)
	}
}

func TestOfflineSummary(t *testing.T) {
	long := strings.Repeat("abcd", 100)
	resp := offline(t, llm.Request{Messages: []llm.Message{{Role: "system", Content: "summarise"}, user(long)}})
	if resp.Content != "[offline model] Summary: "+long[:200] || len(resp.ToolCalls) != 0 {
		t.Errorf("%+v", resp)
	}
	// ceil(len/4): prompt "summarise"(9) + 400 = 409 → 103.
	if resp.Usage.PromptTokens != 103 || resp.Usage.CompletionTokens != (len(resp.Content)+3)/4 {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestOfflineCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := llm.Offline().Complete(ctx, llm.Request{Messages: []llm.Message{user("x")}}); err == nil {
		t.Error("no error on canceled context")
	}
}

// The offline model echoes the rules' notifications, so a user sees
// notify_self reach the model without an LLM; other system messages are
// not echoed.
func TestOfflineEchoesNotifications(t *testing.T) {
	msgs := []llm.Message{
		{Role: "system", Content: "orchestrate"},
		{Role: "system", Content: "[notification warning/high] Token budget at 85%."},
		{Role: "system", Content: "[notification info/normal] Be brief."},
		user("hi"),
	}
	resp := offline(t, llm.Request{Tools: orchTools, Messages: msgs})
	want := "[offline model] Hello! Ask me something and I will delegate it to a researcher. (notified: Token budget at 85%.; Be brief.)"
	if resp.Content != want {
		t.Errorf("content = %q, want %q", resp.Content, want)
	}
	// A tool-calling turn has no content of its own: the echo is all of it.
	resp = offline(t, llm.Request{Tools: subTools, Messages: []llm.Message{msgs[1], user("What is 6*7?")}})
	if resp.Content != "[offline model] (notified: Token budget at 85%.)" || len(resp.ToolCalls) != 1 {
		t.Errorf("tool turn: %+v", resp)
	}
	resp = offline(t, llm.Request{Tools: orchTools, Messages: []llm.Message{{Role: "system", Content: "notification: no"}, user("hi")}})
	if strings.Contains(resp.Content, "notified") {
		t.Errorf("echoed a plain system message: %q", resp.Content)
	}
}

// A request's Model and Temperature override the client's model and the
// provider's default temperature; unset, neither is sent differently.
func TestRequestModelAndTemperature(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Step{Content: "a", Check: func(t testing.TB, req map[string]any) {
			if req["model"] != "role-model" || req["temperature"] != 0.0 {
				t.Errorf("model = %v, temperature = %v", req["model"], req["temperature"])
			}
		}},
		llmtest.Step{Content: "b", Check: func(t testing.TB, req map[string]any) {
			if _, ok := req["temperature"]; ok || req["model"] != "test-model" {
				t.Errorf("model = %v, temperature = %v (want none)", req["model"], req["temperature"])
			}
		}},
	)
	m := newClient(t, srv, nil)
	zero := 0.0
	resp, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("x")}, Model: "role-model", Temperature: &zero})
	if err != nil || resp.Model != "role-model" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if _, err := m.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("x")}}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("%d requests", n)
	}
}
