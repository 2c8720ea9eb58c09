// Package llm talks to OpenAI-compatible chat-completions endpoints, or runs the offline model.
//
// New returns the OpenAI-compatible client (through the official SDK,
// github.com/openai/openai-go/v3) when Config.BaseURL is set, and the
// deterministic offline model otherwise. Both implement Model.
package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Message is one chat message.
type Message struct {
	Role       string // system | user | assistant | tool
	Content    string
	Name       string     // optional
	ToolCallID string     // role tool: the call it answers
	ToolCalls  []ToolCall // role assistant
}

// ToolCall is one function call requested by the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text, verbatim from the model
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any // JSON schema (type object)
}

// Request is one chat-completions call.
type Request struct {
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0 = model default
	// Model overrides the client's configured model for this call ("" =
	// that one). The offline model ignores it.
	Model string
	// Temperature is the sampling temperature (nil = the provider's
	// default). The offline model ignores it.
	Temperature *float64
}

// Usage is the token accounting of one call.
type Usage struct{ PromptTokens, CompletionTokens, TotalTokens int }

// Response is the first choice of a chat completion.
type Response struct {
	Content      string
	ToolCalls    []ToolCall // parallel tool calls, in order
	FinishReason string     // stop | tool_calls | length | content_filter | ...
	Usage        Usage
	Model        string
}

// Model is one chat-completions backend.
type Model interface {
	Complete(ctx context.Context, req Request) (*Response, error)
	Name() string // e.g. "gpt-4o-mini" or "offline"
}

// Config selects and configures the backend.
type Config struct {
	BaseURL    string // e.g. https://api.openai.com/v1 ; "" means offline
	APIKey     string
	Model      string        // default "gpt-4o-mini"
	Timeout    time.Duration // per request attempt, default 60s
	HTTPClient *http.Client  // optional (tests)
	// MaxRetries is how often a failed attempt (connection error, timeout,
	// 408/409/429/5xx) is retried by the SDK: 0 means the default (2), a
	// negative value means no retries.
	MaxRetries int
}

// Defaults.
const (
	DefaultModel      = "gpt-4o-mini"
	DefaultTimeout    = 60 * time.Second
	DefaultMaxRetries = 2
)

// ErrLength is returned (wrapped) when the model stopped at the token limit
// without producing any content or tool call. A partial response (content or
// tool calls present) is returned without error, with FinishReason "length".
var ErrLength = errors.New("llm: the model stopped at the token limit")

// HTTPError is an error status returned by the endpoint. Complete wraps it,
// so use errors.As to inspect it.
type HTTPError struct {
	StatusCode int
	Message    string // the provider's error message, if any
	Err        error  // the SDK error
}

func (e *HTTPError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("HTTP %d: %s", e.StatusCode, msg)
}

func (e *HTTPError) Unwrap() error { return e.Err }

// StatusCode returns the HTTP status carried by err (an *HTTPError in its
// chain), or 0.
func StatusCode(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return 0
}

// New returns the OpenAI-compatible client when cfg.BaseURL is set, the offline model otherwise.
func New(cfg Config) (Model, error) {
	if strings.TrimSpace(cfg.BaseURL) == "" {
		return Offline(), nil
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: invalid base_url %q", cfg.BaseURL)
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithRequestTimeout(cfg.Timeout),
		option.WithMaxRetries(retries),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	c := openai.NewClient(opts...)
	return &client{c: c, model: cfg.Model}, nil
}

type client struct {
	c     openai.Client
	model string
}

func (c *client) Name() string { return c.model }

// modelOf is the model a request asks for: its own, else the client's.
func (c *client) modelOf(req Request) string {
	if req.Model != "" {
		return req.Model
	}
	return c.model
}

func (c *client) Complete(ctx context.Context, req Request) (*Response, error) {
	name := c.modelOf(req)
	params, err := c.params(req)
	if err != nil {
		return nil, err
	}
	cc, err := c.c.Chat.Completions.New(ctx, params)
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return nil, fmt.Errorf("llm: %s: %w", name, &HTTPError{StatusCode: apiErr.StatusCode, Message: apiErr.Message, Err: err})
		}
		return nil, fmt.Errorf("llm: %s: %w", name, err)
	}
	if len(cc.Choices) == 0 {
		return nil, fmt.Errorf("llm: %s: response has no choices", name)
	}
	ch := cc.Choices[0]
	resp := &Response{
		Content:      ch.Message.Content,
		FinishReason: ch.FinishReason,
		Model:        cc.Model,
		Usage: Usage{
			PromptTokens:     int(cc.Usage.PromptTokens),
			CompletionTokens: int(cc.Usage.CompletionTokens),
			TotalTokens:      int(cc.Usage.TotalTokens),
		},
	}
	if resp.Model == "" {
		resp.Model = name
	}
	if resp.Content == "" && ch.Message.Refusal != "" {
		resp.Content = ch.Message.Refusal
	}
	for _, tc := range ch.Message.ToolCalls {
		switch tc.Type {
		case "custom":
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Custom.Name, Arguments: tc.Custom.Input})
		default: // "function" (or missing, from lenient servers)
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	if resp.FinishReason == "" {
		if len(resp.ToolCalls) > 0 {
			resp.FinishReason = "tool_calls"
		} else {
			resp.FinishReason = "stop"
		}
	}
	if resp.FinishReason == "length" && resp.Content == "" && len(resp.ToolCalls) == 0 {
		return nil, fmt.Errorf("%w (model %s, %d completion tokens)", ErrLength, name, resp.Usage.CompletionTokens)
	}
	return resp, nil
}

func (c *client) params(req Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.modelOf(req))}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	for i, m := range req.Messages {
		mp, err := messageParam(m)
		if err != nil {
			return p, fmt.Errorf("llm: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(params)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if len(p.Tools) > 0 {
		p.ParallelToolCalls = openai.Bool(true)
	}
	if req.MaxTokens > 0 {
		// max_tokens rather than max_completion_tokens: understood by every
		// OpenAI-compatible server (Ollama, vLLM, llama.cpp, OpenRouter).
		p.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	return p, nil
}

func messageParam(m Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case "system":
		u := openai.SystemMessage(m.Content)
		if m.Name != "" {
			u.OfSystem.Name = openai.String(m.Name)
		}
		return u, nil
	case "developer":
		u := openai.DeveloperMessage(m.Content)
		if m.Name != "" {
			u.OfDeveloper.Name = openai.String(m.Name)
		}
		return u, nil
	case "user":
		u := openai.UserMessage(m.Content)
		if m.Name != "" {
			u.OfUser.Name = openai.String(m.Name)
		}
		return u, nil
	case "assistant":
		a := openai.ChatCompletionAssistantMessageParam{}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Content)
		}
		if m.Name != "" {
			a.Name = openai.String(m.Name)
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: args,
					},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case "tool":
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool call id")
		}
		return openai.ToolMessage(m.Content, m.ToolCallID), nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}
