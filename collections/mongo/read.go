package mongo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/lifecycle"
)

// Reads outside transactions use the client's majority read concern: they
// see only what survives a failover, on any node.

// noKeys leaves the order keys out of documents read back.
var noKeys = bson.D{{Key: fieldKeys, Value: 0}}

// begin checks the context and that the store is open.
func (s *Store) begin(ctx context.Context) error { return lifecycle.Begin(ctx, &s.closed) }

// readErr maps errors of a read that raced with Close.
func (s *Store) readErr(op string, err error) error {
	if lifecycle.RacedClose(&s.closed, err) {
		return collections.ErrClosed
	}
	return fmt.Errorf("mongo: %s: %w", op, scrub(err, s.cfg.URI))
}

// Get returns the live document at path.
func (s *Store) Get(ctx context.Context, db, path string) (*collections.Document, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var rec docRecord
	err := s.docs.FindOne(ctx, bson.D{{Key: "_id", Value: docKey(db, path)}, {Key: fieldDeleted, Value: false}},
		options.FindOne().SetProjection(noKeys)).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, collections.ErrNotFound
	}
	if err != nil {
		return nil, s.readErr("get "+path, err)
	}
	return rec.decode()
}

// closeCursor closes a cursor even when ctx has ended (a caller that went
// away): a cursor left open keeps its server-side state, and in a snapshot
// session its snapshot, until the server times it out after 10 minutes.
func closeCursor(ctx context.Context, cur *mongo.Cursor) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cur.Close(cctx) //nolint:errcheck // the results were already read
}

