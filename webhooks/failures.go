package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// errMalformed marks a triggering document the handlers cannot work with
// (a path outside the runtime's layout, a reference to nothing).
var errMalformed = errors.New("malformed document")

// permanent reports whether a handler failure comes from the triggering
// document's content, or from what the model made of it: the store refused
// a write as invalid or too large, or a document the runtime relies on is
// malformed or missing, or the model refuses the request it makes of them
// (permanentModelError). A retry of the same delivery fails the same way,
// so such a failure is recorded for the user (recordFailure) and the
// delivery completes. Everything else (the store unavailable, 5xx, 429, a
// rejected service key, a model outage, timeouts) is transient: the handler
// answers 5xx and the delivery is retried.
func permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if permanentModelError(err) {
		return true
	}
	for _, target := range []error{
		errMalformed,
		collections.ErrInvalidPath, collections.ErrInvalidDocument, collections.ErrInvalidQuery,
		collections.ErrTooLarge, collections.ErrNotFound,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// failureReason says in the user's words why their document could not be
// handled. It never quotes the error itself: that names the runtime's
// requests and the store's internals.
func failureReason(err error) string {
	switch {
	case errors.Is(err, collections.ErrTooLarge):
		return "a document it had to write is larger than the size limit"
	case errors.Is(err, collections.ErrInvalidPath):
		return "an id or path it had to use is invalid"
	case errors.Is(err, collections.ErrInvalidDocument):
		return "a document it had to write is invalid"
	case errors.Is(err, collections.ErrInvalidQuery):
		return "a query it had to run is invalid"
	case errors.Is(err, collections.ErrNotFound):
		return "a document it needs is missing"
	case permanentModelError(err):
		return "the model could not handle the request"
	default:
		return "the document is malformed"
	}
}

// modelFailure says what went wrong with a model request no retry can fix,
// for the chat: the HTTP status, or the token limit. Like failureReason it
// never quotes the error: the provider's message is the operator's (it can
// echo the request, or a masked API key).
func modelFailure(err error) string {
	if errors.Is(err, llm.ErrLength) {
		return "it stopped at its token limit without an answer"
	}
	if code := llm.StatusCode(err); code != 0 {
		return fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))
	}
	return "the request failed"
}

// settleFailure turns a permanent failure of handler name into a recorded
// failed state (nil: the delivery is done). A transient error while
// recording is returned so the delivery is retried; a permanent one is
// logged and the delivery is done anyway: retrying cannot record it either.
func (h *Handlers) settleFailure(ctx context.Context, name string, ev *Event, cause error) error {
	h.log.Warn("webhook handler failed on the document's content; recording the failure", "handler", name,
		"event", ev.EventID, "path", ev.Path, "err", cause)
	err := h.recordFailure(ctx, name, ev, failureReason(cause))
	if err != nil && !permanent(err) {
		return err
	}
	if err != nil {
		h.log.Error("could not record a handler failure; dropping the delivery", "handler", name,
			"event", ev.EventID, "path", ev.Path, "err", err)
	}
	return nil
}

// recordFailure makes a failure visible where the user looks, idempotently:
// a task the failure stops is marked failed (its sub-agent too), which
// reports it in the chat (orchestrator-finalize); a message the
// orchestrator could not handle, or a task answer that cannot be written,
// gets an assistant error message in the chat.
func (h *Handlers) recordFailure(ctx context.Context, name string, ev *Event, reason string) error {
	c, err := chatOf(ev.Path)
	if err != nil {
		return err // outside any chat: nowhere to record it
	}
	switch name {
	case "agent-init", "orchestrator-notify":
		err = h.failTask(ctx, c, ev.Doc.Path, reason)
	case "agent-loop", "tool-runner":
		err = h.failSubAgentTask(ctx, c, ev.Path, reason)
	case "orchestrator-finalize":
		_, err = h.createOnce(ctx, c.messages()+"/"+resultID(ev.Doc.ID), map[string]any{
			"userId": c.uid, "chatId": c.id, "role": "assistant", "taskId": ev.Doc.ID, "status": "failed",
			"replyTo": str(ev.Doc, "triggerMessageId"),
			"content": "The task finished, but its answer could not be shown: " + reason + ".",
		})
	default: // orchestrator: the user's message itself
		return h.failChat(ctx, c, ev.Doc.ID, true, "Sorry, I could not handle this message: "+reason+".")
	}
	if permanent(err) {
		// The task itself cannot take the failure: say it in the chat.
		return h.failChat(ctx, c, ev.Doc.ID, false, "Sorry, a task stopped: "+reason+".")
	}
	return err
}

// failChat writes an assistant error message about document docID into the
// chat.
func (h *Handlers) failChat(ctx context.Context, c chat, docID string, isMessage bool, content string) error {
	data := map[string]any{"userId": c.uid, "chatId": c.id, "role": "assistant", "kind": "error",
		"status": "failed", "content": content}
	if isMessage {
		data["replyTo"] = docID
	}
	_, err := h.createOnce(ctx, c.messages()+"/"+failureID(docID), data)
	return err
}

// failSubAgentTask fails the task of the sub-agent that path is below.
func (h *Handlers) failSubAgentTask(ctx context.Context, c chat, path, reason string) error {
	sa, err := subAgentOf(path)
	if err != nil {
		return err
	}
	agent, err := h.docs.Get(ctx, c.subAgent(sa))
	if err != nil {
		return err
	}
	taskID := str(agent, "taskId")
	if !collections.ValidSegment(taskID) {
		return fmt.Errorf("%w: sub-agent %s has no valid taskId", errMalformed, sa)
	}
	return h.failTask(ctx, c, c.tasks()+"/"+taskID, reason)
}

// failTask marks a task failed (and its sub-agent, if it has one) unless it
// has ended already. A concurrent change of the task is returned (as a
// transient error): the retried delivery looks again.
func (h *Handlers) failTask(ctx context.Context, c chat, taskPath, reason string) error {
	task, err := h.docs.Get(ctx, taskPath)
	if err != nil {
		return err
	}
	if taskFinished(str(task, "status")) {
		return nil // ended, or canceled (finalize settles the sub-agent)
	}
	// The task first, version-checked (a cancel in between wins), then
	// its sub-agent.
	if _, err = h.docs.Update(ctx, taskPath, map[string]any{"status": "failed", "error": "could not continue: " + reason}, task.Version); err != nil {
		return err
	}
	if sa := str(task, "subAgentId"); collections.ValidSegment(sa) {
		if _, err := h.moveAgent(ctx, c.subAgent(sa), "failed"); err != nil {
			return err
		}
	}
	return nil
}
