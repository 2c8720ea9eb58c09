package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/docwrite"
	"github.com/loomdb/loom/collections/internal/groupcommit"
)

type requestKind uint8

const (
	kindCommit requestKind = iota
	kindSetCursor
	kindDeleteCursor
)

// request is one unit of work for the committer. MongoDB has no
// savepoints, so each request is checked in Go against the batch's
// in-memory overlay and writes only when all its checks pass; a failing
// request never affects the others batched with it.
type request struct {
	ctx    context.Context
	kind   requestKind
	db     string
	writes []collections.Write
	opts   collections.CommitOptions
	name   string // cursor name
	seq    int64  // cursor position

	results []collections.WriteResult

	// Call.Size estimates the bytes the request writes (dataBytes of its
	// writes), so a batch stays a bounded transaction.
	groupcommit.Call
}

// Commit applies writes atomically through the group committer. The
// transaction is majority-committed (it survives a failover) before Commit
// returns.
func (s *Store) Commit(ctx context.Context, db string, writes []collections.Write, opts collections.CommitOptions) ([]collections.WriteResult, error) {
	if len(writes) == 0 && opts.Cursor == nil {
		return []collections.WriteResult{}, ctx.Err()
	}
	r := &request{ctx: ctx, kind: kindCommit, db: db, writes: writes, opts: opts}
	for i := range writes {
		r.Size += len(writes[i].Path) + dataBytes(writes[i].Data)
	}
	if err := s.q.Submit(ctx, r); err != nil {
		return nil, err
	}
	return r.results, nil
}

// SetCursor creates or moves a durable cursor.
func (s *Store) SetCursor(ctx context.Context, name string, seq int64) error {
	return s.q.Submit(ctx, &request{ctx: ctx, kind: kindSetCursor, name: name, seq: seq})
}

// DeleteCursor removes a durable cursor.
func (s *Store) DeleteCursor(ctx context.Context, name string) error {
	return s.q.Submit(ctx, &request{ctx: ctx, kind: kindDeleteCursor, name: name})
}

// maxBatchBytes bounds the estimated data of the requests one transaction
// takes beyond its first. Each document is written with its order keys and
// logged with its state before and after, so a transaction writes a few
// times this. Without it, MaxBatch requests near MaxDocumentBytes would make
// one transaction of gigabytes, which MongoDB refuses
// (TransactionTooLargeForCache, transactionLifetimeLimitSeconds), failing
// every request batched with it.
const maxBatchBytes = 8 << 20

// dataBytes estimates the encoded size of a value (its JSON length, about).
func dataBytes(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := 2
		for k, e := range t {
			n += len(k) + 4 + dataBytes(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range t {
			n += 1 + dataBytes(e)
		}
		return n
	case string:
		return len(t) + 2
	case json.Number:
		return len(t)
	}
	return 8
}

// commitTimeout bounds one batch, retries and commitTransaction included
// (inTransaction bounds every step by it).
const commitTimeout = 2 * time.Minute

// commit runs one batch in one transaction and answers every request in it.
func (s *Store) commit(batch []*request) {
	s.runBatch(batch, s.runTx, true)
	for _, r := range batch {
		close(r.Done)
	}
}

// runBatch runs batch in one transaction through run and sets every
// request's outcome. When the transaction was aborted before its commit
// was sent (nothing committed) by an error that is not transient, one
// request of the batch may be its cause (a record MongoDB refuses, a
// stored document that does not decode): with split, each request then
// runs alone, so it fails only itself and not the others batched with it.
func (s *Store) runBatch(batch []*request, run func(context.Context, *txn) error, split bool) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	t := &txn{s: s, batch: batch}
	err := run(ctx, t)
	if s.metrics != nil {
		s.metrics.Observe(len(batch), time.Since(start))
	}
	if err != nil {
		var aborted *callbackError
		if split && len(batch) > 1 && errors.As(err, &aborted) && ctx.Err() == nil {
			s.log.Warn("batch failed before its commit; committing its requests one by one", "err", scrub(err, s.cfg.URI), "requests", len(batch))
			for _, r := range batch {
				s.runBatch([]*request{r}, run, false)
			}
			return
		}
		// The writes did not commit, or (the commit's outcome unknown at
		// the deadline) may have: either way the caller gets an error.
		s.log.Error("commit failed", "err", scrub(err, s.cfg.URI), "requests", len(batch))
		for _, r := range batch {
			if r.Err == nil {
				r.Err = fmt.Errorf("mongo: commit: %w", scrub(err, s.cfg.URI))
			}
			r.results = nil
		}
		return
	}
	for _, r := range batch {
		// A precondition may have failed on a document an earlier
		// request of the batch wrote: its seq is known only now.
		var pe *collections.PreconditionError
		if errors.As(r.Err, &pe) && pe.Current != nil {
			pe.Current = pe.Current.Clone()
		}
	}
	if t.logged > 0 {
		s.wake()
	}
}

