package webhooks

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// Chat memory (seed 000's OracleContext, in Loom's terms): the chat
// document users/{uid}/orch-chats/{chat} keeps what the runtime remembers of
// a chat beyond its recent messages, and its lifecycle.
//
//   - summary, keyDecisions, summaryThrough (the createdAt, ms, of the last
//     message folded into the summary), summaryThroughMessageId: the
//     messages older than the recent window ([agents] chat_history) are
//     folded into them, a bounded batch per orchestrator decision, with one
//     model call; the decision's prompt carries them before the recent
//     messages. They are sealed together (memorySeal): the model reads
//     them as the runtime's words, so a summary the runtime did not write
//     is ignored (and replaced by the next compression).
//   - compressionCount, tokensUsed (the orchestrator's, finalize's and the
//     compressions' LLM tokens), lastModel.
//   - status (active | suspended | closed), lastActivityAt (the last user
//     message), idleAt (the next idle check), suspendedAt, closedAt: see
//     chatidle.go.
//
// Every write of the chat document is a compare-and-swap (casChatFrom): the
// orchestrator, finalize, the idle handler and the user write it
// concurrently, and the user's fields (title, status "closed") must never be
// overwritten.

// Defaults of the chat lifecycle.
const (
	DefaultChatSuspendAfter = 24 * time.Hour
	DefaultChatCleanupAfter = 720 * time.Hour
)

// Chat statuses.
const (
	chatActive    = "active"
	chatSuspended = "suspended"
	chatClosed    = "closed"
)

// Bounds of the chat memory.
const (
	// compressBatch bounds the messages one compression folds in.
	compressBatch = 40
	// compressMessageRunes bounds one message's text in a compression
	// request, compressPromptRunes all of them: a user's message may be
	// large, and the user pays for the call.
	compressMessageRunes = 2000
	compressPromptRunes  = 24000
	// maxSummaryRunes, maxKeyDecisions and maxKeyDecisionRunes bound what
	// the model's answer may make of the memory (it goes into every later
	// prompt of the chat).
	maxSummaryRunes     = 4000
	maxKeyDecisions     = 20
	maxKeyDecisionRunes = 300
	// chatCASAttempts bounds the retries of a chat document write that
	// lost a race.
	chatCASAttempts = 16
	// staleIdleTimer: an active chat's idleAt this far in the past has
	// missed its delivery; the next user message arms a new one.
	staleIdleTimer = time.Minute
)

// memorySealField holds the seal over memorySealFields on the chat
// document (not sealField: the chat document is not created sealed, and
// other fields of it are the user's).
const memorySealField = "memorySeal"

var memorySealFields = []string{"summary", "keyDecisions", "summaryThrough"}

// chatSummaryPrompt is the system message of a compression request; it
// starts with llm.ChatSummaryPrefix, by which the offline model knows it.
const chatSummaryPrompt = llm.ChatSummaryPrefix + ` between a user and an assistant, for the assistant, who will continue the chat and sees only this summary and the most recent messages.
Merge the previous summary and key decisions with the new messages. Keep every fact the user stated (names, numbers, preferences, constraints), what was asked and what was answered or done, and open questions. At most 300 words.
Answer with one JSON object only, no other text: {"summary": "...", "keyDecisions": ["...", "..."]}
keyDecisions lists the decisions and agreements still valid (the previous ones plus new ones), at most 20, one short sentence each.`

func (c *Config) applyChatDefaults() {
	if c.ChatSuspendAfter <= 0 {
		c.ChatSuspendAfter = DefaultChatSuspendAfter
	}
	if c.ChatCleanupAfter == 0 {
		c.ChatCleanupAfter = DefaultChatCleanupAfter
	}
}

// casChatFrom writes the chat document with compare-and-swap (casDoc): fn
// gets its current state (nil: none) and returns the patch (or, for a
// missing document, the data to create it), or nil to write nothing.
// known is a first guess of the document's state (nil: read it): a
// handler that has just read or written the document tries its write
// against that version, without reading it again; a write that lost a
// race (the version moved) reads it and is computed again.
func (h *Handlers) casChatFrom(ctx context.Context, c chat, known *collections.Document, fn func(cur *collections.Document) map[string]any) (*collections.Document, error) {
	return h.casDoc(ctx, c.path(), known, chatCASAttempts, fn)
}

