package access

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// maxGuardRetries bounds how often a guarded commit is retried when a
// concurrent write changed a document between the rules check and the
// commit.
const maxGuardRetries = 3

// Commit applies writes for caller in one atomic Store.Commit: the
// system-collection check of every write (Authorize), the rules of every
// write pinned to the versions they saw (retried when a concurrent write
// moved one), a failed precondition on a document the caller may not read
// turned into a *HiddenPrecondition, and each result reduced to what the
// caller may see of it (writeView). An error about one write is a
// *collections.WriteError naming its index.
func (s *Service) Commit(ctx context.Context, caller *Caller, db string, writes []collections.Write) ([]collections.WriteResult, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	for i, w := range writes {
		if err := Authorize(caller, actionOf(w.Type), w.Path); err != nil {
			return nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
	}
	res, err := s.commitGuarded(ctx, caller, db, writes)
	if err != nil {
		return nil, err
	}
	for i := range res {
		if i >= len(writes) {
			break
		}
		if res[i].Doc, err = s.writeView(ctx, caller, db, writes[i].Type, res[i].Doc); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// guardWrites evaluates the rules for every write of one commit, in order,
// each seeing the documents as the earlier writes of the commit leave them.
// It returns the writes to commit, pinned to the state the rules saw: a
// version precondition on each existing document, and an upsert of a
// missing document turned into a create. A concurrent change then fails
// the commit with a precondition error instead of slipping past the rules,
// and commitGuarded re-evaluates.
//
// With assumeFree, a create without conditions whose path no earlier write
// of the commit touched is taken to find its path free, without looking it
// up (see commitGuarded).
func (s *Service) guardWrites(ctx context.Context, caller *Caller, db string, writes []collections.Write, assumeFree bool) (out []collections.Write, pins []pin, err error) {
	if caller.Admin {
		return writes, make([]pin, len(writes)), nil
	}
	out = make([]collections.Write, len(writes))
	pins = make([]pin, len(writes))
	view := commitView{store: s.store, db: db}
	for i, w := range writes {
		var cur *docState
		var inBatch bool
		if _, touched := view.pending[w.Path]; !touched && assumeFree && isPlainCreate(w) {
			cur = nil // taken to be free: the commit refuses the create otherwise
		} else if cur, inBatch, err = view.current(ctx, w.Path); err != nil {
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
		if err := s.checkWrite(w.Path, after); err != nil {
			return nil, nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
		out[i] = w
		if !inBatch {
			out[i], pins[i] = pinWrite(w, cur)
		}
		if i < len(writes)-1 { // only the writes after it see the view
			view.apply(w.Path, req.Op, cur, after)
		}
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
	pending map[string]*docState // nil = absent or deleted; a nil map until the first apply
}

// isPlainCreate reports whether w is a create without conditions: when its
// path is free, nothing the store holds changes what the rules see of it or
// how it commits.
func isPlainCreate(w collections.Write) bool {
	return w.Type == collections.WriteCreate && len(w.IfMatch) == 0
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
	if v.pending == nil {
		v.pending = map[string]*docState{}
	}
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
func (s *Service) checkIfMatchReads(ctx context.Context, caller *Caller, db string, w collections.Write, existing map[string]any) error {
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
//
// A caller's commit with plain creates is first tried with their paths
// taken to be free, without looking them up: a POST to a collection names a
// fresh server-made id, and the lookup was a read per create for nothing.
// The try is exact when it commits, as the engine refuses a create on a
// taken path. On any refusal or error nothing was committed, and the writes
// are checked again with every path looked up: the rules then see what is
// stored, and the answer is the one the lookup would have given.
func (s *Service) commitGuarded(ctx context.Context, caller *Caller, db string, writes []collections.Write) ([]collections.WriteResult, error) {
	if !caller.Admin && slices.ContainsFunc(writes, isPlainCreate) {
		guarded, _, err := s.guardWrites(ctx, caller, db, writes, true)
		if err == nil {
			var res []collections.WriteResult
			if res, err = s.store.Commit(ctx, db, guarded, collections.CommitOptions{}); err == nil {
				return res, nil
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr // the commit may still land: do not try it again
		}
	}
	for attempt := 0; ; attempt++ {
		guarded, pins, err := s.guardWrites(ctx, caller, db, writes, false)
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

// hideUnreadable replaces, in a commit error, a precondition failure by a
// HiddenPrecondition when the caller may not get the document now: the
// stored document it carries, or the null that says there is none (so an
// existing and a missing document the caller may not read fail alike).
// Every other commit error names only the caller's own input (path, index,
// sentinel), never stored values.
func (s *Service) hideUnreadable(ctx context.Context, caller *Caller, db string, err error) error {
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
	hidden := &HiddenPrecondition{Path: pe.Path}
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
func (s *Service) writeView(ctx context.Context, caller *Caller, db string, typ collections.WriteType, d *collections.Document) (*collections.Document, error) {
	if d == nil || caller.Admin || typ != collections.WriteUpdate {
		return d, nil
	}
	ok, err := s.Readable(ctx, caller, db, rules.OpGet, d)
	if err != nil || ok {
		return d, err
	}
	envelope := *d
	envelope.Data, envelope.Raw = nil, nil
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

// checkWrite runs the service's WriteCheck on the document a write leaves
// at path (nil after a delete: not checked).
func (s *Service) checkWrite(path string, after map[string]any) error {
	if s.check == nil || after == nil {
		return nil
	}
	err := s.check(path, after)
	if err == nil {
		return nil
	}
	var iw *InvalidWrite
	if errors.As(err, &iw) {
		out := *iw
		out.Path = path
		return &out
	}
	return &InvalidWrite{Path: path, Msg: err.Error()}
}