// txnOptions: snapshot reads and majority writes.
func txnOptions() *options.TransactionOptionsBuilder {
	wc := writeconcern.Majority()
	journal := true
	wc.Journal = &journal
	return options.Transaction().SetReadConcern(readconcern.Snapshot()).SetWriteConcern(wc)
}

// runTx runs t in a transaction (inTransaction): the callback is re-run
// only after a TransientTransactionError (the attempt was aborted whole:
// nothing applied, no seq taken) and commitTransaction is retried on
// UnknownTransactionCommitResult (it is idempotent), all within ctx. The
// callback recomputes everything from its own reads, so a re-run is
// independent of the attempt before it.
func (s *Store) runTx(ctx context.Context, t *txn) error {
	sess, err := s.client.StartSession()
	if err != nil {
		return err
	}
	defer endSession(sess)
	return inTransaction(ctx, sess, func(ctx context.Context) error {
		return t.attempt(mongo.NewSessionContext(ctx, sess))
	}, txnOptions())
}

// txn is one batch's transaction attempt and its overlay.
type txn struct {
	s     *Store
	batch []*request

	// Reset by every attempt:
	docs    map[string]*state   // db/path → current state in the batch
	cursors map[string]*cursorS // name → current position in the batch
	changes []*changeRecord     // in commit order, seq not yet assigned
	logged  int                 // changes of the successful attempt
}

// state is a document as the batch sees it.
type state struct {
	doc   *collections.Document // nil when absent
	data  []byte                // encoded data of doc
	db    string
	dirty bool
	// base is the version stored in the database when the attempt read
	// it (0: no document); the write is a compare-and-set on it.
	base int64
}

type cursorS struct {
	seq     int64
	present bool
	dirty   bool
}

// pending is one request's writes before they join the overlay.
type pending struct {
	docs    map[string]*state
	cursors map[string]*cursorS
	changes []*changeRecord
	results []collections.WriteResult
}

func (t *txn) attempt(ctx context.Context) error {
	s := t.s
	t.reset()
	if err := t.prefetch(ctx); err != nil {
		return err
	}
	var meta struct {
		N    int64 `bson:"n"`
		Time int64 `bson:"time"`
	}
	if err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: metaSeq}}).Decode(&meta); err != nil {
		return fmt.Errorf("read seq: %w", err)
	}
	// Change times never go backwards, so purges cut a prefix.
	now := max(time.Now().UnixMilli(), meta.Time)
	if t.plan(now) == 0 {
		return nil // an empty transaction commits nothing
	}
	if n := len(t.changes); n > 0 {
		// The counter: concurrent committers on every node conflict here,
		// so seqs follow commit order and are never reused.
		var after struct {
			N int64 `bson:"n"`
		}
		err := s.meta.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: metaSeq}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(n)}}}, {Key: "$max", Value: bson.D{{Key: "time", Value: now}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
		if err != nil {
			return fmt.Errorf("advance seq: %w", err)
		}
		t.assign(after.N - int64(n) + 1)
	}
	return t.flush(ctx)
}

// reset forgets everything a previous attempt computed.
func (t *txn) reset() {
	t.docs, t.cursors, t.changes, t.logged = map[string]*state{}, map[string]*cursorS{}, nil, 0
	for _, r := range t.batch {
		r.Err, r.results = nil, nil
	}
}

