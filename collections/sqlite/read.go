package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/lifecycle"
)

// docColumns are the columns scanDoc reads, in order. A document's
// collection and id columns always split its path (they exist for the
// indexes), so a read takes them from the path instead: two columns less
// to convert and two strings less to allocate per row.
const docColumns = `path, data, version, created_at, updated_at, deleted, seq`

// scanColumns scans one docColumns row into d and returns the stored data.
func scanColumns(sc scanner, d *collections.Document) ([]byte, error) {
	var data []byte
	if err := sc.Scan(&d.Path, &data, &d.Version, &d.CreatedAt, &d.UpdatedAt, &d.Deleted, &d.Seq); err != nil {
		return nil, err
	}
	d.Collection, d.ID = collections.SplitDocPath(d.Path)
	return data, nil
}

var _ collections.RawReader = (*Store)(nil)

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanDoc reads one docColumns row. When raw is not nil it receives the
// encoded data.
func scanDoc(sc scanner, raw *[]byte) (*collections.Document, error) {
	d := new(collections.Document)
	if err := scanDocInto(sc, d, raw); err != nil {
		return nil, err
	}
	return d, nil
}

// scanDocInto is scanDoc into a zero d.
func scanDocInto(sc scanner, d *collections.Document, raw *[]byte) error {
	data, err := scanColumns(sc, d)
	if err != nil {
		return err
	}
	m, err := collections.DecodeObject(data)
	if err != nil {
		return fmt.Errorf("sqlite: corrupt document %s: %w", d.Path, err)
	}
	d.Data = m
	if raw != nil {
		*raw = data
	}
	return nil
}

// scanDocRaw reads one docColumns row for a RawReader read: when the stored
// data is already its wire form (collections.WireData) the document keeps
// it in Raw and Data stays nil; otherwise it is decoded as scanDoc does.
func scanDocRaw(sc scanner) (*collections.Document, error) {
	d := new(collections.Document)
	if err := scanDocRawInto(sc, d); err != nil {
		return nil, err
	}
	return d, nil
}

// scanDocRawInto is scanDocRaw into a zero d.
func scanDocRawInto(sc scanner, d *collections.Document) error {
	data, err := scanColumns(sc, d)
	if err != nil {
		return err
	}
	if collections.WireData(data) {
		d.Raw = data
		return nil
	}
	m, err := collections.DecodeObject(data)
	if err != nil {
		return fmt.Errorf("sqlite: corrupt document %s: %w", d.Path, err)
	}
	d.Data = m
	return nil
}

type readStmts struct {
	get, changedSince, cursor *sql.Stmt
	// changes is ReadChanges' read (purged when it finds no change): it
	// runs after every commit, for the trigger evaluator and realtime.
	purged, changes *sql.Stmt
}

func (r *readStmts) prepare(ctx context.Context, db *sql.DB) error {
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = db.PrepareContext(ctx, q)
		if err != nil {
			err = fmt.Errorf("sqlite: prepare %q: %w", q, err)
		}
		return st
	}
	// Parameters are written +?n: see param.
	r.get = prep(`SELECT ` + docColumns + ` FROM docs WHERE db = +?1 AND path = +?2 AND deleted = 0`)
	r.changedSince = prep(`SELECT ` + docColumns + ` FROM docs
		WHERE db = +?1 AND collection = +?2 AND (seq > +?3 OR (seq = +?3 AND id > +?4))
		ORDER BY seq, id LIMIT +?5`)
	r.cursor = prep(`SELECT seq FROM cursors WHERE name = +?1`)
	r.purged = prep(`SELECT value FROM meta WHERE key = 'purged_through'`)
	r.changes = prep(`SELECT (SELECT value FROM meta WHERE key = 'purged_through'), c.seq, c.db, c.op, c.path, c.time,
		c.b_version, c.b_created, c.b_updated, c.b_deleted, c.b_seq, c.b_data,
		c.a_version, c.a_created, c.a_deleted, c.a_data
		FROM changes c WHERE c.seq > +?1 ORDER BY c.seq LIMIT +?2`)
	if err != nil {
		r.close()
	}
	return err
}

func (r *readStmts) close() {
	for _, st := range []*sql.Stmt{r.get, r.changedSince, r.cursor, r.purged, r.changes} {
		if st != nil {
			st.Close()
		}
	}
}

// begin checks the context and that the store is open.
func (s *Store) begin(ctx context.Context) error { return lifecycle.Begin(ctx, &s.closed) }

