package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// Access control beyond the coarse authorize check: security rules decide
// per document. Every surface goes through these functions:
//
//	readable    — may the caller read this document (get, and every document
//	              of a list, query, subscription event — old state included —
//	              or replication pull and push conflict; and any stored
//	              document a write's result or error would show: writeView,
//	              hideUnreadable)
//	checkList   — could the caller read anything in this collection at all
//	guardWrites — may the caller apply these writes; pins what the rules saw
//
// Admin callers (the admin key or the "admin" role) bypass rules.

// maxGuardRetries bounds how often a guarded commit is retried when a
// concurrent write changed a document between the rules check and the
// commit.
const maxGuardRetries = 3

// denied is the error for a rules denial: 401 for anonymous callers (they
// may gain access by authenticating), 403 otherwise.
func denied(caller *Caller, what string) error {
	if caller == nil || caller.Kind == kindAnonymous {
		return errorf(http.StatusUnauthorized, codeUnauthenticated, "Authentication required to %s.", what)
	}
	return errorf(http.StatusForbidden, codePermissionDenied, "Security rules do not allow you to %s.", what)
}

// storeGetter lets rule conditions read documents of the same database
// (get() and exists()).
type storeGetter struct {
	store collections.Store
	db    string
}

func (g storeGetter) GetData(ctx context.Context, path string) (map[string]any, bool, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, false, err
	}
	if collections.IsSystemPath(path) {
		// Rules decide for callers; a path built from a capture or from
		// request data must not turn Loom's own state into an oracle.
		return nil, false, nil
	}
	d, err := g.store.Get(ctx, g.db, path)
	if errors.Is(err, collections.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return d.Data, true, nil
}

// allow evaluates the rules for one operation.
func (s *Server) allow(ctx context.Context, caller *Caller, db string, req rules.Request) (bool, error) {
	req.Auth = caller.ruleAuth()
	req.Time = time.Now()
	return s.rules.Load().Allow(ctx, req, storeGetter{s.store, db})
}

// readable reports whether caller may read d (op get or list).
func (s *Server) readable(ctx context.Context, caller *Caller, db string, op rules.Op, d *collections.Document) (bool, error) {
	if caller.Admin {
		return true, nil
	}
	return s.allow(ctx, caller, db, rules.Request{Op: op, Path: d.Path, Existing: d.Data})
}

// checkGet decides a get of path, whose stored document is d (nil when
// there is none): without read access the caller cannot tell a missing
// document from a forbidden one.
func (s *Server) checkGet(ctx context.Context, caller *Caller, db, path string, d *collections.Document) error {
	if caller.Admin {
		return nil
	}
	req := rules.Request{Op: rules.OpGet, Path: path}
	if d != nil {
		req.Existing = d.Data
	}
	ok, err := s.allow(ctx, caller, db, req)
	if err != nil {
		return err
	}
	if !ok {
		return denied(caller, "read "+path)
	}
	return nil
}

// checkList refuses at once a list or query on a collection (or pattern) in
// which no rule could ever let the caller read a document.
func (s *Server) checkList(caller *Caller, collection string) error {
	if caller.Admin || s.rules.Load().MayList(caller.ruleAuth(), collection) {
		return nil
	}
	return denied(caller, "list "+collection)
}

// checkMay refuses at once a request for ops on path (with "*" segments
// standing for any segment; "" for anywhere) that no rule could ever allow
// the caller. Handlers call it before reading the request body, so a
// caller who may not write gets its 401/403 without the server spending a
// byte of memory or a second of waiting on the body.
func (s *Server) checkMay(caller *Caller, path, what string, ops ...rules.Op) error {
	if caller.Admin || s.rules.Load().May(caller.ruleAuth(), path, ops...) {
		return nil
	}
	return denied(caller, what)
}

// writeOps are the operations of a request that may create, change or
// delete documents of any kind (a batch, an RxDB push).
var writeOps = []rules.Op{rules.OpCreate, rules.OpUpdate, rules.OpDelete}

