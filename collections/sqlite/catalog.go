package sqlite

import (
	"context"

	"github.com/loomdb/loom/collections"
)

var _ collections.Catalog = (*Store)(nil)

// The catalog seeks: each returns the smallest value of one column in
// [from, to) and runs as one index seek (EXPLAIN QUERY PLAN, checked by
// TestCatalogSeeksUseIndexes):
//
//	SEARCH docs USING COVERING INDEX docs_shape (db>?)  -- or another index starting with db
//	SEARCH docs USING INDEX docs_changed (db=? AND collection>? AND collection<?)
//	SEARCH docs USING INDEX docs_shape (db=? AND shape>?)
//
// with no temporary B-tree: the index order is the ORDER BY (docs_changed
// is (db, collection, seq, id): its leading columns serve a seek on the
// collection column as well as an index of its own would). "deleted = 0"
// is checked on the rows the seek visits, so tombstones of a value are
// stepped over one by one (tombstones are purged after the retention).
var catalogSQL = map[string]string{
	"db":           `SELECT db FROM docs WHERE db >= ?1 ORDER BY db LIMIT 1`,
	"collection":   `SELECT collection FROM docs WHERE db = ?1 AND collection >= ?2 AND deleted = 0 ORDER BY collection LIMIT 1`,
	"collectionTo": `SELECT collection FROM docs WHERE db = ?1 AND collection >= ?2 AND collection < ?3 AND deleted = 0 ORDER BY collection LIMIT 1`,
	"shape":        `SELECT shape FROM docs WHERE db = ?1 AND shape >= ?2 AND deleted = 0 ORDER BY shape LIMIT 1`,
	"shapeTo":      `SELECT shape FROM docs WHERE db = ?1 AND shape >= ?2 AND shape < ?3 AND deleted = 0 ORDER BY shape LIMIT 1`,
}

// seek runs one catalog seek on the read pool, prepared once (the five
// texts stay in the statement cache).
func (s *Store) seek(ctx context.Context, query string, args ...any) (string, bool, error) {
	rows, err := s.queries.query(ctx, s.rdb, query, args...)
	if err != nil {
		return "", false, s.readErr("catalog", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", false, s.readErr("catalog", err)
		}
		return "", false, nil
	}
	var v string
	if err := rows.Scan(&v); err != nil {
		return "", false, s.readErr("catalog", err)
	}
	return v, true, nil
}

// liveSeek is the seek on one live column ("collection" or "shape") of db.
func (s *Store) liveSeek(column, db string) collections.CatalogSeek {
	return func(ctx context.Context, from, to string) (string, bool, error) {
		if to == "" {
			return s.seek(ctx, catalogSQL[column], db, from)
		}
		return s.seek(ctx, catalogSQL[column+"To"], db, from, to)
	}
}

// Databases lists the databases with live non-system documents.
func (s *Store) Databases(ctx context.Context, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	dbs := func(ctx context.Context, from, _ string) (string, bool, error) {
		return s.seek(ctx, catalogSQL["db"], from)
	}
	live := func(db string) collections.CatalogSeek { return s.liveSeek("collection", db) }
	return collections.ListDatabases(ctx, dbs, live, after, limit)
}

// Collections lists the child collections of parent with live documents.
func (s *Store) Collections(ctx context.Context, db, parent, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return collections.ListCollections(ctx, s.liveSeek("collection", db), parent, after, limit)
}

// Shapes lists the collection groups of db with live documents.
func (s *Store) Shapes(ctx context.Context, db, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return collections.ListShapes(ctx, s.liveSeek("shape", db), after, limit)
}
