package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/loomdb/loom/collections"
)

// chat addresses one chat: users/{uid}/orch-chats/{chatID}.
type chat struct{ uid, id string }

// chatOf reads the chat from any document path below it.
func chatOf(path string) (chat, error) {
	s := strings.Split(path, "/")
	if len(s) < 4 || s[0] != "users" || s[2] != "orch-chats" {
		return chat{}, fmt.Errorf("path %q is not below users/{uid}/orch-chats/{chatId}", path)
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
		return "", fmt.Errorf("path %q is not below a sub-agent", path)
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

// validID turns a model-chosen id (a tool call id) into a document id.
func validID(s string) string {
	if collections.ValidSegment(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "call"
	}
	return b.String()
}

func eq(field string, v any) collections.Filter {
	return collections.Filter{Field: field, Op: collections.OpEq, Value: v}
}
