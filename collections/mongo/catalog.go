package mongo

import (
	"context"
	"errors"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/loomdb/loom/collections"
)

var _ collections.Catalog = (*Store)(nil)

// catalogFind is the query of one catalog seek: the smallest value of field
// in [from, to) ("" = unbounded above), with a live document unless the
// field is the database, sorted and limited to one on index (db, field, ...)
// so the server reads one index key per value it passes (plus the
// tombstones of that value), never a collection scan or an in-memory sort.
// A from ending in "\x00" (the successor of a name, collections.CatalogSeek)
// is sent as $gt of the name, so no NUL reaches the server.
func catalogFind(field, db, from, to string) (bson.D, *options.FindOneOptionsBuilder) {
	op := "$gte"
	if strings.HasSuffix(from, "\x00") {
		op, from = "$gt", strings.TrimSuffix(from, "\x00")
	}
	rng := bson.D{{Key: op, Value: from}}
	if to != "" {
		rng = append(rng, bson.E{Key: "$lt", Value: to})
	}
	opts := options.FindOne().
		SetSort(bson.D{{Key: field, Value: 1}}).
		SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: field, Value: 1}})
	if field == fieldDB {
		// Any record counts: the caller then looks for a live user
		// collection in the database. Covered by docs_collection.
		return bson.D{{Key: fieldDB, Value: rng}}, opts.SetHint("docs_collection")
	}
	hint := "docs_collection"
	if field == fieldShape {
		hint = "docs_shape"
	}
	return bson.D{{Key: fieldDB, Value: db}, {Key: field, Value: rng}, {Key: fieldDeleted, Value: false}}, opts.SetHint(hint)
}

// seek runs one catalog seek.
func (s *Store) seek(ctx context.Context, field, db, from, to string) (string, bool, error) {
	filter, opts := catalogFind(field, db, from, to)
	raw, err := s.docs.FindOne(ctx, filter, opts).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.readErr("catalog", err)
	}
	v, ok := raw.Lookup(field).StringValueOK()
	if !ok {
		return "", false, s.readErr("catalog", errors.New("record without a string "+field))
	}
	return v, true, nil
}

func (s *Store) liveSeek(field, db string) collections.CatalogSeek {
	return func(ctx context.Context, from, to string) (string, bool, error) {
		return s.seek(ctx, field, db, from, to)
	}
}

// Databases lists the databases with live non-system documents.
func (s *Store) Databases(ctx context.Context, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	dbs := func(ctx context.Context, from, to string) (string, bool, error) {
		return s.seek(ctx, fieldDB, "", from, to)
	}
	live := func(db string) collections.CatalogSeek { return s.liveSeek(fieldColl, db) }
	return collections.ListDatabases(ctx, dbs, live, after, limit)
}

// Collections lists the child collections of parent with live documents.
func (s *Store) Collections(ctx context.Context, db, parent, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return collections.ListCollections(ctx, s.liveSeek(fieldColl, db), parent, after, limit)
}

// Shapes lists the collection groups of db with live documents.
func (s *Store) Shapes(ctx context.Context, db, after string, limit int) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return collections.ListShapes(ctx, s.liveSeek(fieldShape, db), after, limit)
}
