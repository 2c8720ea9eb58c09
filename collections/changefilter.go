package collections

import "context"

// ChangeWant tells a filtered read of the change log whether the caller
// needs the documents of a change: only its database, operation and path
// are known when it is asked. It is called on the reading goroutine and
// must be cheap; it must not call the store.
type ChangeWant func(db string, op ChangeOp, path string) bool

// FilteredChangeReader is an optional interface of an engine: a read of
// the change log that decodes the documents (Before, After) only of the
// changes the caller can use. A reader that looks at few of the changes
// (the trigger evaluator, whose patterns name a few collections) then
// does not pay a decode of every commit's data.
//
// ReadChangesFiltered returns exactly what ReadChanges(ctx, after, limit)
// returns (the same changes in the same order, read in one snapshot with
// the same retention check and errors, *PositionExpiredError included),
// except that a change want rejects carries only Seq, DB, Op, Path and
// Time: its Before and After are nil. A change want accepts is complete,
// as ReadChanges returns it (After is never nil there).
type FilteredChangeReader interface {
	ReadChangesFiltered(ctx context.Context, after int64, limit int, want ChangeWant) ([]Change, error)
}
