package access

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// Get returns the document at path for caller: the system-collection
// check, the store read, then the rules' get decision. Without read access
// a missing document and a forbidden one fail alike (*Denied); with it, a
// missing one is collections.ErrNotFound.
func (s *Service) Get(ctx context.Context, caller *Caller, db, path string) (*collections.Document, error) {
	return s.get(ctx, caller, db, path, false)
}

// GetForResponse is Get for a caller that only writes the document out
// with AppendJSON (the REST get): when the engine is a
// collections.RawReader the document may carry only its stored encoding
// (Raw, Data nil), and is written from it with no decode and no encode.
// Every check is Get's, made the same way: when the rules decide on the
// document, it is decoded before they run.
func (s *Service) GetForResponse(ctx context.Context, caller *Caller, db, path string) (*collections.Document, error) {
	return s.get(ctx, caller, db, path, true)
}

func (s *Service) get(ctx context.Context, caller *Caller, db, path string, forResponse bool) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, err
	}
	if err := Authorize(caller, ActionGet, path); err != nil {
		return nil, err
	}
	coll, _ := collections.SplitDocPath(path)
	all := s.readsAll(ctx, caller, rules.OpGet, coll)
	var d *collections.Document
	var err error
	if rr, ok := s.store.(collections.RawReader); ok && forResponse {
		d, err = rr.GetRaw(ctx, db, path)
		if err == nil && !all {
			err = d.DecodeRaw() // the rules read the document
		}
	} else {
		d, err = s.store.Get(ctx, db, path)
	}
	if err != nil && !errors.Is(err, collections.ErrNotFound) {
		return nil, err
	}
	if !all {
		if aerr := s.checkGet(ctx, caller, db, path, d); aerr != nil {
			return nil, aerr
		}
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// checkGet decides a get of path, whose stored document is d (nil when
// there is none).
func (s *Service) checkGet(ctx context.Context, caller *Caller, db, path string, d *collections.Document) error {
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

// Readable reports whether caller may read d (op get or list). Every
// document a surface hands a caller passes it: a list, query or
// subscription event (old state included), a replication pull or push
// conflict, and any stored document a write's result or error would show.
func (s *Service) Readable(ctx context.Context, caller *Caller, db string, op rules.Op, d *collections.Document) (bool, error) {
	if caller.Admin {
		return true, nil
	}
	return s.allow(ctx, caller, db, rules.Request{Op: op, Path: d.Path, Existing: d.Data})
}

// readsAll reports whether caller may read (op get or list) every document
// directly in collection (a collection path, or a pattern with "*"
// segments), whatever it holds, so that no per-document decision is
// needed: always for an admin, and for others when a rule decides it from
// the caller and the collection's path alone (rules.Set.AllowsAll: the
// default rules for a user's own collections). False decides nothing.
func (s *Service) readsAll(ctx context.Context, caller *Caller, op rules.Op, collection string) bool {
	return caller.Admin || s.rules.Load().AllowsAll(ctx, caller.ruleAuth(), op, collection)
}

// ReadCheck returns Readable's decision for op as a function, for a reader
// that checks many documents of collection (a collection path or pattern)
// over time: a realtime subscription. When the rules in force let caller
// read every document of collection (readsAll), it answers for those
// without evaluating the rules per document; other documents are decided
// one by one. After a rules reload (SetRules) the collection is decided
// again, so a reload takes effect from the next document on, as it does
// for Readable. Safe for concurrent use.
func (s *Service) ReadCheck(caller *Caller, db string, op rules.Op, collection string) func(context.Context, *collections.Document) (bool, error) {
	if caller.Admin {
		return func(context.Context, *collections.Document) (bool, error) { return true, nil }
	}
	type decision struct {
		set *rules.Set
		all bool
	}
	var last atomic.Pointer[decision]
	auth := caller.ruleAuth()
	return func(ctx context.Context, d *collections.Document) (bool, error) {
		set := s.rules.Load()
		dec := last.Load()
		if dec == nil || dec.set != set {
			dec = &decision{set: set, all: set.AllowsAll(ctx, auth, op, collection)}
			if ctx.Err() == nil { // an interrupted decision is not one
				last.Store(dec)
			}
		}
		if dec.all && collections.MatchCollection(collection, d.Collection) {
			return true, nil
		}
		req := rules.Request{Auth: auth, Op: op, Path: d.Path, Existing: d.Data, Time: time.Now()}
		return set.Allow(ctx, req, storeGetter{s.store, db})
	}
}

// Query runs the client query q (decoded, not yet normalized; its
// StartAfter is a sealed cursor this service returned, or "") for caller:
// normalize and open the cursor, the system-collection check, CheckList on
// the collection or pattern, then a page of readable documents with a
// sealed NextCursor. A cursor not issued for this query and caller is
// ErrBadCursor. Normalizing rewrites operators and directions in q.Filters
// and q.OrderBy in place: q shares those arrays with the caller, so a
// caller that reuses a Query must pass a copy (Docs.Query decodes its own).
func (s *Service) Query(ctx context.Context, caller *Caller, db string, q collections.Query) (collections.QueryResult, error) {
	return s.query(ctx, caller, db, q, false)
}

// QueryForResponse is Query for a caller that only writes the page out
// with AppendJSON (the REST query and listing): when the engine is a
// collections.RawReader documents may carry only their stored encoding
// (Raw, Data nil) and are written from it. Every check is Query's, made
// the same way: when the rules decide per document, each document is
// decoded before they run.
func (s *Service) QueryForResponse(ctx context.Context, caller *Caller, db string, q collections.Query) (collections.QueryResult, error) {
	return s.query(ctx, caller, db, q, true)
}

func (s *Service) query(ctx context.Context, caller *Caller, db string, q collections.Query, forResponse bool) (collections.QueryResult, error) {
	if err := s.openQueryCursor(db, caller, &q); err != nil {
		return collections.QueryResult{}, err
	}
	if err := Authorize(caller, ActionList, q.Collection); err != nil {
		return collections.QueryResult{}, err
	}
	if err := s.CheckList(caller, q.Collection); err != nil {
		return collections.QueryResult{}, err
	}
	read := s.store.Query
	if rr, ok := s.store.(collections.RawReader); ok && forResponse {
		read = rr.QueryRaw
	}
	all := s.readsAll(ctx, caller, rules.OpList, q.Collection)
	res, err := s.queryReadable(ctx, caller, db, q, read, all)
	if err != nil {
		return collections.QueryResult{}, err
	}
	if res.NextCursor, err = s.sealQueryCursor(db, caller, &q, res.NextCursor); err != nil {
		return collections.QueryResult{}, err
	}
	return res, nil
}

// filterReadable keeps the documents of a page the caller may read.
func (s *Service) filterReadable(ctx context.Context, caller *Caller, db string, docs []*collections.Document) ([]*collections.Document, error) {
	if caller.Admin {
		return docs, nil
	}
	out := docs[:0]
	for _, d := range docs {
		if err := d.DecodeRaw(); err != nil { // the rules read the document
			return nil, err
		}
		ok, err := s.Readable(ctx, caller, db, rules.OpList, d)
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
// continues after the last document examined, so nothing is skipped. read
// is the store's Query or its RawReader QueryRaw. all (readsAll): every
// document of the collection is readable, so the engine's page is the
// caller's, unfiltered and, from a RawReader, undecoded.
func (s *Service) queryReadable(ctx context.Context, caller *Caller, db string, q collections.Query, read func(context.Context, string, collections.Query) (collections.QueryResult, error), all bool) (collections.QueryResult, error) {
	const maxRounds = 8
	res, err := read(ctx, db, q)
	if err != nil || all {
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
		if res, err = read(ctx, db, next); err != nil {
			return collections.QueryResult{}, err
		}
	}
	return collections.QueryResult{Docs: out, NextCursor: res.NextCursor}, nil
}
