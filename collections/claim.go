package collections

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Lease fields written by Claim on a claimed document.
const (
	FieldLeaseOwner = "leaseOwner"
	FieldLeaseUntil = "leaseUntil"
)

// Claim takes a lease on the document at path for owner until now+lease,
// using the engine's compare-and-set: it succeeds only if the document's
// leaseUntil (unix ms; a document without one is free) is in the past, or the
// lease is already owner's. Several nodes may race; exactly one wins each
// free lease. It returns the claimed document, or ErrPreconditionFailed (via
// *PreconditionError) when someone else holds the lease, or ErrNotFound.
func Claim(ctx context.Context, s Store, db, path, owner string, lease time.Duration, now time.Time) (*Document, error) {
	for attempt := 0; attempt < 2; attempt++ {
		cur, err := s.Get(ctx, db, path)
		if err != nil {
			return nil, err
		}
		until, held := Lookup(cur, FieldLeaseUntil)
		who, _ := Lookup(cur, FieldLeaseOwner)
		if held && who != owner {
			if c, ok := compareSameClass(until, json.Number(itoa(now.UnixMilli()))); ok && c > 0 {
				return nil, &PreconditionError{Path: path, Current: cur}
			}
		}
		// CAS on version: whoever commits first wins; the loser re-reads.
		w := Write{
			Type: WriteUpdate,
			Path: path,
			Data: map[string]any{
				FieldLeaseOwner: owner,
				FieldLeaseUntil: now.Add(lease).UnixMilli(),
			},
			IfMatch: []Filter{{Field: FieldVersion, Op: OpEq, Value: cur.Version}},
		}
		res, err := s.Commit(ctx, db, []Write{w}, CommitOptions{})
		if err == nil {
			return res[0].Doc, nil
		}
		if !errors.Is(err, ErrPreconditionFailed) {
			return nil, err
		}
	}
	cur, err := s.Get(ctx, db, path)
	if err != nil {
		return nil, err
	}
	return nil, &PreconditionError{Path: path, Current: cur}
}
