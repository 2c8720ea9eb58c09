package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/loomdb/loom/collections"
)

// DefaultDatabase is the database Docs uses when given none.
const DefaultDatabase = "default"

// maxEmptyPages bounds how many pages in a row Docs.Query reads that the
// rules left empty before it gives up (ErrIncomplete).
const maxEmptyPages = 32

// ErrIncomplete is a Docs.Query that stopped after too many pages the
// rules left empty: the documents returned with it may not be all.
var ErrIncomplete = errors.New("access: query stopped after too many empty pages: the result may be incomplete")

// Docs is the agent runtime's document API (webhooks.Docs) in process: the
// same protocol as Loom's REST API with a credential, without HTTP. Errors
// match webhooks/loomclient's: collections.ErrNotFound, ErrAlreadyExists
// and ErrPreconditionFailed through errors.Is; a denial is a *Denied
// through errors.As; a bad path or query wraps collections.ErrInvalidPath
// or ErrInvalidQuery.
type Docs struct {
	svc    *Service
	db     string
	caller func(context.Context) (*Caller, error)
}

// NewDocs returns the documents of database db ("": DefaultDatabase) as
// the caller that caller resolves for each call sees them (a service key,
// typically; resolving per call lets a revoked key stop working).
func NewDocs(svc *Service, db string, caller func(context.Context) (*Caller, error)) *Docs {
	if db == "" {
		db = DefaultDatabase
	}
	return &Docs{svc: svc, db: db, caller: caller}
}

// Get returns the live document at path.
func (d *Docs) Get(ctx context.Context, path string) (*collections.Document, error) {
	caller, err := d.caller(ctx)
	if err != nil {
		return nil, fmt.Errorf("access: get %s: %w", path, err)
	}
	doc, err := d.svc.Get(ctx, caller, d.db, path)
	if err != nil {
		return nil, fmt.Errorf("access: get %s: %w", path, err)
	}
	return doc, nil
}

// Create creates the document at path with data (envelope fields in it
// are ignored); it fails with collections.ErrAlreadyExists when a live
// document is there.
func (d *Docs) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, fmt.Errorf("access: create %s: %w", path, err)
	}
	return d.write(ctx, "create", collections.Write{Type: collections.WriteCreate, Path: path}, withoutEnvelope(data))
}

// Update deep-merges data into the document at path (PATCH semantics).
// With ifVersion > 0 it applies only at that version, else it fails with
// collections.ErrPreconditionFailed.
func (d *Docs) Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, fmt.Errorf("access: update %s: %w", path, err)
	}
	w := collections.Write{Type: collections.WriteUpdate, Path: path}
	if ifVersion > 0 {
		w.IfMatch = []collections.Filter{{
			Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(ifVersion, 10)),
		}}
	}
	return d.write(ctx, "update", w, data)
}

// Delete removes the document at path; a missing one fails with
// collections.ErrNotFound.
func (d *Docs) Delete(ctx context.Context, path string) error {
	if err := collections.ValidateDocPath(path); err != nil {
		return fmt.Errorf("access: delete %s: %w", path, err)
	}
	caller, err := d.caller(ctx)
	if err != nil {
		return fmt.Errorf("access: delete %s: %w", path, err)
	}
	if _, err := d.svc.Commit(ctx, caller, d.db, []collections.Write{{Type: collections.WriteDelete, Path: path}}); err != nil {
		var we *collections.WriteError
		if errors.As(err, &we) {
			err = we.Err
		}
		return fmt.Errorf("access: delete %s: %w", path, err)
	}
	return nil
}