// readErr maps errors of a read that raced with Close.
func (s *Store) readErr(op string, err error) error {
	if lifecycle.RacedClose(&s.closed, err) {
		return collections.ErrClosed
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// Get returns the live document at path.
func (s *Store) Get(ctx context.Context, db, path string) (*collections.Document, error) {
	return s.get(ctx, db, path, false)
}

// GetRaw is Get for collections.RawReader: the document may carry only its
// stored encoding (Raw, Data nil).
func (s *Store) GetRaw(ctx context.Context, db, path string) (*collections.Document, error) {
	return s.get(ctx, db, path, true)
}

func (s *Store) get(ctx context.Context, db, path string, raw bool) (*collections.Document, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	// The lookup itself is one primary-key row, but it first waits for a
	// free read connection, which a long query may hold: that wait must
	// end with ctx (its cost, a database/sql goroutine per call, is paid).
	row := s.reads.get.QueryRowContext(ctx, db, path)
	var d *collections.Document
	var err error
	if raw {
		d, err = scanDocRaw(row)
	} else {
		d, err = scanDoc(row, nil)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, collections.ErrNotFound
	}
	if err != nil {
		return nil, s.readErr("get "+path, err)
	}
	return d, nil
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
	rows, err := s.reads.changedSince.QueryContext(ctx, db, collection, cp.Seq, cp.ID, limit)
	if err != nil {
		return nil, s.readErr("changed since", err)
	}
	defer rows.Close()
	var out []*collections.Document
	for rows.Next() {
		d, err := scanDoc(rows, nil)
		if err != nil {
			return nil, s.readErr("changed since", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("changed since", err)
	}
	return out, nil
}

// ReadChanges returns changes after `after` in seq order. The retention
// position and the rows are read in one snapshot, so a concurrent purge can
// never open a silent gap.
func (s *Store) ReadChanges(ctx context.Context, after int64, limit int) ([]collections.Change, error) {
	return s.readChanges(ctx, after, limit, nil)
}

var _ collections.FilteredChangeReader = (*Store)(nil)

// ReadChangesFiltered is ReadChanges for collections.FilteredChangeReader:
// the stored data of a change want rejects is neither copied out of the
// row nor decoded.
func (s *Store) ReadChangesFiltered(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	return s.readChanges(ctx, after, limit, want)
}

// readChanges reads the changes after `after`; want nil wants them all.
//
// One statement reads the changes and, in each row, the retention mark: a
// statement reads one snapshot, so a change it returns was not purged and
// the mark says whether an older one after `after` was, with no
// transaction to open and roll back around it (this runs after every
// commit). When no change follows `after`, the mark is read alone: an
// empty answer opens no gap, and an expired position is reported as of
// that read.
func (s *Store) readChanges(ctx context.Context, after int64, limit int, want collections.ChangeWant) ([]collections.Change, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []collections.Change
	if limit > 0 {
		rows, err := s.reads.changes.QueryContext(ctx, after, limit)
		if err != nil {
			return nil, s.readErr("read changes", err)
		}
		defer rows.Close()
		r := newChangeRow()
		for rows.Next() {
			c, purged, err := scanChange(rows, r, want)
			if err != nil {
				return nil, s.readErr("read changes", err)
			}
			if after < purged {
				return nil, &collections.PositionExpiredError{After: after, Oldest: purged}
			}
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			return nil, s.readErr("read changes", err)
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	var purged int64
	if err := s.reads.purged.QueryRowContext(ctx).Scan(&purged); err != nil {
		return nil, s.readErr("read changes", err)
	}
	if after < purged {
		return nil, &collections.PositionExpiredError{After: after, Oldest: purged}
	}
	return nil, nil
}

// changeRow holds the columns of one change row. A read scans all its rows
// into one changeRow: a Scan destination escapes to the heap, so scanning
// into locals would allocate each of them for every row.
type changeRow struct {
	purged, seq, time  int64
	db, op, path       string
	bv, bc, bu, bs     sql.NullInt64
	bd                 sql.NullBool
	bdata, adata       sql.RawBytes
	aVersion, aCreated int64
	aDeleted           bool
	dest               []any
}

func newChangeRow() *changeRow {
	r := new(changeRow)
	r.dest = []any{&r.purged, &r.seq, &r.db, &r.op, &r.path, &r.time, &r.bv, &r.bc, &r.bu, &r.bd, &r.bs, &r.bdata,
		&r.aVersion, &r.aCreated, &r.aDeleted, &r.adata}
	return r
}

// scanChange reads one change row into r and returns the change and the
// retention mark read with it; when want is not nil and rejects the
// change, only its Seq, DB, Op, Path and Time. The data columns are
// scanned as sql.RawBytes (the driver's buffer, valid until the next row):
// decoded at once or dropped, they need no copy of their own.
func scanChange(rows *sql.Rows, r *changeRow, want collections.ChangeWant) (collections.Change, int64, error) {
	if err := rows.Scan(r.dest...); err != nil {
		return collections.Change{}, 0, err
	}
	c := collections.Change{Seq: r.seq, DB: r.db, Op: collections.ChangeOp(r.op), Path: r.path, Time: r.time}
	if want != nil && !want(c.DB, c.Op, c.Path) {
		return c, r.purged, nil
	}
	coll, id := collections.SplitDocPath(c.Path)
	after, err := collections.DecodeObject(r.adata)
	if err != nil {
		return c, 0, fmt.Errorf("corrupt change %d: %w", c.Seq, err)
	}
	c.After = &collections.Document{Path: c.Path, Collection: coll, ID: id, Version: r.aVersion, CreatedAt: r.aCreated,
		UpdatedAt: c.Time, Deleted: r.aDeleted, Seq: c.Seq, Data: after}
	if r.bv.Valid {
		before, err := collections.DecodeObject(r.bdata)
		if err != nil {
			return c, 0, fmt.Errorf("corrupt change %d: %w", c.Seq, err)
		}
		c.Before = &collections.Document{Path: c.Path, Collection: coll, ID: id, Version: r.bv.Int64, CreatedAt: r.bc.Int64,
			UpdatedAt: r.bu.Int64, Deleted: r.bd.Bool, Seq: r.bs.Int64, Data: before}
	}
	return c, r.purged, nil
}

// Head returns the seq of the last committed change.
func (s *Store) Head(ctx context.Context) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	return s.head.Load(), nil
}

// Cursor returns a durable cursor's position (0 when unknown).
func (s *Store) Cursor(ctx context.Context, name string) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var seq int64
	err := s.reads.cursor.QueryRowContext(ctx, name).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.readErr("cursor "+name, err)
	}
	return seq, nil
}
