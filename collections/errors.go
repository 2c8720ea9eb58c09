package collections

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by Store implementations and the parsers in this
// package. Callers test them with errors.Is; server maps them to API codes in
// one place.
var (
	ErrNotFound        = errors.New("document not found")
	ErrAlreadyExists   = errors.New("document already exists")
	ErrInvalidPath     = errors.New("invalid path")
	ErrInvalidQuery    = errors.New("invalid query")
	ErrInvalidDocument = errors.New("invalid document")
	ErrTooLarge        = errors.New("document too large")
	ErrClosed          = errors.New("store closed")
	// ErrPreconditionFailed is wrapped by *PreconditionError.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrPositionExpired is wrapped by *PositionExpiredError.
	ErrPositionExpired = errors.New("change-log position older than retention")
	// ErrCursorConflict: a CursorAdvance whose From no longer matches.
	ErrCursorConflict = errors.New("cursor moved concurrently")
)

// PreconditionError reports a failed ifMatch / If-Match predicate. Current is
// the document as stored when the predicate was evaluated (nil when absent).
type PreconditionError struct {
	Path    string
	Current *Document
}

func (e *PreconditionError) Error() string {
	return fmt.Sprintf("precondition failed on %s", e.Path)
}

func (e *PreconditionError) Unwrap() error { return ErrPreconditionFailed }

// WriteError names the write of a Commit that failed. Nothing of that commit
// was applied.
type WriteError struct {
	Index int
	Path  string
	Err   error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("write %d (%s): %v", e.Index, e.Path, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// PositionExpiredError is returned when a reader asks for changes after a seq
// that retention already purged. Oldest is the smallest position that can still
// be read from (changes after it are all retained).
type PositionExpiredError struct {
	After  int64
	Oldest int64
}

func (e *PositionExpiredError) Error() string {
	return fmt.Sprintf("change-log position %d is older than retention (oldest readable position %d)", e.After, e.Oldest)
}

func (e *PositionExpiredError) Unwrap() error { return ErrPositionExpired }

func invalidPath(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPath, fmt.Sprintf(format, args...))
}

func invalidQuery(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidQuery, fmt.Sprintf(format, args...))
}

func invalidDocument(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidDocument, fmt.Sprintf(format, args...))
}
