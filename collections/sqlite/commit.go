package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/docwrite"
	"github.com/loomdb/loom/collections/internal/groupcommit"
)

type requestKind uint8

const (
	kindCommit requestKind = iota
	kindSetCursor
	kindDeleteCursor
	kindPurge
)

// request is one unit of work for the committer. A failing request never
// affects the others batched with it: see committer.commit.
type request struct {
	ctx    context.Context
	kind   requestKind
	db     string
	writes []collections.Write
	opts   collections.CommitOptions
	name   string // cursor name
	seq    int64  // cursor position

	results []collections.WriteResult
	more    bool // purge: another round is needed

	groupcommit.Call
}

// Commit applies writes atomically through the group committer. The
// transaction is fsynced before Commit returns.
func (s *Store) Commit(ctx context.Context, db string, writes []collections.Write, opts collections.CommitOptions) ([]collections.WriteResult, error) {
	if len(writes) == 0 && opts.Cursor == nil {
		return []collections.WriteResult{}, ctx.Err()
	}
	r := &request{ctx: ctx, kind: kindCommit, db: db, writes: writes, opts: opts}
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

// Purge drops changes older than the retention that no durable cursor needs,
// and tombstones older than the retention. It works in bounded rounds so the
// committer is never held for long.
func (s *Store) Purge(ctx context.Context) error {
	for {
		r := &request{ctx: ctx, kind: kindPurge}
		if err := s.q.Submit(ctx, r); err != nil {
			return err
		}
		if !r.more {
			return nil
		}
	}
}

// purgeChunk bounds the rows one purge round deletes.
const purgeChunk = 5000

// committer owns the write connection. Only its goroutine touches seq,
// lastTime, guarded and the statements.
type committer struct {
	s        *Store
	seq      int64 // last assigned seq; equals the durable one between batches
	lastTime int64 // change times never go backwards, so purges cut a prefix
	// guarded counts the batches of several requests still to run with a
	// savepoint per request from the start, after one had to be run again
	// (see commit): a workload where requests often fail pays for one
	// wasted attempt per guardedBatches batches, not for every batch.
	guarded int
	// lastSystem is the seq of the newest logged write of a system path
	// this committer made (Store.lastSystem once committed). A write
	// rolled back later leaves it too high, which only costs a follower a
	// read.
	lastSystem int64
	stmts      writeStmts
}

// guardedBatches is how many batches run with savepoints after a batch
// whose optimistic attempt failed.
const guardedBatches = 16

// errRetryGuarded ends an optimistic attempt at a batch: a request failed,
// and without savepoints its partial writes cannot be undone alone.
var errRetryGuarded = errors.New("sqlite: a request failed; run the batch again with savepoints")

type writeStmts struct {
	load, put, change, getCursor, setCursor, delCursor, setMeta *sql.Stmt
	// insert is put for a path known to hold no row: the primary key
	// refuses it otherwise (see txn.createFresh).
	insert *sql.Stmt
	// The per-request savepoint, prepared once rather than parsed and
	// compiled by sqlite3_exec on every request.
	savepoint, release, rollbackTo *sql.Stmt
}

func newCommitter(ctx context.Context, s *Store) (*committer, error) {
	c := &committer{s: s}
	if err := s.wdb.QueryRowContext(ctx, `SELECT
		(SELECT value FROM meta WHERE key = 'last_seq'),
		(SELECT value FROM meta WHERE key = 'last_time')`).Scan(&c.seq, &c.lastTime); err != nil {
		return nil, fmt.Errorf("sqlite: read meta: %w", err)
	}
	s.head.Store(c.seq)
	// The system changes before the open are unknown here: claim one at
	// the head, so a follower reads what it has not read yet.
	c.lastSystem = c.seq
	s.lastSystem.Store(c.seq)
	prep := func(dst **sql.Stmt, q string) error {
		st, err := s.wdb.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("sqlite: prepare %q: %w", q, err)
		}
		*dst = st
		return nil
	}
	st := &c.stmts
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.load, `SELECT ` + docColumns + ` FROM docs WHERE db = ? AND path = ?`},
		{&st.put, `INSERT OR REPLACE INTO docs (db, path, collection, shape, id, data, version, created_at, updated_at, deleted, seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.insert, `INSERT INTO docs (db, path, collection, shape, id, data, version, created_at, updated_at, deleted, seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.change, `INSERT INTO changes (seq, db, op, path, time,
			b_version, b_created, b_updated, b_deleted, b_seq, b_data,
			a_version, a_created, a_deleted, a_data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.getCursor, `SELECT seq FROM cursors WHERE name = ?`},
		{&st.setCursor, `INSERT OR REPLACE INTO cursors (name, seq) VALUES (?, ?)`},
		{&st.delCursor, `DELETE FROM cursors WHERE name = ?`},
		{&st.setMeta, `UPDATE meta SET value = CASE key WHEN 'last_seq' THEN ?1 ELSE ?2 END WHERE key IN ('last_seq', 'last_time')`},
		{&st.savepoint, `SAVEPOINT req`},
		{&st.release, `RELEASE req`},
		{&st.rollbackTo, `ROLLBACK TO req`},
	} {
		if err := prep(p.dst, p.q); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *committer) close() {
	st := &c.stmts
	for _, p := range []*sql.Stmt{st.load, st.put, st.insert, st.change, st.getCursor, st.setCursor, st.delCursor, st.setMeta,
		st.savepoint, st.release, st.rollbackTo} {
		if p != nil {
			p.Close()
		}
	}
}

// run is the committer loop: take one request, drain whatever else is
// queued (up to MaxBatch), run them all in one transaction, fsync once,
// answer all. Concurrency therefore raises throughput instead of queueing
// fsyncs.
func (c *committer) run() {
	c.s.q.Run(c.commit, c.close)
}

// commit runs one batch in one transaction and answers every request in it.
//
// Each request must fail alone: its writes undone, the others committed.
// A savepoint per request does that, but costs the committer about a third
// of its time per write (the statements, and the statement journal SQLite
// keeps inside a savepoint). So a batch of several requests first runs
// optimistically, without savepoints; the first request that fails, for
// whatever reason (a precondition, an existing document, a size limit, a
// cursor conflict, an SQL error), abandons the attempt: the transaction is
// rolled back, nothing of it was committed or published, and the batch
// runs again from its start state with a savepoint per request: the
// outcome (errors, results, seqs) is the one savepoints alone give. Either
// way one transaction commits, with one fsync.
func (c *committer) commit(batch []*request) {
	s := c.s
	start := time.Now()
	startSeq, startTime := c.seq, c.lastTime
	guarded := len(batch) > 1 && c.guarded > 0
	if guarded {
		c.guarded--
	}
	err := c.runTx(batch, len(batch) > 1 && !guarded)
	if errors.Is(err, errRetryGuarded) {
		c.seq, c.lastTime = startSeq, startTime
		for _, r := range batch {
			r.Err, r.results, r.more = nil, nil, false
		}
		c.guarded = guardedBatches
		err = c.runTx(batch, false)
	}
	if err != nil {
		// The transaction is gone: nothing in the batch committed.
		c.seq = startSeq
		c.reloadMeta()
		s.log.Error("commit failed", "err", err, "requests", len(batch))
		for _, r := range batch {
			if r.Err == nil {
				r.Err = fmt.Errorf("sqlite: commit: %w", err)
				r.results = nil
			}
		}
	} else if c.seq != startSeq {
		if last := min(c.lastSystem, c.seq); last > s.lastSystem.Load() {
			s.lastSystem.Store(last) // before head: see LastSystemChange
		}
		s.head.Store(c.seq)
		s.wake()
	}
	s.metrics.Observe(len(batch), time.Since(start))
	for _, r := range batch {
		close(r.Done)
	}
}

func (c *committer) reloadMeta() {
	var seq, t int64
	err := c.s.wdb.QueryRow(`SELECT
		(SELECT value FROM meta WHERE key = 'last_seq'),
		(SELECT value FROM meta WHERE key = 'last_time')`).Scan(&seq, &t)
	if err != nil {
		c.s.log.Error("reload meta after failed commit", "err", err)
		return
	}
	c.seq, c.lastTime = seq, max(c.lastTime, t)
}

// runTx runs batch in one transaction. optimistic runs it without
// savepoints and returns errRetryGuarded as soon as a request fails (the
// deferred Rollback undoes the attempt); otherwise each request of a batch
// of several runs in its own savepoint. A request alone in its batch needs
// no savepoint: when it fails nothing is applied and the whole
// transaction is rolled back.
func (c *committer) runTx(batch []*request, optimistic bool) error {
	ctx := context.Background() // requests carry their own contexts; the batch must not be cut short by one of them
	tx, err := c.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	t := &txn{c: c, tx: tx, ctx: ctx}
	startSeq, startTime := c.seq, c.lastTime
	savepoints := len(batch) > 1 && !optimistic
	applied := 0
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.Err = err // the caller has gone; do not write on its behalf
			continue
		}
		if savepoints {
			if _, err := t.stmt(c.stmts.savepoint).ExecContext(ctx); err != nil {
				return err
			}
		}
		seq, lt := c.seq, c.lastTime
		if err := t.apply(r); err != nil {
			if optimistic {
				return errRetryGuarded
			}
			r.Err, r.results = err, nil
			c.seq, c.lastTime = seq, lt
			if !savepoints {
				continue
			}
			if _, err := t.stmt(c.stmts.rollbackTo).ExecContext(ctx); err != nil {
				return err
			}
		} else {
			applied++
		}
		if savepoints {
			if _, err := t.stmt(c.stmts.release).ExecContext(ctx); err != nil {
				return err
			}
		}
	}
	if applied == 0 {
		return nil // the deferred Rollback discards the empty transaction
	}
	if c.seq != startSeq || c.lastTime != startTime {
		if _, err := t.stmt(c.stmts.setMeta).ExecContext(ctx, c.seq, c.lastTime); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// txn is the committer's view of the open transaction.
type txn struct {
	c   *committer
	tx  *sql.Tx
	ctx context.Context
	// bound holds the transaction's wrapper of each prepared statement
	// used so far: tx.StmtContext allocates a new *sql.Stmt on every call,
	// and a batch runs the same few statements for every write. The
	// wrappers are closed with the transaction. A fixed array: the
	// committer has eleven statements, so it never grows.
	bound  [11]boundStmt
	nbound int
}

type boundStmt struct{ prepared, inTx *sql.Stmt }

// stmt returns st bound to the transaction, wrapping it on first use only.
func (t *txn) stmt(st *sql.Stmt) *sql.Stmt {
	for _, b := range t.bound[:t.nbound] {
		if b.prepared == st {
			return b.inTx
		}
	}
	in := t.tx.StmtContext(t.ctx, st)
	if t.nbound < len(t.bound) {
		t.bound[t.nbound] = boundStmt{st, in}
		t.nbound++
	}
	return in
}

func (t *txn) apply(r *request) error {
	switch r.kind {
	case kindCommit:
		return t.commitWrites(r)
	case kindSetCursor:
		_, err := t.stmt(t.c.stmts.setCursor).ExecContext(t.ctx, r.name, r.seq)
		return err
	case kindDeleteCursor:
		_, err := t.stmt(t.c.stmts.delCursor).ExecContext(t.ctx, r.name)
		return err
	case kindPurge:
		return t.purge(r)
	}
	return fmt.Errorf("sqlite: unknown request kind %d", r.kind)
}

// stored is a document row as loaded inside the transaction, with its data
// still encoded so a delete can carry it over without re-encoding.
type stored struct {
	doc  *collections.Document
	data []byte
}

func (t *txn) load(db, path string) (*stored, error) {
	row := t.stmt(t.c.stmts.load).QueryRowContext(t.ctx, db, path)
	var st stored
	d, err := scanDoc(row, &st.data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st.doc = d
	return &st, nil
}

func (t *txn) commitWrites(r *request) error {
	c := t.c
	if adv := r.opts.Cursor; adv != nil {
		var at int64
		err := t.stmt(c.stmts.getCursor).QueryRowContext(t.ctx, adv.Name).Scan(&at)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if at != adv.From {
			return fmt.Errorf("%w: cursor %q is at %d, not %d", collections.ErrCursorConflict, adv.Name, at, adv.From)
		}
	}
	now := max(time.Now().UnixMilli(), c.lastTime)
	results := make([]collections.WriteResult, len(r.writes))
	for i := range r.writes {
		res, err := t.write(r.db, &r.writes[i], now)
		if err != nil {
			return &collections.WriteError{Index: i, Path: r.writes[i].Path, Err: err}
		}
		results[i] = res
	}
	if adv := r.opts.Cursor; adv != nil {
		if _, err := t.stmt(c.stmts.setCursor).ExecContext(t.ctx, adv.Name, adv.To); err != nil {
			return err
		}
	}
	r.results = results
	return nil
}

// write applies one write; errors are the write's own (wrapped by the caller
// into a *WriteError).
func (t *txn) write(db string, w *collections.Write, now int64) (collections.WriteResult, error) {
	if res, ok, err := t.createFresh(db, w, now); ok || err != nil {
		return res, err
	}
	cur, err := t.load(db, w.Path)
	if err != nil {
		return collections.WriteResult{}, err
	}
	var curDoc *collections.Document
	var curData []byte
	if cur != nil {
		curDoc, curData = cur.doc, cur.data
	}
	o, err := docwrite.Apply(w, curDoc, curData, now, t.c.s.maxBytes(w.Path), false)
	if err != nil {
		return collections.WriteResult{}, err
	}
	if err := t.store(t.c.stmts.put, db, w, o, cur, now); err != nil {
		return collections.WriteResult{}, err
	}
	return result(w, o), nil
}

// result is w's result. Its document carries the data bytes just stored as
// Raw: they are json.Marshal of its Data, what AppendJSON would write, so
// the answer to the write is not encoded a second time. A delete stores
// the bytes it found, of whatever form: its document is encoded from Data.
func result(w *collections.Write, o docwrite.Outcome) collections.WriteResult {
	if o.Op != collections.OpDelete {
		o.Next.Raw = o.Data
	}
	return o.Result(w)
}

// createFresh applies a create as if its path held no row, which is what
// the create of a new id meets, without loading the row first: a plain
// INSERT, which the primary key refuses (undoing the statement alone)
// when a row, live or deleted, is there after all. ok is false when the
// create meets a row, or fails against none (with a row there its error
// may be another): write then takes the general path, which answers
// exactly as if this had not been tried.
func (t *txn) createFresh(db string, w *collections.Write, now int64) (collections.WriteResult, bool, error) {
	if w.Type != collections.WriteCreate || len(w.IfMatch) > 0 {
		return collections.WriteResult{}, false, nil
	}
	o, err := docwrite.Apply(w, nil, nil, now, t.c.s.maxBytes(w.Path), false)
	if err != nil {
		return collections.WriteResult{}, false, nil
	}
	seq := t.c.seq
	if err := t.store(t.c.stmts.insert, db, w, o, nil, now); err != nil {
		// Only the row's own key says the path is taken: store moves seq
		// once the row is in, so a refused change (the log's key) is not
		// mistaken for it.
		var se sqlite3.Error
		if t.c.seq == seq && errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey {
			return collections.WriteResult{}, false, nil
		}
		return collections.WriteResult{}, false, err
	}
	return result(w, o), true, nil
}

// store writes the document o leaves with put (or insert) and, for a
// logged path, its change with the next seq; cur is the row it replaces
// (nil: none). A failed put leaves seq untouched.
func (t *txn) store(put *sql.Stmt, db string, w *collections.Write, o docwrite.Outcome, cur *stored, now int64) error {
	c := t.c
	next, op, data := o.Next, o.Op, o.Data
	coll, id := next.Collection, next.ID
	logged := collections.IsLogged(w.Path)
	if logged {
		next.Seq = c.seq + 1
	}
	if _, err := t.stmt(put).ExecContext(t.ctx, db, w.Path, coll, collections.Shape(coll), id, data,
		next.Version, next.CreatedAt, next.UpdatedAt, next.Deleted, next.Seq); err != nil {
		return err
	}
	if !logged {
		return nil
	}
	c.seq = next.Seq
	c.lastTime = now
	if collections.IsSystemPath(w.Path) {
		c.lastSystem = c.seq
	}
	var bv, bc, bu, bs sql.NullInt64
	var bd sql.NullBool
	var bdata []byte
	if cur != nil {
		b := cur.doc
		bv, bc, bu, bs = valid(b.Version), valid(b.CreatedAt), valid(b.UpdatedAt), valid(b.Seq)
		bd = sql.NullBool{Bool: b.Deleted, Valid: true}
		bdata = cur.data
	}
	_, err := t.stmt(c.stmts.change).ExecContext(t.ctx, next.Seq, db, string(op), w.Path, now,
		bv, bc, bu, bd, bs, nullBytes(bdata),
		next.Version, next.CreatedAt, next.Deleted, data)
	return err
}

func valid(v int64) sql.NullInt64 { return sql.NullInt64{Int64: v, Valid: true} }

// nullBytes stores a nil slice as NULL rather than an empty blob.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// purge runs one bounded retention round.
func (t *txn) purge(r *request) error {
	cutoff := time.Now().Add(-t.c.s.cfg.Retention).UnixMilli()
	var purged, through int64
	var minCursor sql.NullInt64
	err := t.tx.QueryRowContext(t.ctx, `SELECT
		(SELECT value FROM meta WHERE key = 'purged_through'),
		(SELECT COALESCE(MAX(seq), 0) FROM changes WHERE time < ?),
		(SELECT MIN(seq) FROM cursors)`, cutoff).Scan(&purged, &through, &minCursor)
	if err != nil {
		return err
	}
	if minCursor.Valid {
		through = min(through, minCursor.Int64)
	}
	if through > purged+purgeChunk {
		through, r.more = purged+purgeChunk, true
	}
	if through > purged {
		if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM changes WHERE seq <= ?`, through); err != nil {
			return err
		}
		if _, err := t.tx.ExecContext(t.ctx, `UPDATE meta SET value = ? WHERE key = 'purged_through'`, through); err != nil {
			return err
		}
	}
	res, err := t.tx.ExecContext(t.ctx, `DELETE FROM docs WHERE (db, path) IN
		(SELECT db, path FROM docs WHERE deleted = 1 AND updated_at < ? LIMIT ?)`, cutoff, purgeChunk)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == purgeChunk {
		r.more = true
	}
	return nil
}
