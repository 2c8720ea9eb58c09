package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/loomdb/loom/collections"
)

// chat addresses one chat: users/{uid}/orch-chats/{chatID}.
type chat struct{ uid, id string }

// chatOf reads the chat from any document path below it.
func chatOf(path string) (chat, error) {
	s := strings.Split(path, "/")
	if len(s) < 4 || s[0] != "users" || s[2] != "orch-chats" {
		return chat{}, fmt.Errorf("%w: path %q is not below users/{uid}/orch-chats/{chatId}", errMalformed, path)
	}
	return chat{uid: s[1], id: s[3]}, nil
}

func (c chat) path() string                 { return "users/" + c.uid + "/orch-chats/" + c.id }
func (c chat) messages() string             { return c.path() + "/messages" }
func (c chat) tasks() string                { return c.path() + "/tasks" }
func (c chat) subAgent(id string) string    { return c.path() + "/sub-agents/" + id }
func (c chat) subMessages(sa string) string { return c.subAgent(sa) + "/messages" }
func (c chat) toolCalls(sa string) string   { return c.subAgent(sa) + "/tool-calls" }

// subAgentOf reads the sub-agent id from a path below
// .../sub-agents/{id}/...
func subAgentOf(path string) (string, error) {
	s := strings.Split(path, "/")
	if len(s) < 6 || s[4] != "sub-agents" {
		return "", fmt.Errorf("%w: path %q is not below a sub-agent", errMalformed, path)
	}
	return s[5], nil
}

// msgID is the id of a sub-agent message: its seq, zero-padded so ids sort
// like seqs. Deriving ids from seqs makes every write of a step idempotent.
func msgID(seq int64) string { return fmt.Sprintf("m%06d", seq) }

// createOnce creates a document, or returns the one already there: a
// redelivered event finds its work done.
func (h *Handlers) createOnce(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	d, err := h.docs.Create(ctx, path, data)
	if errors.Is(err, collections.ErrAlreadyExists) {
		return h.docs.Get(ctx, path)
	}
	return d, err
}

// maxBatchWrites is the most writes one Batch may hold: POST /batch's
// bound (server.MaxBatchWrites), which `loom agents` commits through.
const maxBatchWrites = 500

// batchOrSettle commits writes in one Batch when the documents are as the
// handler read them, and reports done. A batch that meets another state — a
// document already there (a redelivery), a version moved or a document gone
// (a concurrent write, a cancel) — commits nothing, and done is false: the
// handler then writes one by one, settling each case as it always does.
// Other errors are returned, for the delivery to retry.
func (h *Handlers) batchOrSettle(ctx context.Context, writes []collections.Write) (done bool, _ error) {
	_, done, err := h.batchIfAsRead(ctx, writes)
	return done, err
}

// batchIfAsRead is batchOrSettle that returns the written documents (in
// the order of writes) when done.
func (h *Handlers) batchIfAsRead(ctx context.Context, writes []collections.Write) (_ []*collections.Document, done bool, _ error) {
	if len(writes) > maxBatchWrites {
		return nil, false, nil // more than /batch takes (a plan of many tasks): one by one
	}
	docs, err := h.docs.Batch(ctx, writes)
	switch {
	case err == nil:
		return docs, true, nil
	case errors.Is(err, collections.ErrAlreadyExists), errors.Is(err, collections.ErrPreconditionFailed),
		errors.Is(err, collections.ErrNotFound):
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// getOpt returns the document or nil when there is none.
func (h *Handlers) getOpt(ctx context.Context, path string) (*collections.Document, error) {
	d, err := h.docs.Get(ctx, path)
	if errors.Is(err, collections.ErrNotFound) {
		return nil, nil
	}
	return d, err
}

func str(d *collections.Document, f string) string {
	if d == nil {
		return ""
	}
	s, _ := d.Data[f].(string)
	return s
}

func num(d *collections.Document, f string) int64 {
	if d == nil {
		return 0
	}
	n, _ := collections.Int64(d.Data[f])
	return n
}

// Derived ids. Every document id the runtime makes from a document id or
// from model output goes through deriveID, so a legal 128-byte message id
// (or a model's 300-character tool call id) never yields an id the store
// refuses. The deepest path the runtime writes is
// users/{uid}/orch-chats/{chat}/sub-agents/{id}/tool-calls/{id}: four ids
// of at most collections.MaxIDBytes and 50 bytes of names, well under
// collections.MaxPathBytes.
const (
	// idHashHex is the hex length of the hash that makes a shortened or
	// cleaned id unique (96 bits: no collision in practice).
	idHashHex = 24
	// idPrefixMax keeps the readable start of a shortened id.
	idPrefixMax = collections.MaxIDBytes - 1 - idHashHex
)

// deriveID joins parts into a document id that is always a valid segment
// of at most collections.MaxIDBytes. An id that is valid as joined is kept
// as it is (ids derived before stay the same, so redeliveries stay
// idempotent); any other is its legal characters, cut to a readable
// prefix, then "-" and a hash of the whole joined id: deterministic, and
// distinct inputs get distinct ids.
func deriveID(parts ...string) string {
	s := strings.Join(parts, "")
	if len(s) <= collections.MaxIDBytes && collections.ValidSegment(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < idPrefixMax; i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(s))
	if b.Len() > 0 {
		b.WriteByte('-')
	}
	b.WriteString(hex.EncodeToString(sum[:])[:idHashHex])
	return b.String()
}

// The ids the runtime derives. The chat's messages collection holds the
// user's messages and the runtime's, so each kind has its own suffix or
// prefix.
func replyID(msgID string) string          { return deriveID(msgID, "-reply") }
func taskID(msgID string, i int) string    { return deriveID(msgID, "-t", strconv.Itoa(i)) }
func answerID(msgID string) string         { return deriveID("answer-", msgID) }
func toolCallID(modelCallID string) string { return deriveID(modelCallID) }
func mirrorID(subAgentID, toolCallDocID string) string {
	// Tool-call ids are unique within a sub-agent only; the mirrors of all
	// the chat's sub-agents share the chat.
	return deriveID("tool-", subAgentID, "-", toolCallDocID)
}
func resultID(taskID string) string { return deriveID(taskID, "-result") }
func questionID(taskID string, v int64) string {
	return deriveID(taskID, "-q", strconv.FormatInt(v, 10))
}
func failureID(docID string) string { return deriveID(docID, "-error") }

func eq(field string, v any) collections.Filter {
	return collections.Filter{Field: field, Op: collections.OpEq, Value: v}
}