// plan checks every request in order against the overlay (the database
// as prefetched plus the effects of the requests before it) and stages the
// writes of those whose checks pass. It does no I/O. It returns how many
// requests succeeded.
func (t *txn) plan(now int64) int {
	applied := 0
	for _, r := range t.batch {
		if err := r.ctx.Err(); err != nil {
			r.Err = err // the caller has gone; do not write on its behalf
			continue
		}
		p := &pending{docs: map[string]*state{}, cursors: map[string]*cursorS{}}
		if err := t.apply(r, p, now); err != nil {
			r.Err = err
			continue
		}
		for k, v := range p.docs {
			t.docs[k] = v
		}
		for k, v := range p.cursors {
			t.cursors[k] = v
		}
		t.changes = append(t.changes, p.changes...)
		r.results = p.results
		applied++
	}
	return applied
}

// assign gives the staged changes their seqs, first onwards, in commit
// order, so a change's previous state, when written earlier in the batch,
// already has its seq.
func (t *txn) assign(first int64) {
	for i, c := range t.changes {
		c.Seq = first + int64(i)
		c.After.Seq = c.Seq
		c.doc.Seq = c.Seq
		if c.Before != nil {
			c.Before.Seq = c.prev.Seq
		}
	}
	t.logged = len(t.changes)
}

// flush writes the overlay: every document in its final state (carrying
// the seq of its last change), the changes, the cursors.
func (t *txn) flush(ctx context.Context) error {
	s := t.s
	var models []mongo.WriteModel
	replaces := int64(0)
	for _, st := range t.docs {
		if !st.dirty {
			continue
		}
		rec, err := record(st.db, st.doc, st.data)
		if err != nil {
			return err
		}
		models = append(models, putModel(rec, st.base))
		if st.base != 0 {
			replaces++
		}
	}
	if len(models) > 0 {
		res, err := s.docs.BulkWrite(ctx, models)
		if err != nil {
			return fmt.Errorf("write documents: %w", err)
		}
		if res.MatchedCount != replaces {
			return fmt.Errorf("write documents: %d of %d versions changed under the transaction", replaces-res.MatchedCount, replaces)
		}
	}
	if len(t.changes) > 0 {
		docs := make([]any, len(t.changes))
		for i, c := range t.changes {
			docs[i] = c
		}
		if _, err := s.changes.InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("append changes: %w", err)
		}
	}
	for name, c := range t.cursors {
		if !c.dirty {
			continue
		}
		var err error
		if c.present {
			_, err = s.cursors.ReplaceOne(ctx, bson.D{{Key: "_id", Value: name}}, bson.D{{Key: "_id", Value: name}, {Key: "seq", Value: c.seq}},
				options.Replace().SetUpsert(true))
		} else {
			_, err = s.cursors.DeleteOne(ctx, bson.D{{Key: "_id", Value: name}})
		}
		if err != nil {
			return fmt.Errorf("write cursor %s: %w", name, err)
		}
	}
	return nil
}

// putModel writes a document as a compare-and-set on the version the
// attempt read: an insert when there was none (a concurrent insert is a
// write conflict or a duplicate key), else a replace filtered on that
// version (flush checks that each one matched). Snapshot isolation already
// turns a concurrent change into a write conflict that re-runs the attempt;
// the filter makes the check explicit.
func putModel(rec *docRecord, base int64) mongo.WriteModel {
	if base == 0 {
		return mongo.NewInsertOneModel().SetDocument(rec)
	}
	return mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: rec.Key}, {Key: "version", Value: base}}).SetReplacement(rec)
}

// prefetch loads every document and cursor the batch reads, in one query
// each.
func (t *txn) prefetch(ctx context.Context) error {
	if err := t.prefetchCursors(ctx); err != nil {
		return err
	}
	var keys bson.A
	seen := map[string]bool{}
	for _, r := range t.batch {
		if r.kind != kindCommit {
			continue
		}
		for i := range r.writes {
			k := docKey(r.db, r.writes[i].Path)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	cur, err := t.s.docs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}},
		options.Find().SetProjection(bson.D{{Key: fieldKeys, Value: 0}}))
	if err != nil {
		return fmt.Errorf("read documents: %w", err)
	}
	defer closeCursor(ctx, cur)
	for cur.Next(ctx) {
		var rec docRecord
		if err := cur.Decode(&rec); err != nil {
			return fmt.Errorf("read documents: %w", err)
		}
		d, err := rec.decode()
		if err != nil {
			return err
		}
		t.docs[rec.Key] = &state{doc: d, data: []byte(rec.Data), db: rec.DB, base: rec.Version}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read documents: %w", err)
	}
	for _, k := range keys {
		if _, ok := t.docs[k.(string)]; !ok {
			t.docs[k.(string)] = &state{}
		}
	}
	return nil
}