// readDocs decodes every document of a cursor.
func readDocs(ctx context.Context, cur *mongo.Cursor) ([]*collections.Document, error) {
	defer closeCursor(ctx, cur)
	var out []*collections.Document
	for cur.Next(ctx) {
		var rec docRecord
		if err := cur.Decode(&rec); err != nil {
			return nil, err
		}
		d, err := rec.decode()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, cur.Err()
}

// ChangedSince returns documents of one collection, tombstones included, in
// (seq, id) order after cp.
func (s *Store) ChangedSince(ctx context.Context, db, collection string, cp collections.Checkpoint, limit int) ([]*collections.Document, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	filter := bson.D{{Key: fieldDB, Value: db}, {Key: fieldColl, Value: collection}, {Key: "$or", Value: bson.A{
		bson.D{{Key: fieldSeq, Value: bson.D{{Key: "$gt", Value: cp.Seq}}}},
		bson.D{{Key: fieldSeq, Value: cp.Seq}, {Key: fieldID, Value: bson.D{{Key: "$gt", Value: cp.ID}}}},
	}}}
	cur, err := s.docs.Find(ctx, filter, options.Find().SetProjection(noKeys).
		SetSort(bson.D{{Key: fieldSeq, Value: 1}, {Key: fieldID, Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, s.readErr("changed since", err)
	}
	out, err := readDocs(ctx, cur)
	if err != nil {
		return nil, s.readErr("changed since", err)
	}
	return latest(out), nil
}

// latest keeps, of a document returned more than once, only its last (its
// newest) version. The cursor is not isolated: an update during the scan
// moves a document forward in the (seq, id) index, where the scan meets it
// again. Keeping the older version while the batch's checkpoint passes the
// newer one would hide the newer from the client for good.
func latest(docs []*collections.Document) []*collections.Document {
	last := make(map[string]int, len(docs))
	for i, d := range docs {
		last[d.Path] = i
	}
	if len(last) == len(docs) {
		return docs
	}
	out := docs[:0]
	for i, d := range docs {
		if last[d.Path] == i {
			out = append(out, d)
		}
	}
	return out
}

// maxReadBytes bounds the stored changes one ReadChanges returns beyond
// the first: a change may carry two documents of MaxDocumentBytes, so a
// limit of a few hundred could otherwise hold gigabytes in memory. Readers
// treat only an empty result as the end of the log.
const maxReadBytes = 16 << 20

// ReadChanges returns changes after `after` in seq order (up to limit, and
// about maxReadBytes). The retention
// mark and the changes are read in one snapshot (a snapshot session), so a
// concurrent purge can never open a silent gap.
func (s *Store) ReadChanges(ctx context.Context, after int64, limit int) ([]collections.Change, error) {
	return s.readChanges(ctx, after, limit, nil)
}

var _ collections.FilteredChangeReader = (*Store)(nil)

// ReadChangesFiltered is ReadChanges for collections.FilteredChangeReader.
// The server still sends every change whole (want is the caller's code,
// no query can name it); what a change want rejects saves is the decode
// of its documents, which dominates a read.
func (s *Store) ReadChangesFiltered(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	return s.readChanges(ctx, after, limit, want)
}

// readChanges reads the changes after `after`; want nil wants them all.
func (s *Store) readChanges(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	sess, err := s.client.StartSession(options.Session().SetSnapshot(true))
	if err != nil {
		return nil, s.readErr("read changes", err)
	}
	defer sess.EndSession(context.Background())
	sctx := mongo.NewSessionContext(ctx, sess)
	var purged struct {
		N int64 `bson:"n"`
	}
	if err := s.meta.FindOne(sctx, bson.D{{Key: "_id", Value: metaPurged}}).Decode(&purged); err != nil {
		return nil, s.readErr("read changes", err)
	}
	if after < purged.N {
		return nil, &collections.PositionExpiredError{After: after, Oldest: purged.N}
	}
	if limit <= 0 {
		return nil, nil
	}
	cur, err := s.changes.Find(sctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, s.readErr("read changes", err)
	}
	defer closeCursor(sctx, cur)
	var out []collections.Change
	read := 0
	for read < maxReadBytes && cur.Next(sctx) {
		c, rejected, err := rejectedChange(cur.Current, want)
		if err != nil {
			return nil, s.readErr("read changes", err)
		}
		if !rejected {
			var rec changeRecord
			if err := cur.Decode(&rec); err != nil {
				return nil, s.readErr("read changes", err)
			}
			if c, err = rec.decode(); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
		read += len(cur.Current)
	}
	if err := cur.Err(); err != nil {
		return nil, s.readErr("read changes", err)
	}
	return out, nil
}

// changeHeader is the part of a stored change a filtered read decodes
// first (bson ignores the fields a struct does not name).
type changeHeader struct {
	Seq  int64  `bson:"_id"`
	DB   string `bson:"db"`
	Op   string `bson:"op"`
	Path string `bson:"path"`
	Time int64  `bson:"time"`
}

// rejectedChange decodes the header of a stored change when want is not
// nil; when want rejects it, c is the change without documents and
// rejected is true (otherwise the caller decodes the whole record).
func rejectedChange(raw bson.Raw, want collections.ChangeWant) (c collections.Change, rejected bool, err error) {
	if want == nil {
		return c, false, nil
	}
	var h changeHeader
	if err := bson.Unmarshal(raw, &h); err != nil {
		return c, false, err
	}
	op := collections.ChangeOp(h.Op)
	if want(h.DB, op, h.Path) {
		return c, false, nil
	}
	return collections.Change{Seq: h.Seq, DB: h.DB, Op: op, Path: h.Path, Time: h.Time}, true, nil
}

func (r *changeRecord) decode() (collections.Change, error) {
	c := collections.Change{Seq: r.Seq, DB: r.DB, Op: collections.ChangeOp(r.Op), Path: r.Path, Time: r.Time}
	coll, id := collections.SplitDocPath(r.Path)
	after, err := collections.DecodeObject([]byte(r.After.Data))
	if err != nil {
		return c, fmt.Errorf("mongo: corrupt change %d: %w", r.Seq, err)
	}
	c.After = &collections.Document{Path: r.Path, Collection: coll, ID: id, Version: r.After.Version, CreatedAt: r.After.CreatedAt,
		UpdatedAt: r.Time, Deleted: r.After.Deleted, Seq: r.Seq, Data: after}
	if b := r.Before; b != nil {
		before, err := collections.DecodeObject([]byte(b.Data))
		if err != nil {
			return c, fmt.Errorf("mongo: corrupt change %d: %w", r.Seq, err)
		}
		c.Before = &collections.Document{Path: r.Path, Collection: coll, ID: id, Version: b.Version, CreatedAt: b.CreatedAt,
			UpdatedAt: b.UpdatedAt, Deleted: b.Deleted, Seq: b.Seq, Data: before}
	}
	return c, nil
}

// Head returns the seq of the last majority-committed change.
func (s *Store) Head(ctx context.Context) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	h, err := s.readHead(ctx)
	if err != nil {
		return 0, s.readErr("head", err)
	}
	return h, nil
}

func (s *Store) readHead(ctx context.Context) (int64, error) {
	var meta struct {
		N int64 `bson:"n"`
	}
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: metaSeq}}).Decode(&meta)
	return meta.N, err
}

// Cursor returns a durable cursor's position (0 when unknown).
func (s *Store) Cursor(ctx context.Context, name string) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var rec struct {
		Seq int64 `bson:"seq"`
	}
	err := s.cursors.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, s.readErr("cursor "+name, err)
	}
	return rec.Seq, nil
}

// purgeChunk bounds the rows one purge transaction deletes.
const purgeChunk = 5000

