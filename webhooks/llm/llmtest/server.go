// Package llmtest provides a scripted fake OpenAI-compatible chat-completions
// server for tests, built on net/http/httptest.
package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm"
)

// Step is the scripted answer to one request.
type Step struct {
	Content      string
	ToolCalls    []llm.ToolCall // returned as OpenAI tool_calls (type function)
	FinishReason string         // default: tool_calls if calls else stop
	// Status, when non-zero, makes the server respond with this HTTP status
	// and an OpenAI-style error body (message: Content, or the status text).
	Status int
	Usage  *llm.Usage // default: 10 prompt + 5 completion tokens
	// Check is an optional assertion on the decoded request body. It runs on
	// the server's goroutine: report with t.Errorf, not t.Fatal.
	Check func(t testing.TB, req map[string]any)
	Delay time.Duration // before answering (cut short if the client gives up)
}

// Server is a fake OpenAI-compatible server. Point llm.Config.BaseURL at URL
// (or URL+"/v1").
type Server struct {
	URL string

	t     testing.TB
	srv   *httptest.Server
	mu    sync.Mutex
	steps []Step
	reqs  []map[string]any
	match func(req map[string]any) Step
}

// NewServer starts a server answering POST /chat/completions (and
// /v1/chat/completions): step k answers the k-th request; a request beyond
// the script fails the test. The server is closed when the test ends.
func NewServer(t testing.TB, steps ...Step) *Server {
	t.Helper()
	s := &Server{t: t, steps: steps}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /chat/completions", s.handle)
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("llmtest: unexpected request %s %s", r.Method, r.URL.Path)
		writeError(w, http.StatusNotFound, "llmtest: no route "+r.URL.Path)
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Requests returns the decoded request bodies received so far, in order.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.reqs...)
}

// Match makes fn choose the step for each request (for concurrent callers);
// the scripted steps are then ignored.
func (s *Server) Match(fn func(req map[string]any) Step) {
	s.mu.Lock()
	s.match = fn
	s.mu.Unlock()
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.t.Errorf("llmtest: bad request body: %v", err)
		writeError(w, http.StatusBadRequest, "llmtest: bad JSON body: "+err.Error())
		return
	}
	n, step, ok := s.next(req)
	if !ok {
		s.t.Errorf("llmtest: request #%d but only %d step(s) scripted; last message: %s", n+1, len(s.steps), lastMessage(req))
		w.Header().Set("x-should-retry", "false")
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("llmtest: no step scripted for request #%d", n+1))
		return
	}
	if step.Check != nil {
		step.Check(s.t, req)
	}
	if step.Delay > 0 {
		timer := time.NewTimer(step.Delay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return
		}
	}
	if step.Status != 0 {
		msg := step.Content
		if msg == "" {
			msg = http.StatusText(step.Status)
		}
		writeError(w, step.Status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(completion(n, req, step))
}

// next records req as request #n (from 0) and chooses its step: Match's
// choice, or the n-th scripted step (ok false when there is none).
func (s *Server) next(req map[string]any) (n int, step Step, ok bool) {
	s.mu.Lock()
	n = len(s.reqs)
	s.reqs = append(s.reqs, req)
	match := s.match
	ok = true
	if match == nil {
		if n < len(s.steps) {
			step = s.steps[n]
		} else {
			ok = false
		}
	}
	s.mu.Unlock()
	if match != nil {
		step = match(req)
	}
	return n, step, ok
}

// completion is the chat completion answering request #n with step.
func completion(n int, req map[string]any, step Step) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if step.Content != "" {
		msg["content"] = step.Content
	}
	if len(step.ToolCalls) > 0 {
		var calls []map[string]any
		for i, tc := range step.ToolCalls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_fake_%d_%d", n+1, i)
			}
			calls = append(calls, map[string]any{
				"id":       id,
				"type":     "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
			})
		}
		msg["tool_calls"] = calls
	}
	finish := step.FinishReason
	if finish == "" {
		finish = "stop"
		if len(step.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	usage := llm.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}
	if step.Usage != nil {
		usage = *step.Usage
	}
	model, _ := req["model"].(string)
	if model == "" {
		model = "fake-model"
	}
	return map[string]any{
		"id":      fmt.Sprintf("chatcmpl-fake-%d", n+1),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"finish_reason": finish,
			"logprobs":      nil,
		}},
		"usage": map[string]any{
			"prompt_tokens":     usage.PromptTokens,
			"completion_tokens": usage.CompletionTokens,
			"total_tokens":      usage.TotalTokens,
		},
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil},
	})
}

func lastMessage(req map[string]any) string {
	msgs, _ := req["messages"].([]any)
	if len(msgs) == 0 {
		return "(none)"
	}
	b, _ := json.Marshal(msgs[len(msgs)-1])
	return string(b)
}
