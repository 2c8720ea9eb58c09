package collections

import "context"

// WriteType is the kind of one write.
type WriteType string

// Write types; the names are the batch API's.
const (
	// WriteCreate creates a document; fails with ErrAlreadyExists when a live
	// document exists at the path (a tombstone is overwritten, its version
	// count continues).
	WriteCreate WriteType = "create"
	// WriteReplace replaces the user fields of a document, or creates it when
	// absent and IfMatch is empty (upsert).
	WriteReplace WriteType = "replace"
	// WriteUpdate deep-merges Data into the document (see ApplyPatch); fails
	// with ErrNotFound when there is no live document.
	WriteUpdate WriteType = "update"
	// WriteDelete turns the document into a tombstone; ErrNotFound when there
	// is no live document.
	WriteDelete WriteType = "delete"
)

// Write is one document write. Data must already be cleaned (CleanInput) and
// must not be modified by the caller after it is handed to the store.
type Write struct {
	Type WriteType
	Path string
	Data map[string]any
	// IfMatch filters are evaluated atomically against the current live
	// document; if any is false (or there is no live document for a
	// replace/update/delete) the write fails with *PreconditionError.
	IfMatch []Filter
}

// WriteResult is the outcome of one applied write.
type WriteResult struct {
	// Doc is the document after the write (the tombstone for a delete).
	Doc *Document
	// Created is true when the write created the document (no live document
	// existed before).
	Created bool
}

// ChangeOp is the operation recorded in the change log.
type ChangeOp string

// Change-log operations.
const (
	OpCreate ChangeOp = "create"
	OpUpdate ChangeOp = "update"
	OpDelete ChangeOp = "delete"
)

// Change is one committed write as recorded in the change log.
type Change struct {
	Seq    int64
	DB     string
	Op     ChangeOp
	Path   string
	Before *Document // nil on create
	After  *Document // the tombstone on delete
	Time   int64     // unix ms of the commit
}

// CursorAdvance moves a durable cursor in the same transaction as a Commit.
// The advance succeeds only if the cursor is currently at From (0 for a new
// cursor); otherwise the whole commit fails with ErrCursorConflict.
type CursorAdvance struct {
	Name string
	From int64
	To   int64
}

// CommitOptions modify a Commit.
type CommitOptions struct {
	Cursor *CursorAdvance
}

// Checkpoint is a position in a collection's replication order: documents are
// ordered by (Seq of their last change, ID).
type Checkpoint struct {
	Seq int64
	ID  string
}

// Store is the engine contract. Every method is safe for concurrent use.
// Methods that take a context stop waiting when it is cancelled; a write that
// was already handed to the engine's committer may still commit.
type Store interface {
	// Get returns the live document at path in db, or ErrNotFound (also for
	// a tombstone).
	Get(ctx context.Context, db, path string) (*Document, error)

	// Commit applies writes atomically: all of them or none. On failure the
	// error is a *WriteError naming the failing write, wrapping
	// ErrAlreadyExists, ErrNotFound, *PreconditionError, ErrTooLarge or
	// ErrInvalidDocument; or ErrCursorConflict for opts.Cursor. On success
	// the transaction is durable (synced to stable storage) before Commit
	// returns, and every write IsLogged names (every non-system collection,
	// and _triggers, whose changes every node follows) has appended one
	// Change to the log, in write order. Other system writes (outbox rows,
	// cursors, users, sessions) append nothing and leave Seq at 0.
	Commit(ctx context.Context, db string, writes []Write, opts CommitOptions) ([]WriteResult, error)

	// Query returns one page of documents matching q, in CompareDocs order,
	// continuing strictly after q.StartAfter. q must be normalized.
	// NextCursor is set when more documents may follow.
	Query(ctx context.Context, db string, q Query) (QueryResult, error)

	// ChangedSince returns documents of the concrete collection (tombstones
	// included) ordered by (Seq, ID) and strictly after cp, at most limit.
	// This is the RxDB pull order: a write committed later always has a
	// larger Seq, so no document can hide behind a checkpoint.
	ChangedSince(ctx context.Context, db, collection string, cp Checkpoint, limit int) ([]*Document, error)

	// ReadChanges returns up to limit changes with Seq > after, in Seq
	// order, across all databases. It returns *PositionExpiredError when
	// changes after `after` were already purged by retention. A limit of 0
	// reads no change and only checks the position.
	ReadChanges(ctx context.Context, after int64, limit int) ([]Change, error)

	// Head returns the Seq of the last committed change (0 when none).
	Head(ctx context.Context) (int64, error)

	// Notify returns a channel that is closed after the next commit that
	// appends to the change log. Waiters re-read the log; nothing is ever
	// dropped because nothing is delivered through the channel.
	Notify() <-chan struct{}

	// Cursor returns the position of a durable cursor (0, nil when unknown).
	Cursor(ctx context.Context, name string) (int64, error)

	// SetCursor creates or moves a durable cursor. Durable cursors hold back
	// change-log retention: changes after the smallest cursor are kept.
	SetCursor(ctx context.Context, name string, seq int64) error

	// DeleteCursor removes a durable cursor (no error when unknown).
	DeleteCursor(ctx context.Context, name string) error

	// Purge applies the retention policy now: it drops changes older than
	// the configured retention that no durable cursor still needs, and
	// tombstones older than the retention. Engines also run it periodically.
	Purge(ctx context.Context) error

	// Ready reports nil when the engine is open and its change feed is live.
	Ready(ctx context.Context) error

	// Close flushes pending commits and releases the engine. Further calls
	// return ErrClosed.
	Close() error
}