func (t *txn) prefetchCursors(ctx context.Context) error {
	var names bson.A
	for _, r := range t.batch {
		if adv := r.opts.Cursor; r.kind == kindCommit && adv != nil {
			if _, ok := t.cursors[adv.Name]; !ok {
				t.cursors[adv.Name] = &cursorS{}
				names = append(names, adv.Name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	cur, err := t.s.cursors.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}})
	if err != nil {
		return fmt.Errorf("read cursors: %w", err)
	}
	var recs []struct {
		Name string `bson:"_id"`
		Seq  int64  `bson:"seq"`
	}
	if err := cur.All(ctx, &recs); err != nil {
		return fmt.Errorf("read cursors: %w", err)
	}
	for _, r := range recs {
		t.cursors[r.Name] = &cursorS{seq: r.Seq, present: true}
	}
	return nil
}

// cursorAt returns a cursor's position as the request sees it.
func (t *txn) cursorAt(p *pending, name string) *cursorS {
	if c, ok := p.cursors[name]; ok {
		return c
	}
	if c, ok := t.cursors[name]; ok {
		return c
	}
	return &cursorS{}
}

// apply checks and stages one request into p; an error is the request's.
func (t *txn) apply(r *request, p *pending, now int64) error {
	switch r.kind {
	case kindSetCursor:
		p.cursors[r.name] = &cursorS{seq: r.seq, present: true, dirty: true}
		return nil
	case kindDeleteCursor:
		p.cursors[r.name] = &cursorS{dirty: true}
		return nil
	}
	if adv := r.opts.Cursor; adv != nil {
		if c := t.cursorAt(p, adv.Name); c.seq != adv.From {
			return fmt.Errorf("%w: cursor %q is at %d, not %d", collections.ErrCursorConflict, adv.Name, c.seq, adv.From)
		}
	}
	p.results = make([]collections.WriteResult, len(r.writes))
	for i := range r.writes {
		res, err := t.write(r.db, &r.writes[i], p, now)
		if err != nil {
			return &collections.WriteError{Index: i, Path: r.writes[i].Path, Err: err}
		}
		p.results[i] = res
	}
	if adv := r.opts.Cursor; adv != nil {
		p.cursors[adv.Name] = &cursorS{seq: adv.To, present: true, dirty: true}
	}
	return nil
}

// write checks and stages one write; errors are the write's own.
func (t *txn) write(db string, w *collections.Write, p *pending, now int64) (collections.WriteResult, error) {
	k := docKey(db, w.Path)
	cur, ok := p.docs[k]
	if !ok {
		cur = t.docs[k]
	}
	var curDoc *collections.Document
	var curData []byte
	if cur != nil {
		curDoc, curData = cur.doc, cur.data
	}
	// The overlay's document stays as it was (clone): a failing request
	// must leave it untouched, and a retried attempt re-reads it anyway. A
	// precondition's Current is cloned once the batch has its seqs.
	o, err := docwrite.Apply(w, curDoc, curData, now, t.s.maxBytes(w.Path), true)
	if err != nil {
		return collections.WriteResult{}, err
	}
	next, op, data := o.Next, o.Op, o.Data
	if collections.IsLogged(w.Path) {
		c := &changeRecord{DB: db, Op: string(op), Path: w.Path, Time: now,
			After: snapshot{Version: next.Version, CreatedAt: next.CreatedAt, UpdatedAt: now, Deleted: next.Deleted, Data: string(data)}}
		if curDoc != nil {
			c.Before = &snapshot{Version: curDoc.Version, CreatedAt: curDoc.CreatedAt, UpdatedAt: curDoc.UpdatedAt,
				Deleted: curDoc.Deleted, Seq: curDoc.Seq, Data: string(cur.data)}
		}
		c.doc, c.prev = next, curDoc
		p.changes = append(p.changes, c)
	}
	p.docs[k] = &state{doc: next, data: data, dirty: true, db: db, base: cur.base}
	return o.Result(w), nil
}
