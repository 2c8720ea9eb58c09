package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
)

// The chat lifecycle (memory.go keeps the fields). A chat is active while
// the user writes; touchChat records each user message (lastActivityAt)
// and keeps a timer armed: idleAt, which the trigger on-chat-idle turns into
// a delivery scheduled at that time (deliverAt). chatIdle then:
//
//   - active: suspends the chat once lastActivityAt + chat_suspend_after has
//     passed (suspendedAt; idleAt = now + chat_cleanup_after, or none when
//     cleanup is off), else re-arms idleAt at that time. The next user
//     message reactivates a suspended chat.
//   - closed by the user (on-chat-closed delivers at once): schedules the
//     cleanup (closedAt; idleAt = now + chat_cleanup_after, or none) and,
//     when a task of the chat is unfinished, cancels the chat's run
//     (runStatus "canceled": chatCancel cancels the tasks). A closed chat
//     stays closed: its messages get a failed reply and run nothing.
//   - suspended or closed, with its cleanup due, while a task of the chat
//     has not finished (pending, running, waiting): looks again in a minute
//     (or chat_cleanup_after, if shorter).
//   - suspended or closed, with its cleanup due: deletes the chat's
//     documents (everything below the chat document: messages, tasks,
//     sub-agents with their messages and tool calls, notifications,
//     plugin state, agent events), deepest first, cleanupBatch per delivery,
//     re-arming idleAt (to now) to continue, and last the chat document
//     itself. The chat's status is read again before every page of deletes:
//     a chat that became active again is not deleted.
//
// A delivery whose idleAt is no longer the chat's is a superseded timer and
// does nothing; so does one delivered before its time (a replay: the chat's
// next write of idleAt arms a new one).

// Bounds of a cleanup delivery.
const (
	// cleanupBatch bounds the documents one delivery deletes.
	cleanupBatch = 100
	// cleanupPage is how many it deletes between two reads of the chat's
	// status.
	cleanupPage = 25
	// cleanupDepth is how deep below the chat document the cleanup looks
	// (sub-agents/{id}/messages/{id} is 2 collections deep).
	cleanupDepth = 4
	// cleanupRetry is how long a due cleanup waits for a chat's unfinished
	// tasks before it looks again (at most chat_cleanup_after).
	cleanupRetry = time.Minute
)

// chatIdle handles the chat document's timer (on-chat-idle) and its close
// (on-chat-closed).
func (h *Handlers) chatIdle(ctx context.Context, ev *Event) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err
	}
	if ev.Path != c.path() {
		return fmt.Errorf("%w: chat-idle: %q is not a chat document", errMalformed, ev.Path)
	}
	evIdle, evArmed := collections.Int64(ev.Doc.Data["idleAt"])
	for range chatCASAttempts {
		cur, err := h.getOpt(ctx, c.path())
		if err != nil || cur == nil {
			return err
		}
		now := time.Now().UnixMilli()
		status := str(cur, "status")
		if _, scheduled := cur.Data["closedAt"]; status == chatClosed && !scheduled {
			patch := map[string]any{"closedAt": now, "idleAt": h.cleanupAt(now)}
			// Closing stops the chat's runs: its unfinished tasks are
			// canceled like on the user's cancel of the chat (chatCancel).
			busy, berr := h.chatBusy(ctx, c)
			if berr != nil {
				return berr
			}
			if busy {
				patch["runStatus"] = statusCanceled
			}
			err = h.writeChat(ctx, cur, patch)
		} else {
			idle, armed := collections.Int64(cur.Data["idleAt"])
			switch {
			case !armed || !evArmed || idle != evIdle:
				return nil // no timer, or a superseded one
			case now < idle:
				h.log.Info("chat-idle: delivered before the chat's idleAt; nothing to do", "chat", c.path(), "idleAt", idle)
				return nil
			case status == chatActive:
				err = h.idleActive(ctx, cur, now)
			case status == chatSuspended || status == chatClosed:
				var busy bool
				if busy, err = h.chatBusy(ctx, c); err != nil {
					return err
				}
				if busy {
					// A run is still going (a task waiting for the user,
					// a slow tool): deleting under it would leave its
					// handlers writing into a deleted chat. Look again
					// later.
					err = h.writeChat(ctx, cur, map[string]any{"idleAt": now + min(cleanupRetry, h.cfg.ChatCleanupAfter).Milliseconds()})
				} else {
					err = h.cleanupChat(ctx, c, cur, now)
				}
			default:
				return nil // not a chat the runtime has touched
			}
		}
		if !errors.Is(err, collections.ErrPreconditionFailed) {
			return err
		}
		// Someone wrote the chat meanwhile (a message, tokens, the user):
		// decide again on its new state.
	}
	return fmt.Errorf("chat %s: still conflicting after %d attempts", c.path(), chatCASAttempts)
}

