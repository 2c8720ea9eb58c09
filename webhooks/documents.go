package webhooks

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/loomdb/loom/collections"
)

// Docs is the document API the handlers use, as a service key: in process
// in loom serve (access.Docs), over Loom's REST API in loom agents
// (webhooks/loomclient). Errors wrap the collections sentinels:
// collections.ErrNotFound, ErrAlreadyExists (a Create over a live
// document) and ErrPreconditionFailed (an Update whose ifVersion no longer
// holds).
type Docs interface {
	// Get returns the live document at path.
	Get(ctx context.Context, path string) (*collections.Document, error)
	// Create creates the document at path; it fails with ErrAlreadyExists
	// when a live document is there (idempotent handlers treat that as
	// done).
	Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error)
	// Update deep-merges data into the document (PATCH semantics). With
	// ifVersion > 0 it applies only at that version.
	Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error)
	// Delete removes the live document at path; a missing one is
	// ErrNotFound (pruning treats that as done).
	Delete(ctx context.Context, path string) error
	// Query returns up to q.Limit documents (default 100), however many
	// pages that takes.
	Query(ctx context.Context, q collections.Query) ([]*collections.Document, error)
	// Batch commits writes in one atomic commit (one fsync), all of them
	// or none: a create, update or delete (createWrite, updateWrite) means
	// what Create, Update and Delete do, with the same checks. It returns
	// the written documents in order (nil for a delete). Handlers batch
	// writes that do not depend on each other's results, so a hop waits
	// for one commit instead of several.
	Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error)
}

// createWrite is Create's write in a Batch.
func createWrite(path string, data map[string]any) collections.Write {
	return collections.Write{Type: collections.WriteCreate, Path: path, Data: data}
}

// updateWrite is Update's write in a Batch: with ifVersion > 0 it applies
// only at that version.
func updateWrite(path string, data map[string]any, ifVersion int64) collections.Write {
	w := collections.Write{Type: collections.WriteUpdate, Path: path, Data: data}
	if ifVersion > 0 {
		w.IfMatch = []collections.Filter{{
			Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(ifVersion, 10)),
		}}
	}
	return w
}
