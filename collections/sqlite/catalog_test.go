package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// Every catalog seek is one search on the index that starts with its
// column (the primary key for db), in index order: no scan, no sort.
func TestCatalogSeeksUseIndexes(t *testing.T) {
	s := mustOpen(t, Config{Path: filepath.Join(t.TempDir(), "x.db")})
	t.Cleanup(func() { s.Close() })
	// Statistics as a grown database has them, so the planner cannot
	// prefer a scan of a tiny table.
	if _, err := s.wdb.Exec(`ANALYZE`); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"db":           "(db>?)", // the primary key or any index starting with db
		"collection":   "SEARCH docs USING INDEX docs_changed (db=? AND collection>?)",
		"collectionTo": "SEARCH docs USING INDEX docs_changed (db=? AND collection>? AND collection<?)",
		"shape":        "SEARCH docs USING INDEX docs_shape (db=? AND shape>?)",
		"shapeTo":      "SEARCH docs USING INDEX docs_shape (db=? AND shape>? AND shape<?)",
	}
	for name, q := range catalogSQL {
		plan := explain(t, s, q, []any{"d", "a", "b"}[:strings.Count(q, "?")])
		t.Logf("%s: %s", name, plan)
		if plan != want[name] && !(name == "db" && strings.HasPrefix(plan, "SEARCH docs USING ") && strings.HasSuffix(plan, want[name]) && !strings.Contains(plan, "\n")) {
			t.Errorf("%s plan:\n%s\nwant:\n%s", name, plan, want[name])
		}
	}
}

// A listing costs one seek per name it passes, not one row per document,
// and skips a child's whole subtree in one seek: 9000 documents in 3002
// collections are listed with a handful of seeks.
func TestCatalogSeeksPerName(t *testing.T) {
	s := mustOpen(t, Config{Path: filepath.Join(t.TempDir(), "x.db")})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if _, err := s.wdb.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < 2999)
		INSERT INTO docs (db, path, collection, shape, id, data, version, created_at, updated_at, deleted, seq)
		SELECT 'd', c || '/' || printf('%05d', i), c, s, printf('%05d', i), '{}', 1, 0, 0, 0, 0
		FROM (SELECT i, 'a' AS c, 'a' AS s FROM n
			UNION ALL SELECT i, 'a/' || printf('%05d', i) || '/b', 'a/*/b' FROM n -- 3000 subcollections
			UNION ALL SELECT i, 'c/y/d', 'c/*/d' FROM n)`); err != nil {
		t.Fatal(err)
	}
	got, err := s.Collections(ctx, "d", "", "", 10)
	if err != nil || fmt.Sprint(got) != "[a]" {
		t.Fatalf("Collections = %v, %v", got, err)
	}
	got, err = s.Shapes(ctx, "d", "", 10)
	if err != nil || fmt.Sprint(got) != "[a/*/b c/*/d]" {
		t.Fatalf("Shapes = %v, %v", got, err)
	}
	// Each listing is a few seeks, not a walk over the 9000 rows.
	seeks := 0
	counted := func(seek collections.CatalogSeek) collections.CatalogSeek {
		return func(ctx context.Context, from, to string) (string, bool, error) {
			seeks++
			return seek(ctx, from, to)
		}
	}
	if got, err := collections.ListCollections(ctx, counted(s.liveSeek("collection", "d")), "", "", 10); err != nil || fmt.Sprint(got) != "[a]" || seeks > 4 {
		t.Errorf("ListCollections = %v, %v in %d seeks, want [a] in at most 4", got, err, seeks)
	}
	seeks = 0
	if got, err := collections.ListShapes(ctx, counted(s.liveSeek("shape", "d")), "", 10); err != nil || fmt.Sprint(got) != "[a/*/b c/*/d]" || seeks > 4 {
		t.Errorf("ListShapes = %v, %v in %d seeks, want 2 shapes in at most 4", got, err, seeks)
	}
}