// touchChat records a user message's activity on the chat document: it
// creates the document when the user wrote messages without creating it
// (never overwriting one: the user's title stays), reactivates a suspended
// chat, and moves lastActivityAt. It returns the chat document; a closed
// chat is returned as it is, untouched.
//
// idleAt (the next idle check, a scheduled delivery of on-chat-idle) moves
// only when the chat was not active or its timer is missing, stale or too
// far: an active chat's timer that fires before lastActivityAt +
// suspend_after re-arms itself (chatIdle), so a busy chat has one timer
// pending, not one per message.
//
// When all there is to write is lastActivityAt (an active chat whose timer
// stays), touchChat writes nothing and returns deferred: the orchestrator
// writes it with the decision's tokens and the runStatus, in one commit
// (finishTurn). Every other case is written here, before anything runs
// for the message: a suspended chat, a timer to move, and a missing
// document (the user may cancel the chat's run while its first message's
// plan runs: the document must be there to PATCH).
func (h *Handlers) touchChat(ctx context.Context, c chat, now time.Time) (_ *collections.Document, deferred bool, _ error) {
	ms := now.UnixMilli()
	cur, err := h.getOpt(ctx, c.path())
	if err != nil {
		return nil, false, err
	}
	if cur != nil && str(cur, "status") != chatClosed {
		if patch := h.touchPatch(c, cur, ms); len(patch) == 1 && patch["lastActivityAt"] != nil {
			return cur, true, nil
		}
	}
	d, err := h.casChatFrom(ctx, c, cur, func(cur *collections.Document) map[string]any {
		return h.touchPatch(c, cur, ms)
	})
	return d, false, err
}

// touchPatch is touchChat's write on the chat document cur (nil: none; the
// data to create it), for a user message at ms; nil for a closed chat.
func (h *Handlers) touchPatch(c chat, cur *collections.Document, ms int64) map[string]any {
	next := ms + h.cfg.ChatSuspendAfter.Milliseconds()
	if cur == nil {
		return map[string]any{
			"userId": c.uid, "status": chatActive, "lastActivityAt": ms, "idleAt": next,
			"tokensUsed": 0, "compressionCount": 0,
		}
	}
	status := str(cur, "status")
	if status == chatClosed {
		return nil
	}
	patch := map[string]any{"lastActivityAt": ms}
	if status != chatActive {
		patch["status"] = chatActive
		if _, ok := cur.Data["suspendedAt"]; ok {
			patch["suspendedAt"] = nil
		}
	}
	idle, ok := collections.Int64(cur.Data["idleAt"])
	if status != chatActive || !ok || idle < ms-staleIdleTimer.Milliseconds() || idle > next {
		patch["idleAt"] = next
	}
	return patch
}

// closedReply is the reply to a message in a closed chat.
const closedReply = "This chat is closed."

// memory is the chat's memory as the runtime wrote it.
type memory struct {
	summary   string
	decisions []string
	through   int64 // createdAt (ms) of the last message folded in; 0: none
	throughID string
}

// readMemory reads the memory of the chat document d; a memory the runtime
// did not seal is ignored (empty).
func (h *Handlers) readMemory(d *collections.Document) memory {
	if d == nil {
		return memory{}
	}
	_, hasSummary := d.Data["summary"]
	_, hasDecisions := d.Data["keyDecisions"]
	_, hasThrough := d.Data["summaryThrough"]
	if !hasSummary && !hasDecisions && !hasThrough {
		return memory{}
	}
	got, _ := d.Data[memorySealField].(string)
	if want := h.seals.sign(d.Path, d.Data, memorySealFields); got == "" || !hmac.Equal([]byte(got), []byte(want)) {
		h.log.Warn("chat memory: ignoring a summary the runtime did not write", "path", d.Path)
		return memory{}
	}
	m := memory{summary: str(d, "summary"), through: num(d, "summaryThrough"), throughID: str(d, "summaryThroughMessageId")}
	raw, _ := d.Data["keyDecisions"].([]any)
	for _, r := range raw {
		if s, ok := r.(string); ok {
			m.decisions = append(m.decisions, s)
		}
	}
	return m
}

// prompt is the memory as the orchestrator's prompt carries it, before
// the recent messages (none when there is nothing to remember).
func (m memory) prompt() []llm.Message {
	if m.summary == "" && len(m.decisions) == 0 {
		return nil
	}
	var b strings.Builder
	if m.summary != "" {
		b.WriteString("Summary of the earlier conversation:\n" + m.summary)
	}
	if len(m.decisions) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("Key decisions so far:\n- " + strings.Join(m.decisions, "\n- "))
	}
	return []llm.Message{{Role: "system", Content: b.String()}}
}

// chatMemory returns the memory messages of the orchestrator's prompt
// about msg, after folding the messages that fell out of the recent window
// into the summary (compressChat). cur is the chat document as the
// orchestrator last read or wrote it (nil: none); full says whether the
// recent window is full (when it is not, nothing fell out of it). It also
// returns the chat document as far as it knows it (as a compression wrote
// it; nil: to be read again).
func (h *Handlers) chatMemory(ctx context.Context, c chat, msg, cur *collections.Document, full bool) ([]llm.Message, *collections.Document, error) {
	if cur == nil {
		return nil, nil, nil
	}
	mem := h.readMemory(cur)
	if !full {
		return mem.prompt(), cur, nil
	}
	next, cur, err := h.compressChat(ctx, c, msg, cur, mem)
	if err != nil {
		return nil, nil, err
	}
	return next.prompt(), cur, nil
}