// Purge drops changes older than the retention that no durable cursor
// needs, and tombstones older than the retention, in bounded transactions.
func (s *Store) Purge(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.purge(ctx)
}

func (s *Store) purge(ctx context.Context) error {
	for {
		more, err := s.purgeRound(ctx)
		if err != nil {
			return s.readErr("purge", err)
		}
		if !more {
			return nil
		}
	}
}

// purgeRound runs one bounded retention round in a transaction: the
// retention mark moves with the deletions, so a reader never sees one
// without the other.
func (s *Store) purgeRound(ctx context.Context) (bool, error) {
	sess, err := s.client.StartSession()
	if err != nil {
		return false, err
	}
	defer endSession(sess)
	// inTransaction bounds commitTransaction by ctx only: give it a deadline.
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	cutoff := time.Now().Add(-s.cfg.Retention).UnixMilli()
	var more bool
	err = inTransaction(ctx, sess, func(ctx context.Context) error {
		ctx = mongo.NewSessionContext(ctx, sess)
		more = false
		var purged, head struct {
			N int64 `bson:"n"`
		}
		if err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: metaPurged}}).Decode(&purged); err != nil {
			return err
		}
		if err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: metaSeq}}).Decode(&head); err != nil {
			return err
		}
		// Through the change before the first one still within retention.
		through := head.N
		var young struct {
			Seq int64 `bson:"_id"`
		}
		err := s.changes.FindOne(ctx, bson.D{{Key: "time", Value: bson.D{{Key: "$gte", Value: cutoff}}}},
			options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}).SetProjection(bson.D{{Key: "_id", Value: 1}})).Decode(&young)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
		case err != nil:
			return err
		default:
			through = young.Seq - 1
		}
		var low struct {
			Seq int64 `bson:"seq"`
		}
		err = s.cursors.FindOne(ctx, bson.D{}, options.FindOne().SetSort(bson.D{{Key: "seq", Value: 1}})).Decode(&low)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
		case err != nil:
			return err
		default:
			through = min(through, low.Seq)
		}
		if through > purged.N+purgeChunk {
			through, more = purged.N+purgeChunk, true
		}
		if through > purged.N {
			if _, err := s.changes.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$lte", Value: through}}}}); err != nil {
				return err
			}
			if _, err := s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: metaPurged}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: through}}}}); err != nil {
				return err
			}
		}
		cur, err := s.docs.Find(ctx, bson.D{{Key: fieldDeleted, Value: true}, {Key: fieldUpdated, Value: bson.D{{Key: "$lt", Value: cutoff}}}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(purgeChunk))
		if err != nil {
			return err
		}
		var ids []struct {
			Key string `bson:"_id"`
		}
		if err := cur.All(ctx, &ids); err != nil {
			return err
		}
		if len(ids) > 0 {
			keys := make(bson.A, len(ids))
			for i, x := range ids {
				keys[i] = x.Key
			}
			// The filter repeats the condition: a tombstone re-created
			// meanwhile is a write conflict, and the retry sees it live.
			if _, err := s.docs.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}},
				{Key: fieldDeleted, Value: true}, {Key: fieldUpdated, Value: bson.D{{Key: "$lt", Value: cutoff}}}}); err != nil {
				return err
			}
		}
		more = more || len(ids) == purgeChunk
		return nil
	}, txnOptions())
	if err != nil {
		return false, err
	}
	return more, nil
}

// Query returns one page of documents matching q in CompareDocs order. The
// filter and sort run in MongoDB on the order keys (query.go) and every
// candidate is re-checked in Go; a query over a collection holding a
// document too large for order keys runs wholly in Go.
func (s *Store) Query(ctx context.Context, db string, q collections.Query) (collections.QueryResult, error) {
	if err := s.begin(ctx); err != nil {
		return collections.QueryResult{}, err
	}
	var after *collections.Cursor
	if q.StartAfter != "" {
		c, err := collections.DecodeCursor(q.StartAfter, q.OrderBy)
		if err != nil {
			return collections.QueryResult{}, err
		}
		after = c
	}
	limit := q.Limit
	if limit <= 0 {
		limit = collections.DefaultLimit
	}
	// A document without keys in scope sends the query to Go.
	sel := selector(db, &q)
	sel = append(sel, bson.E{Key: fieldNoKeys, Value: true})
	err := s.docs.FindOne(ctx, sel, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return collections.QueryResult{}, s.readErr("query", err)
	}
	// MongoDB sorts on at most 32 keys; the path is one of them.
	inGo := err == nil || len(sortSpec(q.OrderBy)) > maxSortKeys
	var docs []*collections.Document
	if inGo {
		docs, err = s.queryGo(ctx, db, &q, after, limit)
	} else {
		docs, err = s.queryPushed(ctx, db, &q, after, limit)
	}
	if err != nil {
		return collections.QueryResult{}, s.readErr("query", err)
	}
	var res collections.QueryResult
	if len(docs) > limit {
		docs = docs[:limit]
		res.NextCursor = collections.MakeCursor(q.OrderBy, docs[len(docs)-1])
	}
	res.Docs = docs
	return res, nil
}

