package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// Engine-specific tests: query plans, reopen, the chunked and Go-sorted query
// paths, close and group-commit behaviour, size limits. The engine-neutral
// contract is covered by TestConformance.

const testDB = "default"

func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "loom.db") }

func obj(t testing.TB, s string) map[string]any {
	t.Helper()
	m, err := collections.DecodeObject([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func create(path string, data map[string]any) collections.Write {
	return collections.Write{Type: collections.WriteCreate, Path: path, Data: data}
}

func mustCommit(t testing.TB, s *Store, writes ...collections.Write) []collections.WriteResult {
	t.Helper()
	res, err := s.Commit(context.Background(), testDB, writes, collections.CommitOptions{})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return res
}

// commitAll writes in commits of at most 500 writes.
func commitAll(t testing.TB, s *Store, writes []collections.Write) {
	t.Helper()
	for len(writes) > 0 {
		n := min(500, len(writes))
		mustCommit(t, s, writes[:n]...)
		writes = writes[n:]
	}
}

func mustHead(t testing.TB, s *Store) int64 {
	t.Helper()
	h, err := s.Head(context.Background())
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}

// allDocs reads every row of db straight from the table, tombstones included.
func allDocs(t testing.TB, s *Store, db string) []*collections.Document {
	t.Helper()
	rows, err := s.rdb.Query(`SELECT `+docColumns+` FROM docs WHERE db = ? ORDER BY path`, db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*collections.Document
	for rows.Next() {
		d, err := scanDoc(rows, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bruteForce is the reference result of q over every stored document.
func bruteForce(t testing.TB, s *Store, q collections.Query) []*collections.Document {
	t.Helper()
	var out []*collections.Document
	for _, d := range allDocs(t, s, testDB) {
		if q.Matches(d) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *collections.Document) int { return collections.CompareDocs(q.OrderBy, a, b) })
	return out
}

// pageAll pages through q with its limit, checking the page contract: full
// pages while a cursor is returned, no cursor on the last page, no empty
// trailing page.
func pageAll(t testing.TB, s *Store, q collections.Query) []*collections.Document {
	t.Helper()
	if err := q.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	var out []*collections.Document
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatalf("query %+v: more than 10000 pages", q)
		}
		if err := q.Normalize(); err != nil {
			t.Fatalf("page %d: cursor rejected: %v", page, err)
		}
		res, err := s.Query(context.Background(), testDB, q)
		if err != nil {
			t.Fatalf("page %d: Query: %v", page, err)
		}
		if len(res.Docs) > q.Limit {
			t.Fatalf("page %d: %d docs, limit %d", page, len(res.Docs), q.Limit)
		}
		if len(res.Docs) == 0 && page > 0 {
			t.Fatalf("page %d: empty page after a cursor", page)
		}
		out = append(out, res.Docs...)
		if res.NextCursor == "" {
			return out
		}
		if len(res.Docs) != q.Limit {
			t.Fatalf("page %d: %d docs with a next cursor, limit %d", page, len(res.Docs), q.Limit)
		}
		q.StartAfter = res.NextCursor
	}
}

func paths(docs []*collections.Document) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.Path
	}
	return out
}

func samePaths(t testing.TB, label string, got, want []*collections.Document) {
	t.Helper()
	g, w := paths(got), paths(want)
	if !slices.Equal(g, w) {
		t.Errorf("%s:\n got  %d %v\n want %d %v", label, len(g), g, len(w), w)
	}
}

// checkQuery compares paging through q with the brute-force result.
func checkQuery(t testing.TB, s *Store, label string, q collections.Query) []*collections.Document {
	t.Helper()
	got := pageAll(t, s, q)
	want := bruteForce(t, s, q)
	samePaths(t, label, got, want)
	return want
}

// explain returns the EXPLAIN QUERY PLAN details of a query, one per line.
func explain(t testing.TB, s *Store, sqlText string, args []any) string {
	t.Helper()
	rows, err := s.rdb.Query("EXPLAIN QUERY PLAN "+sqlText, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", sqlText, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// planOf explains the SQL the engine runs for q, optionally continuing
// after cur.
func planOf(t testing.TB, s *Store, q collections.Query, cur *collections.Cursor) string {
	t.Helper()
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	p, ok := planQuery(testDB, &q)
	if !ok {
		t.Fatalf("query %+v has no SQL plan", q)
	}
	cond := ""
	if cur != nil {
		cond = p.after(cur)
	}
	return explain(t, s, p.sql(cond, q.Limit+1), p.args)
}

func indexName(t testing.TB, ix collections.Index) string {
	t.Helper()
	defs, err := indexDefs([]collections.Index{ix})
	if err != nil {
		t.Fatal(err)
	}
	return defs[0].name
}

func loomIndexes(t testing.TB, s *Store) []string {
	t.Helper()
	rows, err := s.rdb.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'loomix%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

var (
	tasksIndex    = collections.Index{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"chatId"}}
	messagesIndex = collections.Index{Collection: "users/*/orch-chats/*/messages", Fields: []string{"createdAt"}}
)

// seedChats writes tasks and messages spread over users and chats.
func seedChats(t testing.TB, s *Store, n int) {
	t.Helper()
	var ws []collections.Write
	for i := range n {
		u, c := i%5, i%7
		ws = append(ws,
			create(fmt.Sprintf("users/u%d/orch-chats/c%d/tasks/t%04d", u, c, i), obj(t, fmt.Sprintf(`{"chatId":"c%d","n":%d}`, c, i))),
			create(fmt.Sprintf("users/u%d/orch-chats/c%d/messages/m%04d", u, c, i), obj(t, fmt.Sprintf(`{"chatId":"c%d","n":%d}`, c, i))))
	}
	commitAll(t, s, ws)
}

// TestDeclaredIndexesAreUsed checks that SQLite's planner picks the declared
// (partial expression) indexes for the SQL the engine generates, first pages
// and continuations alike, and that the built-in indexes serve plain listings
// instead of a scan of the whole database.
func TestDeclaredIndexesAreUsed(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, Indexes: []collections.Index{tasksIndex, messagesIndex}})
	seedChats(t, s, 300)
	tasksIx, msgsIx := indexName(t, tasksIndex), indexName(t, messagesIndex)
	if got := loomIndexes(t, s); !slices.Equal(got, slices.Sorted(slices.Values([]string{tasksIx, msgsIx}))) {
		t.Fatalf("indexes %v, want %s and %s", got, tasksIx, msgsIx)
	}

	eqC1 := []collections.Filter{{Field: "chatId", Op: collections.OpEq, Value: "c1"}}
	byCreatedDesc := []collections.Order{{Field: "createdAt", Direction: "desc"}}
	for _, tc := range []struct {
		name   string
		q      collections.Query
		cur    *collections.Cursor
		index  string
		sorted bool // the index yields the whole ORDER BY (no temp b-tree)
	}{
		{name: "GroupEquality", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: eqC1, Limit: 10},
			index: tasksIx, sorted: true},
		{name: "GroupEqualityContinued", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: eqC1, Limit: 10},
			cur: &collections.Cursor{Path: "users/u1/orch-chats/c1/tasks/t0008", Values: []collections.CursorValue{}}, index: tasksIx, sorted: true},
		{name: "CollectionEquality", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Filters: eqC1, Limit: 10},
			index: tasksIx, sorted: true},
		{name: "GroupOrderByCreatedAtDesc", q: collections.Query{Collection: "users/*/orch-chats/*/messages", OrderBy: byCreatedDesc, Limit: 10},
			index: msgsIx},
		{name: "GroupOrderByCreatedAtDescContinued", q: collections.Query{Collection: "users/*/orch-chats/*/messages", OrderBy: byCreatedDesc, Limit: 10},
			cur: &collections.Cursor{Path: "users/u1/orch-chats/c1/messages/m0001", Values: []collections.CursorValue{{Value: int64(1)}}}, index: msgsIx},
		{name: "GroupOrderByCreatedAtAsc", q: collections.Query{Collection: "users/*/orch-chats/*/messages", OrderBy: []collections.Order{{Field: "createdAt"}}, Limit: 10},
			index: msgsIx, sorted: true},
		// Without a declared index, listings use the built-in indexes.
		{name: "GroupListing", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Limit: 10},
			index: "docs_shape", sorted: true},
		{name: "CollectionListing", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Limit: 10},
			index: "docs_collection", sorted: true},
		{name: "CollectionListingOtherFilter", q: collections.Query{Collection: "users/u1/orch-chats/c1/messages", Filters: []collections.Filter{{Field: "n", Op: collections.OpGt, Value: int64(3)}}, Limit: 10},
			index: "docs_collection", sorted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planOf(t, s, tc.q, tc.cur)
			if !strings.Contains(plan, "USING INDEX "+tc.index+" ") {
				t.Errorf("plan does not use %s:\n%s", tc.index, plan)
			}
			if tc.sorted && strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("plan sorts although %s yields the order:\n%s", tc.index, plan)
			}
			if strings.Contains(plan, "SCAN ") {
				t.Errorf("plan scans:\n%s", plan)
			}
			if tc.cur == nil {
				q := tc.q
				q.Limit = 7
				checkQuery(t, s, "results", q)
			}
		})
	}

	// ChangedSince (RxDB pull) must seek docs_changed, not scan.
	plan := explain(t, s, `SELECT `+docColumns+` FROM docs
		WHERE db = ?1 AND collection = ?2 AND (seq > ?3 OR (seq = ?3 AND id > ?4))
		ORDER BY seq, id LIMIT ?5`, []any{testDB, "users/u1/orch-chats/c1/tasks", 5, "x", 10})
	if !strings.Contains(plan, "USING INDEX docs_changed ") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("changedSince plan:\n%s", plan)
	}

	// The read pool of a reopened store plans the same way.
	s.Close()
	s = mustOpen(t, s.cfg)
	if plan := planOf(t, s, collections.Query{Collection: "users/*/orch-chats/*/tasks", Filters: eqC1}, nil); !strings.Contains(plan, tasksIx) {
		t.Errorf("after reopen, plan does not use %s:\n%s", tasksIx, plan)
	}
}