// Batch commits writes in one atomic commit, as POST /batch does: each
// create, update or delete means what Create, Update (IfMatch for a
// version) and Delete do, with the same data handling and the same checks
// per write; all of them commit, or on an error none. It returns the
// written documents in order (nil for a delete). An error about one write
// is a *collections.WriteError naming its index, wrapping the sentinel.
func (d *Docs) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	ws := make([]collections.Write, len(writes))
	for i, w := range writes {
		if err := collections.ValidateDocPath(w.Path); err != nil {
			return nil, fmt.Errorf("access: batch: %w", &collections.WriteError{Index: i, Path: w.Path, Err: err})
		}
		switch w.Type {
		case collections.WriteCreate, collections.WriteUpdate:
			data := w.Data
			if w.Type == collections.WriteCreate {
				data = withoutEnvelope(data)
			}
			var err error
			if w.Data, err = input(w.Path, data); err != nil {
				return nil, fmt.Errorf("access: batch: %w", &collections.WriteError{Index: i, Path: w.Path, Err: err})
			}
		case collections.WriteDelete:
			w.Data = nil
		default:
			return nil, fmt.Errorf("access: batch: %w", &collections.WriteError{Index: i, Path: w.Path,
				Err: fmt.Errorf("%w: write type %q", collections.ErrInvalidDocument, w.Type)})
		}
		ws[i] = w
	}
	caller, err := d.caller(ctx)
	if err != nil {
		return nil, fmt.Errorf("access: batch: %w", err)
	}
	res, err := d.svc.Commit(ctx, caller, d.db, ws)
	if err != nil {
		return nil, fmt.Errorf("access: batch: %w", err)
	}
	if len(res) != len(ws) {
		return nil, errors.New("access: batch: the store returned no result for a committed write")
	}
	out := make([]*collections.Document, len(ws))
	for i := range res {
		if ws[i].Type != collections.WriteDelete {
			out[i] = res[i].Doc
		}
	}
	return out, nil
}

// withoutEnvelope is data without its server-owned fields, which a create
// drops, as over REST.
func withoutEnvelope(data map[string]any) map[string]any {
	body := make(map[string]any, len(data))
	for k, v := range data {
		if !collections.IsEnvelopeField(k) {
			body[k] = v
		}
	}
	return body
}

// input is data as the REST API would receive it for the document at
// path: encoded to JSON and decoded with exact numbers (a copy the
// caller's map does not alias), then cleaned of server-owned fields.
func input(path string, data map[string]any) (map[string]any, error) {
	if data == nil {
		data = map[string]any{}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", collections.ErrInvalidDocument, err)
	}
	if data, err = collections.DecodeObject(b); err != nil {
		return nil, fmt.Errorf("%w: %v", collections.ErrInvalidDocument, err)
	}
	_, id := collections.SplitDocPath(path)
	return collections.CleanInput(data, id)
}

// write commits w with data as the REST API would receive it (input).
func (d *Docs) write(ctx context.Context, op string, w collections.Write, data map[string]any) (*collections.Document, error) {
	fail := func(err error) (*collections.Document, error) {
		return nil, fmt.Errorf("access: %s %s: %w", op, w.Path, err)
	}
	var err error
	if w.Data, err = input(w.Path, data); err != nil {
		return fail(err)
	}
	caller, err := d.caller(ctx)
	if err != nil {
		return fail(err)
	}
	res, err := d.svc.Commit(ctx, caller, d.db, []collections.Write{w})
	if err != nil {
		var we *collections.WriteError
		if errors.As(err, &we) {
			err = we.Err // one write: its index says nothing
		}
		return fail(err)
	}
	if len(res) != 1 || res[0].Doc == nil {
		return fail(errors.New("the store returned no result for a committed write"))
	}
	return res[0].Doc, nil
}

// Query returns up to q.Limit documents of q (0 means
// collections.DefaultLimit), following the sealed cursor across pages of at
// most collections.MaxLimit, as loomclient follows nextCursor. q is
// validated exactly as the REST query endpoint does: it travels through its
// JSON form. After maxEmptyPages pages in a row the rules left empty it
// returns what it has with ErrIncomplete.
func (d *Docs) Query(ctx context.Context, q collections.Query) ([]*collections.Document, error) {
	fail := func(err error) ([]*collections.Document, error) {
		return nil, fmt.Errorf("access: query %s: %w", q.Collection, err)
	}
	b, err := json.Marshal(q)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", collections.ErrInvalidQuery, err))
	}
	if q, err = collections.DecodeQuery(b); err != nil {
		return fail(err)
	}
	want := q.Limit
	switch {
	case want < 0:
		return fail(fmt.Errorf("%w: limit must not be negative", collections.ErrInvalidQuery))
	case want == 0:
		want = collections.DefaultLimit
	}
	caller, err := d.caller(ctx)
	if err != nil {
		return fail(err)
	}
	var out []*collections.Document
	for empty := 0; len(out) < want; {
		page := q
		page.Limit = min(want-len(out), collections.MaxLimit)
		res, err := d.svc.Query(ctx, caller, d.db, page)
		if err != nil {
			return fail(err)
		}
		out = append(out, res.Docs...)
		if res.NextCursor == "" {
			break
		}
		if len(res.Docs) > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyPages {
			return out, fmt.Errorf("%w (%s)", ErrIncomplete, q.Collection)
		}
		q.StartAfter = res.NextCursor
	}
	return out, nil
}