// maxSortKeys is MongoDB's limit on the fields of one sort.
const maxSortKeys = 32

// keep reports whether a candidate belongs to the page.
func keep(q *collections.Query, after *collections.Cursor, d *collections.Document) bool {
	return q.Matches(d) && (after == nil || after.After(q.OrderBy, d))
}

// queryPushed streams candidates in exact order and keeps the first
// limit+1 that match.
func (s *Store) queryPushed(ctx context.Context, db string, q *collections.Query, after *collections.Cursor, limit int) ([]*collections.Document, error) {
	filter, sort := translate(db, q, after)
	cur, err := s.docs.Find(ctx, filter, options.Find().SetSort(sort).SetProjection(noKeys).
		SetAllowDiskUse(true).SetBatchSize(int32(min(limit+1, 1000))))
	if err != nil {
		return nil, err
	}
	defer closeCursor(ctx, cur)
	return collectPushed(q, after, limit, func() (*collections.Document, bool, error) {
		if !cur.Next(ctx) {
			return nil, false, cur.Err()
		}
		var rec docRecord
		if err := cur.Decode(&rec); err != nil {
			return nil, false, err
		}
		d, err := rec.decode()
		if err != nil {
			return nil, false, err
		}
		return d, true, nil
	})
}

// collectPushed keeps the first limit+1 candidates that match, in the order
// next yields them. A MongoDB cursor is not isolated: a document updated
// during an index scan on its sort key can come back at its new position
// too, so a path already kept is skipped (the page keeps the version first
// seen, in its place).
func collectPushed(q *collections.Query, after *collections.Cursor, limit int,
	next func() (*collections.Document, bool, error)) ([]*collections.Document, error) {
	var out []*collections.Document
	seen := map[string]bool{}
	for len(out) <= limit {
		d, ok, err := next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if !seen[d.Path] && keep(q, after, d) {
			seen[d.Path] = true
			out = append(out, d)
		}
	}
	return out, nil
}

// queryGo reads every document of the collection (or pattern) and filters
// and sorts in Go. It streams them and keeps only the best limit+1 matches
// (a bounded heap), so memory stays O(limit) however large the collection.
func (s *Store) queryGo(ctx context.Context, db string, q *collections.Query, after *collections.Cursor, limit int) ([]*collections.Document, error) {
	cur, err := s.docs.Find(ctx, selector(db, q), options.Find().SetProjection(noKeys))
	if err != nil {
		return nil, err
	}
	defer closeCursor(ctx, cur)
	top := newTopK(q.OrderBy, limit+1)
	for cur.Next(ctx) {
		var rec docRecord
		if err := cur.Decode(&rec); err != nil {
			return nil, err
		}
		d, err := rec.decode()
		if err != nil {
			return nil, err
		}
		if keep(q, after, d) {
			top.add(d)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	return top.sorted(), nil
}

// topK keeps the k smallest documents in CompareDocs order: a max-heap
// whose root is the worst document kept.
type topK struct {
	order []collections.Order
	k     int
	h     []*collections.Document
}

func newTopK(order []collections.Order, k int) *topK {
	return &topK{order: order, k: k}
}

func (t *topK) less(i, j int) bool { // i is worse than j
	return collections.CompareDocs(t.order, t.h[i], t.h[j]) > 0
}

func (t *topK) add(d *collections.Document) {
	if t.k <= 0 {
		return
	}
	if len(t.h) < t.k {
		t.h = append(t.h, d)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !t.less(i, p) {
				break
			}
			t.h[i], t.h[p] = t.h[p], t.h[i]
			i = p
		}
		return
	}
	if collections.CompareDocs(t.order, d, t.h[0]) >= 0 {
		return
	}
	t.h[0] = d
	for i := 0; ; {
		w, l, r := i, 2*i+1, 2*i+2
		if l < len(t.h) && t.less(l, w) {
			w = l
		}
		if r < len(t.h) && t.less(r, w) {
			w = r
		}
		if w == i {
			break
		}
		t.h[i], t.h[w] = t.h[w], t.h[i]
		i = w
	}
}

// sorted returns the documents kept, in CompareDocs order.
func (t *topK) sorted() []*collections.Document {
	out := t.h
	slices.SortFunc(out, func(a, b *collections.Document) int { return collections.CompareDocs(t.order, a, b) })
	return out
}