// compressChat folds the chat's messages up to msg that are older than the
// recent window (the last Config.History messages, chatHistory's) and not
// yet in the summary into it: at most compressBatch of them (and
// compressPromptRunes of their text), oldest first, with one model call.
// It returns the memory for the prompt, and the chat document: cur (the
// chat document mem was read from) or what the compression wrote over it
// (nil: unknown, to be read again). A failed call or an answer that is
// not the JSON asked for keeps the memory as it was (logged); the
// decision goes on either way, and the next one tries again.
func (h *Handlers) compressChat(ctx context.Context, c chat, msg, cur *collections.Document, mem memory) (memory, *collections.Document, error) {
	window := h.cfg.History
	docs, err := h.docs.Query(ctx, collections.Query{
		Collection: c.messages(),
		Filters: []collections.Filter{
			{Field: collections.FieldCreatedAt, Op: collections.OpGt, Value: mem.through},
			{Field: collections.FieldCreatedAt, Op: collections.OpLe, Value: msg.CreatedAt},
		},
		OrderBy: []collections.Order{{Field: collections.FieldCreatedAt, Direction: "asc"}},
		Limit:   compressBatch + window,
	})
	if err != nil {
		return mem, nil, err
	}
	if len(docs) <= window {
		return mem, cur, nil // everything not in the summary is in the window
	}
	fold := foldable(docs, min(compressBatch, len(docs)-window))
	if len(fold) == 0 {
		return mem, cur, nil
	}
	last := fold[len(fold)-1]
	next := memory{summary: mem.summary, decisions: mem.decisions, through: last.CreatedAt, throughID: last.ID}
	lines := h.foldLines(fold)
	var res *llm.Response
	if len(lines) > 0 {
		// The orchestrator's model (its temperature is for its decisions).
		res, err = h.complete(ctx, c.uid, llm.Request{Model: h.cfg.OrchestratorModel, Messages: []llm.Message{
			{Role: "system", Content: chatSummaryPrompt},
			{Role: "user", Content: summaryRequest(mem, lines)},
		}})
		if err != nil {
			h.log.Warn("chat compression failed; the summary stays as it was", "chat", c.path(), "err", err)
			return mem, h.countChatTokens(ctx, c, cur, res), nil
		}
		summary, decisions, ok := parseSummary(res.Content, mem.decisions)
		if !ok {
			h.log.Warn("chat compression: the model's answer is not the JSON asked for; the summary stays as it was",
				"chat", c.path(), "answer", truncate(res.Content, 200))
			return mem, h.countChatTokens(ctx, c, cur, res), nil
		}
		next.summary, next.decisions = summary, decisions
	}
	return next, h.writeMemory(ctx, c, cur, mem, next, res), nil
}

// foldable returns the first n of docs (createdAt order) that one
// compression folds: at most compressPromptRunes of text (at least one
// message), and never ending inside a run of equal createdAt, since the
// next compression starts after the last folded createdAt.
func foldable(docs []*collections.Document, n int) []*collections.Document {
	size := 0
	for i := range n {
		size += min(len([]rune(str(docs[i], "content"))), compressMessageRunes) + 16
		if size > compressPromptRunes && i > 0 {
			n = i
			break
		}
	}
	fold := docs[:n]
	for len(fold) > 0 && fold[len(fold)-1].CreatedAt == docs[len(fold)].CreatedAt {
		fold = fold[:len(fold)-1]
	}
	return fold
}

// foldLines are the lines of a compression request for the folded
// messages: the user's, and the runtime's assistant messages (not an
// assistant message someone else wrote).
func (h *Handlers) foldLines(fold []*collections.Document) []string {
	var lines []string
	for _, d := range fold {
		role := str(d, "role")
		if role != "user" && (role != "assistant" || !h.seals.valid(d, chatMessageSeal)) {
			continue
		}
		text := oneLine(truncate(str(d, "content"), compressMessageRunes))
		if text == "" {
			continue
		}
		lines = append(lines, role+": "+text)
	}
	return lines
}