// chatBusy reports whether the chat has a task of the runtime's that has
// not finished (pending, running or waiting).
func (h *Handlers) chatBusy(ctx context.Context, c chat) (bool, error) {
	for _, status := range unfinishedTaskStatuses {
		t, err := h.firstTask(ctx, c, eq("userId", c.uid), eq("status", status))
		if err != nil || t != nil {
			return t != nil, err
		}
	}
	return false, nil
}

// cleanupAt is the idleAt of a chat's cleanup from now (nil: never, which
// removes the field).
func (h *Handlers) cleanupAt(now int64) any {
	if h.cfg.ChatCleanupAfter < 0 {
		return nil
	}
	return now + h.cfg.ChatCleanupAfter.Milliseconds()
}

// writeChat updates the chat document at the version it was read.
func (h *Handlers) writeChat(ctx context.Context, cur *collections.Document, patch map[string]any) error {
	_, err := h.docs.Update(ctx, cur.Path, patch, cur.Version)
	return err
}

// idleActive suspends an active chat whose timer is due, once
// chat_suspend_after has passed since its last user message; else it
// re-arms the timer at that time.
func (h *Handlers) idleActive(ctx context.Context, cur *collections.Document, now int64) error {
	due := num(cur, "lastActivityAt") + h.cfg.ChatSuspendAfter.Milliseconds()
	if now < due {
		return h.writeChat(ctx, cur, map[string]any{"idleAt": due})
	}
	h.log.Info("chat suspended", "chat", cur.Path)
	return h.writeChat(ctx, cur, map[string]any{"status": chatSuspended, "suspendedAt": now, "idleAt": h.cleanupAt(now)})
}

// cleanupChat deletes up to cleanupBatch documents of a suspended or
// closed chat whose cleanup is due, then re-arms its timer to go on, or,
// when none is left, deletes the chat document. It stops when the chat is
// no longer the one read (cur): active again, or its timer moved.
func (h *Handlers) cleanupChat(ctx context.Context, c chat, cur *collections.Document, now int64) error {
	deleted := 0
	for deleted < cleanupBatch {
		if latest, err := h.stillDue(ctx, cur); err != nil || latest == nil {
			return err
		}
		n, err := h.deletePage(ctx, c, min(cleanupPage, cleanupBatch-deleted))
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		deleted += n
	}
	latest, err := h.stillDue(ctx, cur)
	if err != nil || latest == nil {
		return err
	}
	if deleted > 0 {
		// More may be left: the next delivery goes on (re-armed at once,
		// so no delivery runs long, and a message in between is seen).
		h.log.Info("chat cleanup: documents deleted, continuing", "chat", c.path(), "deleted", deleted)
		return h.writeChat(ctx, latest, map[string]any{"idleAt": max(now, num(cur, "idleAt")+1)})
	}
	h.log.Info("chat cleaned up", "chat", c.path())
	if err := h.docs.Delete(ctx, c.path()); err != nil && !errors.Is(err, collections.ErrNotFound) {
		return err
	}
	return nil
}

// stillDue returns the chat document when it is still the suspended or
// closed one whose cleanup cur started (same status and timer), else nil:
// a chat that became active again (or is gone) is not cleaned up.
func (h *Handlers) stillDue(ctx context.Context, cur *collections.Document) (*collections.Document, error) {
	latest, err := h.getOpt(ctx, cur.Path)
	if err != nil || latest == nil {
		return nil, err
	}
	if st := str(latest, "status"); st != chatSuspended && st != chatClosed {
		return nil, nil
	}
	if idle, ok := collections.Int64(latest.Data["idleAt"]); !ok || idle != num(cur, "idleAt") {
		return nil, nil
	}
	return latest, nil
}

// deletePage deletes up to n documents below the chat document, deepest
// first (a sub-agent's messages before the sub-agent), and returns how
// many it deleted. It reads only below this chat's path.
func (h *Handlers) deletePage(ctx context.Context, c chat, n int) (int, error) {
	for depth := cleanupDepth; depth >= 1; depth-- {
		docs, err := h.docs.Query(ctx, collections.Query{
			Collection: c.path() + strings.Repeat("/*/*", depth-1) + "/*",
			Limit:      n,
		})
		if err != nil {
			return 0, err
		}
		if len(docs) == 0 {
			continue
		}
		for _, d := range docs {
			if err := h.docs.Delete(ctx, d.Path); err != nil && !errors.Is(err, collections.ErrNotFound) {
				return 0, err
			}
		}
		return len(docs), nil
	}
	return 0, nil
}
