package webhooks

import (
	"context"

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
}