// filterReadable keeps the documents of a page the caller may read.
func (s *Server) filterReadable(ctx context.Context, caller *Caller, db string, docs []*collections.Document) ([]*collections.Document, error) {
	if caller.Admin {
		return docs, nil
	}
	out := docs[:0]
	for _, d := range docs {
		ok, err := s.readable(ctx, caller, db, rules.OpList, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// queryReadable runs q and returns a page of documents the caller may read.
// Pages are refilled from the following engine pages (a bounded number of
// rounds) so that rules filtering rarely shortens a page; the cursor always
// continues after the last document examined, so nothing is skipped.
func (s *Server) queryReadable(ctx context.Context, caller *Caller, db string, q collections.Query) (collections.QueryResult, error) {
	const maxRounds = 8
	res, err := s.store.Query(ctx, db, q)
	if err != nil || caller.Admin {
		return res, err
	}
	var out []*collections.Document
	for round := 0; ; round++ {
		page, err := s.filterReadable(ctx, caller, db, res.Docs)
		if err != nil {
			return collections.QueryResult{}, err
		}
		out = append(out, page...)
		if len(out) >= q.Limit || res.NextCursor == "" || round == maxRounds-1 {
			break
		}
		next := q
		next.StartAfter = res.NextCursor
		next.Limit = q.Limit - len(out)
		if res, err = s.store.Query(ctx, db, next); err != nil {
			return collections.QueryResult{}, err
		}
	}
	return collections.QueryResult{Docs: out, NextCursor: res.NextCursor}, nil
}

// guardWrites evaluates the rules for every write of one commit, in order,
// each seeing the documents as the earlier writes of the commit leave them.
// It returns the writes to commit, pinned to the state the rules saw: a
// version precondition on each existing document, and an upsert of a
// missing document turned into a create. A concurrent change then fails
// the commit with a precondition error instead of slipping past the rules,
// and commitGuarded re-evaluates.
func (s *Server) guardWrites(ctx context.Context, caller *Caller, db string, writes []collections.Write) (out []collections.Write, pins []pin, err error) {
	if caller.Admin {
		return writes, make([]pin, len(writes)), nil
	}
	out = make([]collections.Write, len(writes))
	pins = make([]pin, len(writes))
	view := commitView{store: s.store, db: db, pending: map[string]*docState{}}
	for i, w := range writes {
		cur, inBatch, err := view.current(ctx, w.Path)
		if err != nil {
			return nil, nil, err
		}
		req, after, err := rulesRequest(w, cur)
		if err != nil {
			return nil, nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
		ok, err := s.allow(ctx, caller, db, req)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, &collections.WriteError{Index: i, Path: w.Path, Err: denied(caller, string(req.Op)+" "+w.Path)}
		}
		if err := s.checkIfMatchReads(ctx, caller, db, w, req.Existing); err != nil {
			return nil, nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
		out[i] = w
		if !inBatch {
			out[i], pins[i] = pinWrite(w, cur)
		}
		view.apply(w.Path, req.Op, cur, after)
	}
	return out, pins, nil
}

// docState is a document as the rules see it during one commit.
type docState struct {
	data    map[string]any
	version int64
}

// commitView is the documents as the earlier writes of one commit leave
// them, over the store's state for the documents no write touched yet.
type commitView struct {
	store   collections.Store
	db      string
	pending map[string]*docState // nil = absent or deleted
}

// current is path's state (nil when absent); inBatch tells whether an
// earlier write of the commit made it.
func (v *commitView) current(ctx context.Context, path string) (st *docState, inBatch bool, err error) {
	if st, ok := v.pending[path]; ok {
		return st, true, nil
	}
	d, err := v.store.Get(ctx, v.db, path)
	if errors.Is(err, collections.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &docState{data: d.Data, version: d.Version}, false, nil
}

// apply records the state a write the rules allowed leaves at path.
func (v *commitView) apply(path string, op rules.Op, cur *docState, after map[string]any) {
	if op == rules.OpDelete {
		v.pending[path] = nil
		return
	}
	version := int64(1)
	if cur != nil {
		version = cur.version + 1
	}
	v.pending[path] = &docState{data: after, version: version}
}

// rulesRequest is what the rules see of w over cur (nil: absent), and the
// document's data after it (nil for a delete). A replace of a missing
// document is a create; an update is seen as its merged result, and a
// patch that does not apply is the error.
func rulesRequest(w collections.Write, cur *docState) (req rules.Request, after map[string]any, err error) {
	req = rules.Request{Path: w.Path}
	if cur != nil {
		req.Existing = cur.data
	}
	switch w.Type {
	case collections.WriteDelete:
		req.Op = rules.OpDelete
	case collections.WriteCreate:
		req.Op, after = rules.OpCreate, w.Data
	case collections.WriteReplace:
		req.Op, after = rules.OpUpdate, w.Data
		if cur == nil {
			req.Op = rules.OpCreate
		}
	default: // update: the rules see the merged result
		req.Op = rules.OpUpdate
		base := map[string]any{}
		if cur != nil {
			base = collections.CloneValue(cur.data).(map[string]any)
		}
		merged, err := collections.ApplyPatch(base, w.Data)
		if err != nil {
			return req, nil, err
		}
		after = merged
	}
	req.Resource = after
	return req, after, nil
}

// pinWrite pins w, the commit's first write to its path, to the state cur
// the rules saw: a version precondition on an existing document, and an
// upsert without conditions of a missing one turned into a create.
func pinWrite(w collections.Write, cur *docState) (collections.Write, pin) {
	switch {
	case cur != nil:
		w.IfMatch = append(slices.Clip(w.IfMatch), collections.Filter{
			Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(cur.version, 10)),
		})
		return w, pin{set: true, version: cur.version}
	case w.Type == collections.WriteReplace && len(w.IfMatch) == 0:
		w.Type = collections.WriteCreate
		return w, pin{set: true}
	default:
		return w, pin{}
	}
}

// checkIfMatchReads refuses an ifMatch condition on user fields of a
// document the caller may not get: whether it holds (the write goes
// through, or 412) would tell the field's value, and a prefix condition
// would spell it out. Conditions on envelope fields (version, timestamps,
// id) only test what a write's result shows anyway (writeView).
func (s *Server) checkIfMatchReads(ctx context.Context, caller *Caller, db string, w collections.Write, existing map[string]any) error {
	readsData := false
	for _, f := range w.IfMatch {
		if !collections.IsEnvelopeField(f.Field) {
			readsData = true
			break
		}
	}
	if !readsData {
		return nil
	}
	ok, err := s.allow(ctx, caller, db, rules.Request{Op: rules.OpGet, Path: w.Path, Existing: existing})
	if err != nil {
		return err
	}
	if !ok {
		return denied(caller, "read "+w.Path+" (its ifMatch conditions read its fields)")
	}
	return nil
}

// pin is the state a guarded write was pinned to: the version the rules saw,
// or 0 for a document that did not exist.
type pin struct {
	set     bool
	version int64
}

// commitGuarded checks writes against the rules and commits them, retrying
// when a document the rules looked at changed before the commit.
func (s *Server) commitGuarded(ctx context.Context, caller *Caller, db string, writes []collections.Write) ([]collections.WriteResult, error) {
	for attempt := 0; ; attempt++ {
		guarded, pins, err := s.guardWrites(ctx, caller, db, writes)
		if err != nil {
			return nil, err
		}
		res, err := s.store.Commit(ctx, db, guarded, collections.CommitOptions{})
		if err == nil || attempt == maxGuardRetries || !pinMoved(err, pins) {
			if err != nil {
				err = s.hideUnreadable(ctx, caller, db, err)
			}
			return res, err
		}
	}
}

// hiddenPrecondition is a failed precondition whose current document the
// caller may not read: the 412 carries no details.current. (A write rule
// that lets anyone update must not let them read the document back through
// a deliberately wrong If-Match.)
type hiddenPrecondition struct{ path string }

func (e *hiddenPrecondition) Error() string { return "precondition failed on " + e.path }

// Unwrap keeps errors.Is(err, collections.ErrPreconditionFailed) true, so
// callers that retry on a lost race still do.
func (e *hiddenPrecondition) Unwrap() error { return collections.ErrPreconditionFailed }

// hideUnreadable replaces, in a commit error, a precondition failure by a
// hiddenPrecondition when the caller may not get the document now: the
// stored document it carries, or the null that says there is none (so an
// existing and a missing document the caller may not read fail alike).
// Every other commit error names only the caller's own input (path, index,
// sentinel), never stored values.
func (s *Server) hideUnreadable(ctx context.Context, caller *Caller, db string, err error) error {
	var pe *collections.PreconditionError
	if !errors.As(err, &pe) || caller.Admin {
		return err
	}
	req := rules.Request{Op: rules.OpGet, Path: pe.Path}
	if pe.Current != nil {
		req.Existing = pe.Current.Data
	}
	ok, rerr := s.allow(ctx, caller, db, req)
	if rerr != nil {
		return rerr
	}
	if ok {
		return err
	}
	hidden := &hiddenPrecondition{path: pe.Path}
	var we *collections.WriteError
	if errors.As(err, &we) {
		return &collections.WriteError{Index: we.Index, Path: we.Path, Err: hidden}
	}
	return hidden
}

// writeView is what a write's response may show of the document d it
// produced: the whole document when the caller may get it now, else only
// the envelope (id, collection, version, timestamps). A merge (PATCH or a
// batch update) otherwise hands back stored fields the caller never sent
// and may not read. A create or replace stores exactly the fields the
// caller sent, so its result shows nothing new and costs no rule
// evaluation.
func (s *Server) writeView(ctx context.Context, caller *Caller, db string, typ collections.WriteType, d *collections.Document) (*collections.Document, error) {
	if d == nil || caller.Admin || typ != collections.WriteUpdate {
		return d, nil
	}
	ok, err := s.readable(ctx, caller, db, rules.OpGet, d)
	if err != nil || ok {
		return d, err
	}
	envelope := *d
	envelope.Data = nil
	return &envelope, nil
}

// pinMoved reports whether a commit failed because a document moved away
// from the state its pin recorded (then the rules must be evaluated again),
// rather than because of the client's own precondition.
func pinMoved(err error, pins []pin) bool {
	var we *collections.WriteError
	if !errors.As(err, &we) || we.Index < 0 || we.Index >= len(pins) || !pins[we.Index].set {
		return false
	}
	p := pins[we.Index]
	if errors.Is(err, collections.ErrAlreadyExists) {
		return p.version == 0 // an upsert turned create lost a race
	}
	var pe *collections.PreconditionError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Current == nil || pe.Current.Version != p.version
}
