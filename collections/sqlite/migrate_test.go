package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/loomdb/loom/collections"
)

// A database written by an earlier version has the docs_collection index
// (db, collection, path); Open drops it, since nothing reads it and every
// write would keep paying for its entries, and the collections read the
// same afterwards. An older binary opening the database again builds it
// anew, so it is built here the way such a binary does.
func TestOpenDropsCollectionIndex(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1})
	var ws []collections.Write
	for i := range 50 {
		ws = append(ws,
			create(fmt.Sprintf("users/u%02d", i), obj(t, `{"n":1}`)),
			create(fmt.Sprintf("users/u%02d/items/i%d", i%3, i), obj(t, `{"n":2}`)))
	}
	commitAll(t, s, ws)
	if _, err := s.wdb.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS docs_collection ON docs (db, collection, path)`); err != nil {
		t.Fatal(err)
	}
	if !hasIndex(t, s, "docs_collection") {
		t.Fatal("docs_collection was not built")
	}
	s.Close()

	s = mustOpen(t, Config{Path: path, PurgeInterval: -1})
	for _, name := range []string{"docs_shape", "docs_changed", "docs_tombstones"} {
		if !hasIndex(t, s, name) {
			t.Errorf("index %s missing after reopen", name)
		}
	}
	if hasIndex(t, s, "docs_collection") {
		t.Error("docs_collection still exists after reopen")
	}
	var stat int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM sqlite_stat1 WHERE idx = 'docs_collection'`).Scan(&stat); err != nil || stat != 0 {
		t.Errorf("sqlite_stat1 rows for docs_collection: %d, %v", stat, err)
	}
	for c, want := range map[string]int{"users": 50, "users/u01/items": 17, "users/u07/items": 0} {
		q := collections.Query{Collection: c, Limit: 4}
		checkQuery(t, s, c, q)
		got := pageAll(t, s, q)
		if len(got) != want {
			t.Errorf("query %s: %d documents, want %d", c, len(got), want)
		}
		for _, d := range got {
			if d.Collection != c {
				t.Errorf("query %s returned %s", c, d.Path)
			}
		}
	}
	if got, err := s.Collections(ctx, testDB, "users/u01", "", 10); err != nil || fmt.Sprint(got) != "[users/u01/items]" {
		t.Errorf("Collections(users/u01) = %v, %v", got, err)
	}
}

func hasIndex(t testing.TB, s *Store, name string) bool {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}
