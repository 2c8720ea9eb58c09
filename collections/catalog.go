package collections

import (
	"context"
	"fmt"
	"strings"
)

// Catalog is an optional engine interface that lists what a store holds:
// databases, collections and collection groups. Callers check for it by type
// assertion (s.(collections.Catalog)); an engine without it cannot be
// browsed. Every method returns names in ascending byte order, strictly
// after `after` ("" = from the start), at most limit of them (limit must be
// positive). Only live documents count: a collection whose documents are
// all tombstones is not listed. System collections (first segment "_") are
// never listed and never make a database or a group appear.
type Catalog interface {
	// Databases lists the databases that hold at least one live document
	// outside the system collections.
	Databases(ctx context.Context, after string, limit int) ([]string, error)
	// Collections lists the concrete collections whose parent is parent
	// ("" = top level, else a document path) and that hold live documents
	// directly (a collection holding only subcollections is reached through
	// Shapes). A system parent lists nothing; a parent that is not a
	// document path is ErrInvalidPath (storetest checks it).
	Collections(ctx context.Context, db, parent, after string, limit int) ([]string, error)
	// Shapes lists the collection shapes of depth 3 or more
	// ("rooms/*/messages"): the collection groups with live documents.
	Shapes(ctx context.Context, db, after string, limit int) ([]string, error)
}

// CatalogSeek returns the smallest value v of one catalog column (the
// database, collection path or shape of a document) with from <= v and, when
// to is not "", v < to; ok is false when there is none. Engines implement it
// as one index seek (ORDER BY column LIMIT 1 on an index that starts with
// the column, or with db and then the column), which makes the listings
// below loose index scans: they cost one seek per value they pass, never a
// scan of the documents under a value.
type CatalogSeek func(ctx context.Context, from, to string) (v string, ok bool, err error)

// seekAt runs one seek and checks that the engine kept to the range, so
// that every scan below makes progress.
func seekAt(ctx context.Context, seek CatalogSeek, from, to string) (string, bool, error) {
	v, ok, err := seek(ctx, from, to)
	if err == nil && ok && (v < from || (to != "" && v >= to)) {
		return "", false, fmt.Errorf("catalog seek in [%q, %q) returned %q", from, to, v)
	}
	return v, ok, err
}

// above is the smallest string greater than s.
func above(s string) string { return s + "\x00" }

// systemEnd is the smallest string after every system path: every path
// starting with "_" sorts below "`" ('_'+1), and segments hold no byte above
// 'z' that could sort between.
const systemEnd = "`"

// subtreeEnd is the smallest string after every path below p ("p/..."):
// '0' is '/'+1.
func subtreeEnd(p string) string { return p + "0" }

// ListDatabases is Catalog.Databases over two engine seeks: dbs on the
// database column (any document) and live, which returns a seek over the
// live collection paths of one database.
func ListDatabases(ctx context.Context, dbs CatalogSeek, live func(db string) CatalogSeek, after string, limit int) ([]string, error) {
	var out []string
	from := ""
	if after != "" {
		from = above(after)
	}
	for len(out) < limit {
		d, ok, err := seekAt(ctx, dbs, from, "")
		if err != nil || !ok {
			return out, err
		}
		seek := live(d)
		user, err := hasAny(ctx, seek, "", "_")
		if err == nil && !user {
			user, err = hasAny(ctx, seek, systemEnd, "")
		}
		if err != nil {
			return out, err
		}
		if user {
			out = append(out, d)
		}
		from = above(d)
	}
	return out, nil
}

func hasAny(ctx context.Context, seek CatalogSeek, from, to string) (bool, error) {
	_, ok, err := seekAt(ctx, seek, from, to)
	return ok, err
}

// ListCollections is Catalog.Collections over a seek on the live collection
// paths of one database. The scan walks the range of paths below parent:
// each value found is either a child (listed) or lies deeper, below a child
// (the whole subtree of that child is skipped in one step).
func ListCollections(ctx context.Context, seek CatalogSeek, parent, after string, limit int) ([]string, error) {
	if parent != "" {
		if err := ValidateDocPath(parent); err != nil {
			return nil, err
		}
		if IsSystemPath(parent) {
			return nil, nil
		}
	}
	prefix, to := "", ""
	if parent != "" {
		prefix, to = parent+"/", subtreeEnd(parent)
	}
	from := prefix
	if after != "" && above(after) > from {
		from = above(after)
	}
	var out []string
	for len(out) < limit {
		if to != "" && from >= to {
			break
		}
		v, ok, err := seekAt(ctx, seek, from, to)
		if err != nil || !ok {
			return out, err
		}
		if parent == "" && IsSystemPath(v) {
			from = systemEnd
			continue
		}
		rest := v[len(prefix):]
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			out = append(out, v)
			from = above(v)
			continue
		}
		from = subtreeEnd(prefix + rest[:i])
	}
	return out, nil
}

// ListShapes is Catalog.Shapes over a seek on the live shapes of one
// database: shapes without "/" (top-level collections) are passed over,
// system shapes skipped in one step.
func ListShapes(ctx context.Context, seek CatalogSeek, after string, limit int) ([]string, error) {
	from := ""
	if after != "" {
		from = above(after)
	}
	var out []string
	for len(out) < limit {
		v, ok, err := seekAt(ctx, seek, from, "")
		if err != nil || !ok {
			return out, err
		}
		switch {
		case IsSystemPath(v):
			from = systemEnd
			continue
		case strings.Contains(v, "/"):
			out = append(out, v)
		}
		from = above(v)
	}
	return out, nil
}
