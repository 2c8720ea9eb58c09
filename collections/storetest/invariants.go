package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
)

// checkInvariants is run by t.Cleanup after every subtest that writes (like
// bbolt's MustCheck):
//   - the change log, read from its start, is contiguous and ends at Head;
//   - every change is well formed: After is set and names the change's path
//     and seq, Before is the previous After of that path, versions count up
//     by one, only paths IsLogged names are logged;
//   - every document touched keeps the version, seq and data of its last
//     change (live ones through Get, tombstones through a showDeleted query).
//
// When retention already purged the start of the log, only contiguity from
// the oldest retained position is checked: tombstones may be gone too.
func checkInvariants(t *testing.T, s collections.Store) {
	t.Helper()
	ctx, cancel := ctxT()
	defer cancel()
	head, err := s.Head(ctx)
	if err != nil {
		t.Errorf("invariants: Head: %v", err)
		return
	}
	from := int64(0)
	changes, err := readAll(s, 0)
	var pe *collections.PositionExpiredError
	if errors.As(err, &pe) {
		from = pe.Oldest
		changes, err = readAll(s, from)
	}
	if err != nil {
		t.Errorf("invariants: %v", err)
		return
	}
	if len(changes) > 0 {
		if last := changes[len(changes)-1].Seq; last != head {
			t.Errorf("invariants: last change seq=%d, want Head %d", last, head)
		}
	} else if from == 0 && head != 0 {
		t.Errorf("invariants: empty change log, Head=%d, want 0", head)
	} else if from != 0 && from != head {
		t.Errorf("invariants: nothing retained after %d, Head=%d", from, head)
	}

	type key struct{ db, path string }
	last := map[key]collections.Change{}
	var order []key
	for _, c := range changes {
		if !checkChange(t, c) {
			return
		}
		k := key{c.DB, c.Path}
		prev, seen := last[k]
		switch {
		case !seen:
			order = append(order, k)
		case c.After.Version != prev.After.Version+1:
			t.Errorf("invariants: change %d on %s: version=%d, want %d (previous change %d)", c.Seq, c.Path, c.After.Version, prev.After.Version+1, prev.Seq)
		case c.Before != nil && (c.Before.Version != prev.After.Version || !collections.Equal(c.Before.Data, prev.After.Data)):
			t.Errorf("invariants: change %d on %s: Before=%s, want the After of change %d: %s", c.Seq, c.Path, docString(c.Before), prev.Seq, docString(prev.After))
		}
		last[k] = c
	}
	if from != 0 {
		return // tombstones older than retention may be gone
	}
	for _, k := range order {
		c := last[k]
		var got *collections.Document
		if c.After.Deleted {
			got = findTombstone(ctx, t, s, k.db, k.path)
		} else {
			got, err = s.Get(ctx, k.db, k.path)
			if err != nil {
				t.Errorf("invariants: Get(%s, %s) after change %d (%s): %v", k.db, k.path, c.Seq, c.Op, err)
				continue
			}
		}
		if got == nil {
			continue
		}
		if got.Version != c.After.Version || got.Seq != c.Seq || got.Deleted != c.After.Deleted {
			t.Errorf("invariants: %s/%s is version=%d seq=%d deleted=%v, want version %d seq %d deleted %v (its last change)",
				k.db, k.path, got.Version, got.Seq, got.Deleted, c.After.Version, c.Seq, c.After.Deleted)
		}
		if !c.After.Deleted && !collections.Equal(got.Data, c.After.Data) {
			t.Errorf("invariants: %s/%s data=%s, want %s (its last change %d)", k.db, k.path, dataString(got.Data), dataString(c.After.Data), c.Seq)
		}
	}
}

// checkChange checks one change on its own; false stops the check (a
// malformed change would only produce follow-up noise).
func checkChange(t *testing.T, c collections.Change) bool {
	t.Helper()
	switch {
	case c.After == nil:
		t.Errorf("invariants: change %d (%s %s) has no After", c.Seq, c.Op, c.Path)
		return false
	case c.DB == "":
		t.Errorf("invariants: change %d (%s %s) has no DB", c.Seq, c.Op, c.Path)
	case !collections.IsLogged(c.Path):
		t.Errorf("invariants: change %d logs system path %s", c.Seq, c.Path)
	case c.After.Path != c.Path:
		t.Errorf("invariants: change %d: After.Path=%q, want %q", c.Seq, c.After.Path, c.Path)
	case c.After.Seq != c.Seq:
		t.Errorf("invariants: change %d on %s: After.Seq=%d, want %d", c.Seq, c.Path, c.After.Seq, c.Seq)
	case c.After.Deleted != (c.Op == collections.OpDelete):
		t.Errorf("invariants: change %d (%s %s): After.Deleted=%v", c.Seq, c.Op, c.Path, c.After.Deleted)
	case c.Time <= 0:
		t.Errorf("invariants: change %d on %s: Time=%d, want unix ms", c.Seq, c.Path, c.Time)
	}
	switch c.Op {
	case collections.OpCreate:
		if c.Before != nil && !c.Before.Deleted {
			t.Errorf("invariants: create %d on %s has a live Before: %s", c.Seq, c.Path, docString(c.Before))
		}
	case collections.OpUpdate, collections.OpDelete:
		if c.Before == nil || c.Before.Deleted {
			t.Errorf("invariants: %s %d on %s: Before=%s, want the live document", c.Op, c.Seq, c.Path, docString(c.Before))
		} else if c.After.Version != c.Before.Version+1 {
			t.Errorf("invariants: %s %d on %s: version %d -> %d, want +1", c.Op, c.Seq, c.Path, c.Before.Version, c.After.Version)
		}
	default:
		t.Errorf("invariants: change %d on %s: Op=%q", c.Seq, c.Path, c.Op)
		return false
	}
	return true
}

// findTombstone returns the tombstone at path through a showDeleted query.
func findTombstone(ctx context.Context, t *testing.T, s collections.Store, db, path string) *collections.Document {
	t.Helper()
	coll, id := collections.SplitDocPath(path)
	q := collections.Query{
		Collection:  coll,
		Filters:     []collections.Filter{filter(collections.FieldID, collections.OpEq, id)},
		ShowDeleted: true,
	}
	if err := q.Normalize(); err != nil {
		t.Errorf("invariants: %v", err)
		return nil
	}
	res, err := s.Query(ctx, db, q)
	if err != nil {
		t.Errorf("invariants: query for the tombstone of %s/%s: %v", db, path, err)
		return nil
	}
	if len(res.Docs) != 1 || res.Docs[0].Path != path {
		t.Errorf("invariants: tombstone of %s/%s: query returned %v, want it alone", db, path, paths(res.Docs))
		return nil
	}
	if !res.Docs[0].Deleted {
		t.Errorf("invariants: %s/%s: last change is a delete but the query returned a live document", db, path)
	}
	return res.Docs[0]
}
