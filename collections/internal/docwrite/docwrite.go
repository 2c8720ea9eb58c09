// Package docwrite holds the write semantics the storage engines share:
// from a write and the document it meets, the document it leaves.
package docwrite

import (
	"fmt"

	"github.com/loomdb/loom/collections"
)

// Outcome is what one write leaves.
type Outcome struct {
	Next *collections.Document
	Op   collections.ChangeOp
	Data []byte // Next.Data encoded
	Live bool   // the write met a live (not deleted) document
}

// Result is the WriteResult of the write.
func (o Outcome) Result(w *collections.Write) collections.WriteResult {
	return collections.WriteResult{Doc: o.Next, Created: !o.Live && w.Type != collections.WriteDelete}
}

// Apply checks w against cur (nil when the path was never written; curData
// is its encoded data) and returns the document it leaves at time now, its
// data encoded within maxBytes; Next.Seq is left to the engine. Errors are
// the write's own. With clone the result shares no data with cur (an
// update patches a copy), for an engine whose cur must stay untouched.
func Apply(w *collections.Write, cur *collections.Document, curData []byte, now int64, maxBytes int, clone bool) (Outcome, error) {
	live := cur != nil && !cur.Deleted
	if len(w.IfMatch) > 0 && (!live || !collections.MatchFilters(cur, w.IfMatch)) {
		pe := &collections.PreconditionError{Path: w.Path}
		if live {
			pe.Current = cur
		}
		return Outcome{}, pe
	}
	coll, id := collections.SplitDocPath(w.Path)
	next := &collections.Document{Path: w.Path, Collection: coll, ID: id, Version: 1, CreatedAt: now, UpdatedAt: now}
	if cur != nil {
		next.Version = cur.Version + 1
	}
	if live {
		next.CreatedAt = cur.CreatedAt
	}
	curValue := func() map[string]any {
		if clone {
			return collections.CloneValue(cur.Data).(map[string]any)
		}
		return cur.Data
	}
	op := collections.OpUpdate
	var data []byte
	var err error
	switch w.Type {
	case collections.WriteCreate, collections.WriteReplace:
		if w.Type == collections.WriteCreate && live {
			return Outcome{}, collections.ErrAlreadyExists
		}
		if !live {
			op = collections.OpCreate
		}
		next.Data = w.Data
		if next.Data == nil {
			next.Data = map[string]any{}
		}
	case collections.WriteUpdate:
		if !live {
			return Outcome{}, collections.ErrNotFound
		}
		if next.Data, err = collections.ApplyPatch(curValue(), w.Data); err != nil {
			return Outcome{}, err
		}
	case collections.WriteDelete:
		if !live {
			return Outcome{}, collections.ErrNotFound
		}
		next.Data, data, next.Deleted, op = curValue(), curData, true, collections.OpDelete
	default:
		return Outcome{}, fmt.Errorf("%w: unknown write type %q", collections.ErrInvalidDocument, w.Type)
	}
	if data == nil {
		if data, err = collections.EncodeData(next.Data, maxBytes); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{Next: next, Op: op, Data: data, Live: live}, nil
}
