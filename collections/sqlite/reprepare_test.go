package sqlite

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/loomdb/loom/collections"
)

// countCompiles makes the store's only read connection count statement
// compilations: SQLite calls the authorizer while it compiles a statement,
// the first prepare and every re-prepare alike, and never while it runs one.
func countCompiles(t *testing.T, s *Store) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	conn, err := s.rdb.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Raw(func(dc any) error {
		dc.(*sqlite3.SQLiteConn).RegisterAuthorizer(func(op int, _, _, _ string) int {
			if op == sqlite3.SQLITE_SELECT {
				n.Add(1)
			}
			return sqlite3.SQLITE_OK
		})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestReadsCompileOnce: a read statement is compiled once and then only
// bound and run, whatever values it is bound to. SQLite marks a parameter
// "re-prepare when rebound" when the planner looks at its value (an
// equality left to the row filter, a LIMIT), and the driver clears the
// bindings after every run, which expires such a statement: it was
// recompiled, planner and all, on every call (for an indexed query that
// was most of its SQLite time).
func TestReadsCompileOnce(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, ReadConns: 1,
		Indexes: []collections.Index{tasksIndex, peopleIndex, {Collection: "items", Fields: []string{"g", "n"}}}})
	var ws []collections.Write
	for i := range 60 {
		ws = append(ws,
			create(fmt.Sprintf("items/i%03d", i), map[string]any{"g": fmt.Sprintf("g%d", i%3), "n": i, "s": fmt.Sprintf("s%02d", i)}),
			create(fmt.Sprintf("people/p%03d", i), map[string]any{"age": i % 7, "name": fmt.Sprintf("n%d", i)}),
			create(fmt.Sprintf("users/u%d/orch-chats/c%d/tasks/t%03d", i%2, i%3, i), map[string]any{"chatId": fmt.Sprintf("c%d", i%3)}))
	}
	commitAll(t, s, ws)
	compiles := countCompiles(t, s)

	eq := func(f string, v any) collections.Filter {
		return collections.Filter{Field: f, Op: collections.OpEq, Value: v}
	}
	shapes := map[string]func(i int) collections.Query{
		"indexed string ==": func(i int) collections.Query {
			return collections.Query{Collection: "items", Limit: 5, Filters: []collections.Filter{eq("g", fmt.Sprintf("g%d", i%3))}}
		},
		"collection group ==": func(i int) collections.Query {
			return collections.Query{Collection: tasksIndex.Collection, Limit: 5, Filters: []collections.Filter{eq("chatId", fmt.Sprintf("c%d", i%3))}}
		},
		"number == and order": func(i int) collections.Query {
			return collections.Query{Collection: "people", Limit: 3, Filters: []collections.Filter{eq("age", i%7)},
				OrderBy: []collections.Order{{Field: "name", Direction: "desc"}}}
		},
		"range": func(i int) collections.Query {
			return collections.Query{Collection: "items", Limit: 4, Filters: []collections.Filter{{Field: "n", Op: collections.OpGt, Value: i % 40}}}
		},
		"prefix, deleted shown": func(i int) collections.Query {
			return collections.Query{Collection: "items", Limit: 4, ShowDeleted: true, Filters: []collections.Filter{{Field: "s", Op: collections.OpPrefix, Value: fmt.Sprintf("s%d", i%5)}}}
		},
		"unfiltered limit": func(i int) collections.Query {
			return collections.Query{Collection: "items", Limit: 1 + i%3} // the limit is part of the SQL text
		},
		"== and order on the index": func(i int) collections.Query {
			return collections.Query{Collection: "items", Limit: 3, Filters: []collections.Filter{eq("g", fmt.Sprintf("g%d", i%3))},
				OrderBy: []collections.Order{{Field: "n", Direction: "desc"}}}
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			run := func(i int) {
				q := shape(i)
				res, err := s.Query(ctx, testDB, q)
				if err != nil {
					t.Fatal(err)
				}
				if res.NextCursor != "" { // the next page runs the continuation's SQL
					q.StartAfter = res.NextCursor
					if _, err := s.Query(ctx, testDB, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range 3 { // compile whatever the shape needs
				run(i)
			}
			before := compiles.Load()
			for i := 3; i < 20; i++ {
				run(i)
			}
			if n := compiles.Load() - before; n != 0 {
				t.Errorf("%d statements compiled again while the shape repeated with other values", n)
			}
		})
	}
	t.Run("get, changed since, read changes", func(t *testing.T) {
		run := func(i int) {
			if _, err := s.Get(ctx, testDB, fmt.Sprintf("items/i%03d", i%60)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ChangedSince(ctx, testDB, "items", collections.Checkpoint{Seq: int64(i)}, 1+i%7); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ReadChanges(ctx, int64(i), 1+i%7); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			run(i)
		}
		before := compiles.Load()
		for i := 3; i < 20; i++ {
			run(i)
		}
		if n := compiles.Load() - before; n != 0 {
			t.Errorf("%d statements compiled again while the reads repeated with other values", n)
		}
	})
}
