package access

import (
	"errors"
	"fmt"

	"github.com/loomdb/loom/collections"
)

// Denied is a refusal by the security rules, or of a system collection to a
// caller who is not an admin. The server answers 401 to an anonymous caller
// (authenticating may grant access) and 403 to everyone else.
type Denied struct {
	// Anonymous is true when the caller presented no credential.
	Anonymous bool
	// What completes "you may not …": "read users/u1/notes/n1",
	// "list rooms", "update rooms/r1".
	What string
}

func (e *Denied) Error() string {
	if e.Anonymous {
		return "access: authentication required to " + e.What
	}
	return "access: security rules do not allow you to " + e.What
}

// Forbidden reports whether the refusal is of an authenticated caller
// (403): the security rules, not a missing credential. Callers that must
// tell it from other errors without importing this package (the agent
// runtime, whose documents may also come over REST) test for the method.
func (e *Denied) Forbidden() bool { return !e.Anonymous }

// denied is the Denied for caller.
func denied(caller *Caller, what string) error {
	return &Denied{Anonymous: caller.anonymous(), What: what}
}

var (
	// ErrSystemWrite refuses every write to a system collection (first
	// segment starting with "_"): only Loom itself writes them, never
	// through this package.
	ErrSystemWrite = errors.New("access: system collections cannot be written through the document API")
	// ErrBadCursor is every query cursor failure a client can cause: forged,
	// tampered, sealed by another key, or issued for another query or
	// caller. It says nothing about which. It is a
	// collections.ErrInvalidQuery, as loomclient reports the 400
	// INVALID_QUERY the server answers with, so callers that sort errors
	// by the collections sentinels (the agent runtime) see the same kind
	// in process.
	ErrBadCursor = fmt.Errorf("access: startAfter is not a cursor this server returned for this query (%w)", collections.ErrInvalidQuery)
)

// HiddenPrecondition is a failed precondition whose current document the
// caller may not read: it carries no current state. (A write rule that lets
// anyone update must not let them read the document back through a
// deliberately wrong If-Match.)
type HiddenPrecondition struct{ Path string }

func (e *HiddenPrecondition) Error() string { return "access: precondition failed on " + e.Path }

// Unwrap keeps errors.Is(err, collections.ErrPreconditionFailed) true, so
// callers that retry on a lost race still do.
func (e *HiddenPrecondition) Unwrap() error { return collections.ErrPreconditionFailed }

// Deny is the *Denied for caller refused what ("read your identity"), for
// surfaces that refuse by a policy of their own.
func Deny(caller *Caller, what string) error { return denied(caller, what) }

// InvalidWrite is a write the service's WriteCheck refused: the document
// as it would be stored is not one what reads it accepts (a user's agent
// settings naming a plugin setting out of its range). It is a
// collections.ErrInvalidDocument; the server answers 400 naming Field.
type InvalidWrite struct {
	Path string
	// Field names what is wrong when the check knows it
	// ("plugins.research-assistant.max_sources"); "" otherwise.
	Field string
	Msg   string
}

func (e *InvalidWrite) Error() string {
	s := "access: invalid document " + e.Path + ": "
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Msg
}

// Unwrap makes an InvalidWrite a collections.ErrInvalidDocument.
func (e *InvalidWrite) Unwrap() error { return collections.ErrInvalidDocument }
