package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
)

// OfflinePrefix starts every content the offline model writes.
const OfflinePrefix = "[offline model] "

// Offline returns the deterministic offline model: no network, every content
// it writes starts with OfflinePrefix. It decides by the tools it is offered:
//
//   - "delegate_task" offered (the orchestrator): "/tool <name> <json args>" in
//     the last user message → one run_tool call; a short greeting → a plain
//     reply; anything else → one delegate_task call to the researcher.
//   - other tools offered (a sub-agent): before any tool result after the last
//     user message: "ask me" → ask_user; an arithmetic expression with
//     "calculator" offered → calculator; "current_time" offered →
//     current_time; else a direct answer. Once tool results are in → the final
//     answer "Result: <tool results joined by '; '>".
//   - no tools (summaries): "Summary: " + the last user message (200 chars);
//     but a chat compression (system message starting ChatSummaryPrefix) is
//     answered with the JSON it asks for: chatSummary.
//
// When the request carries notifications of the lifecycle rules (system
// messages starting "[notification "), the content ends with
// " (notified: <message>; <message>)", their messages in prompt order.
//
// Tool call ids are "call_" + 12 hex of sha256(conversation + tool name);
// usage counts ceil(len(text)/4) tokens.
func Offline() Model { return offline{} }

type offline struct{}

func (offline) Name() string { return "offline" }

var (
	arithRe    = regexp.MustCompile(`[0-9(][0-9+\-*/(). ]*[0-9)]`)
	greetWords = map[string]bool{"hi": true, "hello": true, "hey": true}
)

func (o offline) Complete(ctx context.Context, req Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	lastUser, userText := lastUserMessage(req.Messages)

	var content string
	var call *ToolCall
	switch {
	case len(req.Tools) == 0 && isChatSummary(req.Messages):
		content = OfflinePrefix + chatSummary(userText)
	case len(req.Tools) == 0:
		content = OfflinePrefix + "Summary: " + truncate(userText, 200)
	case offered["delegate_task"]:
		content, call = o.orchestratorTurn(req, userText)
	default:
		content, call = o.agentTurn(req, offered, req.Messages[lastUser+1:], userText)
	}

	if notes := notifications(req.Messages); len(notes) > 0 {
		// Show that the rules' notify_self reached the model: the user sees
		// it in the answer without a real LLM.
		if content == "" {
			content = OfflinePrefix + "(notified: " + strings.Join(notes, "; ") + ")"
		} else {
			content += " (notified: " + strings.Join(notes, "; ") + ")"
		}
	}
	resp := &Response{Content: content, Model: "offline", FinishReason: "stop"}
	completion := content
	if call != nil {
		resp.ToolCalls = []ToolCall{*call}
		resp.FinishReason = "tool_calls"
		completion += call.Name + call.Arguments
	}
	resp.Usage.PromptTokens = ceilDiv4(promptChars(req.Messages))
	resp.Usage.CompletionTokens = ceilDiv4(len(completion))
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	return resp, nil
}

// notificationPrefix starts the system message of a rules notification
// ("[notification <category>/<priority>] <message>").
const notificationPrefix = "[notification "

// notifications are the messages of the request's notifications.
func notifications(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role != "system" || !strings.HasPrefix(m.Content, notificationPrefix) {
			continue
		}
		text := m.Content
		if _, after, ok := strings.Cut(text, "] "); ok {
			text = after
		}
		out = append(out, truncate(text, 200))
	}
	return out
}

// lastUserMessage is the index and text of the last user message (-1 and
// the last message's text when there is none).
func lastUserMessage(msgs []Message) (int, string) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return i, msgs[i].Content
		}
	}
	if n := len(msgs); n > 0 {
		return -1, msgs[n-1].Content
	}
	return -1, ""
}

// orchestratorTurn answers as the orchestrator: "/tool name {args}" runs
// a tool, a greeting is answered, anything else goes to the researcher.
func (o offline) orchestratorTurn(req Request, userText string) (string, *ToolCall) {
	text := strings.TrimSpace(userText)
	if name, args, ok := parseToolCommand(text); ok {
		return OfflinePrefix + "Running tool " + name + ".", o.call(req, "run_tool", map[string]any{"name": name, "args": args})
	}
	if isGreeting(text) {
		return OfflinePrefix + "Hello! Ask me something and I will delegate it to a researcher.", nil
	}
	return OfflinePrefix + "Delegating to the researcher.", o.call(req, "delegate_task", map[string]any{"agent": "researcher", "instruction": userText})
}