// summaryRequest is the user message of a compression request: the
// previous memory, then the messages, one per line (the offline model reads
// this layout: llm.ChatSummaryPrefix).
func summaryRequest(mem memory, lines []string) string {
	var b strings.Builder
	if mem.summary != "" {
		b.WriteString("Previous summary: " + oneLine(mem.summary) + "\n")
	}
	for _, d := range mem.decisions {
		b.WriteString("Key decision: " + oneLine(d) + "\n")
	}
	b.WriteString("Messages:\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// oneLine joins the lines of s with spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// parseSummary reads the model's answer to a compression request: a JSON
// object {summary, keyDecisions} (also inside a code fence or other text).
// Without keyDecisions the previous ones stay. ok is false when there is no
// such object or its summary is empty. Both are bounded.
func parseSummary(content string, prev []string) (summary string, decisions []string, ok bool) {
	i, j := strings.Index(content, "{"), strings.LastIndex(content, "}")
	if i < 0 || j <= i {
		return "", nil, false
	}
	var v map[string]any
	if json.Unmarshal([]byte(content[i:j+1]), &v) != nil {
		return "", nil, false
	}
	var rawDecisions any
	for k, x := range v {
		switch strings.ToLower(strings.ReplaceAll(k, "_", "")) {
		case "summary":
			summary, _ = x.(string)
		case "keydecisions":
			rawDecisions = x
		}
	}
	summary = truncate(strings.TrimSpace(summary), maxSummaryRunes)
	if summary == "" {
		return "", nil, false
	}
	decisions = prev
	if rawDecisions != nil {
		decisions = nil
		var list []any
		switch d := rawDecisions.(type) {
		case []any:
			list = d
		case string:
			list = []any{d}
		}
		for _, x := range list {
			if s, ok := x.(string); ok && strings.TrimSpace(s) != "" {
				decisions = append(decisions, truncate(oneLine(s), maxKeyDecisionRunes))
			}
		}
	}
	if len(decisions) > maxKeyDecisions {
		decisions = decisions[len(decisions)-maxKeyDecisions:] // the latest
	}
	return summary, decisions, true
}

// writeMemory records a compression on the chat document: the new memory
// (sealed), compressionCount, and the call's tokens. A write that fails
// is logged, not retried with the delivery: that would pay for the call
// again, and the next decision folds the same messages anew. The write is
// tried first against known (nil: read); it returns the chat document as
// written (nil: unknown).
func (h *Handlers) writeMemory(ctx context.Context, c chat, known *collections.Document, prev, next memory, res *llm.Response) *collections.Document {
	decisions := make([]any, len(next.decisions))
	for i, d := range next.decisions {
		decisions[i] = d
	}
	sealed := map[string]any{"summary": next.summary, "keyDecisions": decisions, "summaryThrough": next.through}
	seal := h.seals.sign(c.path(), sealed, memorySealFields)
	d, err := h.casChatFrom(ctx, c, known, func(cur *collections.Document) map[string]any {
		if cur == nil {
			return nil // cleaned up meanwhile
		}
		patch := map[string]any{}
		if h.readMemory(cur).through == prev.through {
			patch["summary"], patch["keyDecisions"], patch["summaryThrough"] = next.summary, decisions, next.through
			patch["summaryThroughMessageId"], patch[memorySealField] = next.throughID, seal
			if res != nil {
				patch["compressionCount"] = max(num(cur, "compressionCount"), 0) + 1
			}
		}
		addTokens(patch, cur, res, h.orchestratorModel())
		if len(patch) == 0 {
			return nil
		}
		return patch
	})
	if err != nil {
		h.log.Error("chat memory not recorded", "chat", c.path(), "err", err)
	}
	return d
}

// countChatTokens adds what an LLM call of the chat used to its tokensUsed
// and records its model as lastModel. A failure is logged: retrying the
// delivery would pay for the call again. The write is tried first against
// known (nil: read); it returns the chat document as written (nil:
// unknown).
func (h *Handlers) countChatTokens(ctx context.Context, c chat, known *collections.Document, res *llm.Response) *collections.Document {
	if res == nil {
		return known
	}
	d, err := h.casChatFrom(ctx, c, known, func(cur *collections.Document) map[string]any {
		if cur == nil {
			return nil // a chat the orchestrator never saw, or cleaned up
		}
		patch := map[string]any{}
		addTokens(patch, cur, res, h.orchestratorModel())
		return patch
	})
	if err != nil {
		h.log.Error("chat tokens not recorded", "chat", c.path(), "tokens", res.Usage.TotalTokens, "err", err)
	}
	return d
}

// addTokens adds to patch the chat's tokensUsed and lastModel after the call
// res (nothing for no call).
func addTokens(patch map[string]any, cur *collections.Document, res *llm.Response, configured string) {
	if res == nil {
		return
	}
	model := res.Model
	if model == "" {
		model = configured
	}
	patch["tokensUsed"] = max(num(cur, "tokensUsed"), 0) + int64(max(res.Usage.TotalTokens, 0))
	patch["lastModel"] = model
}