// agentTurn answers as a sub-agent: with the tool results since the user's
// message (after), else by calling the one offered tool that fits.
func (o offline) agentTurn(req Request, offered map[string]bool, after []Message, userText string) (string, *ToolCall) {
	var results []string
	for _, m := range after {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	expr := arithmetic(userText)
	switch {
	case len(results) > 0:
		return OfflinePrefix + "Result: " + strings.Join(results, "; "), nil
	case offered["ask_user"] && strings.Contains(strings.ToLower(userText), "ask me"):
		return "", o.call(req, "ask_user", map[string]any{"question": OfflinePrefix + "What exactly should I look into?"})
	case expr != "" && offered["calculator"]:
		return "", o.call(req, "calculator", map[string]any{"expression": expr})
	case offered["current_time"]:
		return "", o.call(req, "current_time", map[string]any{})
	default:
		return OfflinePrefix + "Answer: " + truncate(userText, 200), nil
	}
}

// promptChars is the size of the prompt the usage counts.
func promptChars(msgs []Message) int {
	prompt := 0
	for _, m := range msgs {
		n := len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
		prompt += n
	}
	return prompt
}

// call builds a tool call whose id is derived from the conversation so far
// and the tool name.
func (offline) call(req Request, name string, args map[string]any) *ToolCall {
	b, _ := json.Marshal(args)
	h := sha256.New()
	for _, m := range req.Messages {
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.Content))
		h.Write([]byte{0})
		h.Write([]byte(m.ToolCallID))
		h.Write([]byte{0})
		for _, tc := range m.ToolCalls {
			h.Write([]byte(tc.ID + "\x00" + tc.Name + "\x00" + tc.Arguments + "\x00"))
		}
		h.Write([]byte{1})
	}
	h.Write([]byte(name))
	return &ToolCall{ID: "call_" + hex.EncodeToString(h.Sum(nil))[:12], Name: name, Arguments: string(b)}
}

// parseToolCommand parses "/tool <name> <json args>".
func parseToolCommand(text string) (name string, args any, ok bool) {
	rest, found := strings.CutPrefix(text, "/tool")
	if !found || (rest != "" && !unicode.IsSpace(rune(rest[0]))) {
		return "", nil, false
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return "", nil, false
	}
	raw := ""
	name = rest
	if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
		name, raw = rest[:i], strings.TrimSpace(rest[i:])
	}
	switch {
	case raw == "":
		args = map[string]any{}
	case json.Valid([]byte(raw)):
		args = json.RawMessage(raw)
	default:
		args = raw // not JSON: pass the text, the tool's schema check reports it
	}
	return name, args, true
}

func isGreeting(text string) bool {
	words := strings.Fields(strings.ToLower(text))
	if len(words) == 0 || len(words) > 3 {
		return false
	}
	for _, w := range words {
		if greetWords[strings.TrimFunc(w, func(r rune) bool { return !unicode.IsLetter(r) })] {
			return true
		}
	}
	return false
}

// arithmetic returns the first arithmetic expression (digits, + - * / ( ) and
// spaces, with at least one operator) in text, or "".
func arithmetic(text string) string {
	for _, m := range arithRe.FindAllString(text, -1) {
		m = strings.TrimSpace(m)
		if strings.ContainsAny(m, "+-*/") && strings.ContainsAny(m, "0123456789") {
			return m
		}
	}
	return ""
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

func ceilDiv4(n int) int { return (n + 3) / 4 }

// ChatSummaryPrefix starts the system message of the agent runtime's chat
// compression request. Its user message has the lines "Previous summary:
// <text>", "Key decision: <text>" (each optional), "Messages:", then one
// "<role>: <text>" line per message.
const ChatSummaryPrefix = "Summarise this chat"

// Bounds of the offline chat summary.
const (
	offlineSummaryRunes = 4000
	offlineDecisions    = 20
)

func isChatSummary(msgs []Message) bool {
	return len(msgs) > 0 && msgs[0].Role == "system" && strings.HasPrefix(msgs[0].Content, ChatSummaryPrefix)
}

// decisionMarkers mark a user sentence the offline summary keeps as a key
// decision.
var decisionMarkers = []string{"let's ", "let us ", "we decided", "i decided", "decision:", "we will ", "agreed"}

// chatSummary answers a chat compression request deterministically: the
// summary is the previous one followed by "The user said: " and the user's
// messages (the assistant's are left out: the offline model's own answers
// carry no facts), at most 4000 runes, the earliest kept; the key decisions
// are the previous ones and the user's messages that read like one ("let's",
// "we decided", "decision:", ...), the latest 20.
func chatSummary(request string) string {
	var prev string
	var decisions, said []string
	for _, line := range strings.Split(request, "\n") {
		switch {
		case strings.HasPrefix(line, "Previous summary: "):
			prev = strings.TrimPrefix(strings.TrimPrefix(line, "Previous summary: "), OfflinePrefix)
		case strings.HasPrefix(line, "Key decision: "):
			decisions = append(decisions, strings.TrimPrefix(line, "Key decision: "))
		case strings.HasPrefix(line, "user: "):
			text := strings.TrimSpace(strings.TrimPrefix(line, "user: "))
			said = append(said, truncate(text, 200))
			lower := strings.ToLower(text)
			for _, m := range decisionMarkers {
				if strings.Contains(lower, m) {
					decisions = append(decisions, truncate(text, 200))
					break
				}
			}
		}
	}
	summary := prev
	if len(said) > 0 {
		if summary != "" {
			summary += " "
		}
		summary += "The user said: " + strings.Join(said, " / ")
	}
	if summary == "" {
		summary = "Nothing of note was said."
	}
	if len(decisions) > offlineDecisions {
		decisions = decisions[len(decisions)-offlineDecisions:]
	}
	if decisions == nil {
		decisions = []string{}
	}
	b, _ := json.Marshal(map[string]any{"summary": OfflinePrefix + truncate(summary, offlineSummaryRunes), "keyDecisions": decisions})
	return string(b)
}
