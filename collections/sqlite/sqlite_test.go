package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
)

// Engine-specific tests: query plans, reopen, the chunked and Go-sorted query
// paths, close and group-commit behaviour, size limits. The engine-neutral
// contract is covered by TestConformance.

const testDB = "default"

// hangGuard bounds waits that must not hang; it is never a timing assertion.
const hangGuard = 30 * time.Second

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

// planSQL is the SQL and arguments the engine runs for q, optionally
// continuing after cur.
func planSQL(t testing.TB, q collections.Query, cur *collections.Cursor) (string, []any) {
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
	return p.sql(cond, q.Limit+1), p.args
}

// planOf explains the SQL the engine runs for q.
func planOf(t testing.TB, s *Store, q collections.Query, cur *collections.Cursor) string {
	t.Helper()
	sqlText, args := planSQL(t, q, cur)
	return explain(t, s, sqlText, args)
}

// seekOps returns the index seek opcodes (SeekGE, SeekGT, ...) of the
// compiled query: they show which bound a range scan starts from, which
// EXPLAIN QUERY PLAN does not.
func seekOps(t testing.TB, s *Store, q collections.Query, cur *collections.Cursor) []string {
	t.Helper()
	sqlText, args := planSQL(t, q, cur)
	rows, err := s.rdb.Query("EXPLAIN "+sqlText, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ops []string
	for rows.Next() {
		var addr int
		var op string
		var p1, p2, p3, p4, p5, comment any
		if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(op, "Seek") && op != "SeekEnd" && op != "SeekHit" && op != "SeekScan" && op != "SeekRowid" {
			ops = append(ops, op)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// seekKey returns the argument the compiled query's first index seek
// takes its last key column from: for a search ending in a range on path,
// the bound it starts at. EXPLAIN QUERY PLAN names the constrained columns
// but not which of two bounds on one column the seek uses.
func seekKey(t testing.TB, s *Store, q collections.Query, cur *collections.Cursor) any {
	t.Helper()
	sqlText, args := planSQL(t, q, cur)
	rows, err := s.rdb.Query("EXPLAIN "+sqlText, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	param := map[int64]int64{} // register -> parameter number loaded into it
	for rows.Next() {
		var addr int
		var op string
		var p1, p2, p3, p4, p5, comment any
		if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
			t.Fatal(err)
		}
		switch {
		case op == "Variable":
			param[p2.(int64)] = p1.(int64)
		case op == "Copy" || op == "SCopy":
			if n, ok := param[p1.(int64)]; ok {
				param[p2.(int64)] = n
			}
		case strings.HasPrefix(op, "Seek") && op != "SeekEnd" && op != "SeekHit" && op != "SeekScan" && op != "SeekRowid":
			n, _ := strconv.ParseInt(fmt.Sprint(p4), 10, 64)
			reg := p3.(int64) + n - 1
			if i, ok := param[reg]; ok {
				return args[i-1]
			}
			return fmt.Sprintf("register %d (no parameter)", reg)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return nil
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
	peopleIndex   = collections.Index{Collection: "people", Fields: []string{"age"}}
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
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, Indexes: []collections.Index{tasksIndex, messagesIndex, peopleIndex}})
	seedChats(t, s, 300)
	var people []collections.Write
	for i := range 300 {
		people = append(people, create(fmt.Sprintf("people/p%03d", (i*7)%300), obj(t, fmt.Sprintf(`{"age":%d}`, i%90))))
	}
	for u := range 5 {
		// top-level documents whose subcollections hold 600 documents
		people = append(people, create(fmt.Sprintf("users/u%d", u), obj(t, `{"n":1}`)))
	}
	commitAll(t, s, people)
	tasksIx, msgsIx, peopleIx := indexName(t, tasksIndex), indexName(t, messagesIndex), indexName(t, peopleIndex)
	if got := loomIndexes(t, s); !slices.Equal(got, slices.Sorted(slices.Values([]string{tasksIx, msgsIx, peopleIx}))) {
		t.Fatalf("indexes %v, want %s, %s and %s", got, tasksIx, msgsIx, peopleIx)
	}

	eqC1 := []collections.Filter{{Field: "chatId", Op: collections.OpEq, Value: "c1"}}
	byCreatedDesc := []collections.Order{{Field: "createdAt", Direction: "desc"}}
	byAge := []collections.Order{{Field: "age"}}
	ageOver := []collections.Filter{{Field: "age", Op: collections.OpGt, Value: int64(10)}}
	age50 := &collections.Cursor{Path: "people/p100", Values: []collections.CursorValue{{Value: json.Number("50")}}}
	for _, tc := range []struct {
		name   string
		q      collections.Query
		cur    *collections.Cursor
		index  string
		sorted bool   // the index yields the whole ORDER BY (no temp b-tree)
		seek   string // the opcode the range scan starts with, when it matters
		search string // the constraints of the search, when they matter
		// the value the search starts from, when it matters: a
		// continuation seeks to the cursor, not to the start of the
		// collection with every earlier page read again
		seekFrom string
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
		// An index on a top-level collection holds exactly that collection.
		{name: "TopLevelOrderBy", q: collections.Query{Collection: "people", OrderBy: byAge, Limit: 10},
			index: peopleIx, sorted: true},
		// A range on the orderBy field pins its type class; that must not
		// cost a sort of every match.
		{name: "RangeOrderedBySameField", q: collections.Query{Collection: "people", Filters: ageOver, OrderBy: byAge, Limit: 10},
			index: peopleIx, sorted: true, seek: "SeekGT"},
		// ... and a continuation seeks to the cursor (>=), not to the
		// filter's bound (>) with every earlier page re-read.
		{name: "RangeOrderedBySameFieldContinued", q: collections.Query{Collection: "people", Filters: ageOver, OrderBy: byAge, Limit: 10},
			cur: age50, index: peopleIx, sorted: true, seek: "SeekGE"},
		{name: "GroupRangeOrderedBySameField", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Limit: 10,
			Filters: []collections.Filter{{Field: "chatId", Op: collections.OpGe, Value: "c3"}}, OrderBy: []collections.Order{{Field: "chatId"}}},
			index: tasksIx, sorted: true},
		// Without a declared index, listings use the built-in indexes.
		{name: "GroupListing", q: collections.Query{Collection: "users/*/orch-chats/*/tasks", Limit: 10},
			index: "docs_shape", sorted: true},
		// A concrete collection is read from docs_shape: a nested one with
		// its path range, a top-level one (its own shape) with the shape
		// alone. Neither steps over another collection's documents or its
		// subcollections' (they have other shapes): the search names only
		// the shape and the range.
		{name: "CollectionListing", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Limit: 10},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)"},
		{name: "CollectionListingOtherFilter", q: collections.Query{Collection: "users/u1/orch-chats/c1/messages", Filters: []collections.Filter{{Field: "n", Op: collections.OpGt, Value: int64(3)}}, Limit: 10},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)"},
		{name: "CollectionListingContinued", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Limit: 10},
			cur:   &collections.Cursor{Path: "users/u1/orch-chats/c1/tasks/t0008", Values: []collections.CursorValue{}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)", seekFrom: "users/u1/orch-chats/c1/tasks/t0008"},
		{name: "CollectionOrderByUpdatedAt", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", OrderBy: []collections.Order{{Field: collections.FieldUpdatedAt, Direction: "desc"}}, Limit: 10},
			index: "docs_shape", search: "(db=? AND shape=? AND path>? AND path<?)"},
		// A filter on the collection field is the same path range.
		{name: "GroupCollectionFieldEquality", q: collections.Query{Collection: "users/*/orch-chats/*/messages", Limit: 10,
			Filters: []collections.Filter{{Field: collections.FieldCollection, Op: collections.OpEq, Value: "users/u1/orch-chats/c1/messages"}}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)"},
		{name: "WildcardCollectionFieldEquality", q: collections.Query{Collection: "*/u1/orch-chats/*/tasks", Limit: 10,
			Filters: []collections.Filter{{Field: collections.FieldCollection, Op: collections.OpEq, Value: "users/u1/orch-chats/c1/tasks"}}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)"},
		{name: "CollectionFieldIn", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Limit: 10,
			Filters: []collections.Filter{{Field: collections.FieldCollection, Op: collections.OpIn, Value: []any{"users/u1/orch-chats/c1/tasks", "users/u2/orch-chats/c2/tasks"}}}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)"},
		// Ordering one collection by the collection field orders by path,
		// and a continuation seeks to the cursor's path.
		{name: "CollectionOrderByCollectionContinued", q: collections.Query{Collection: "users/u1/orch-chats/c1/tasks", Limit: 10,
			OrderBy: []collections.Order{{Field: collections.FieldCollection}}},
			cur:   &collections.Cursor{Path: "users/u1/orch-chats/c1/tasks/t0008", Values: []collections.CursorValue{{Value: "users/u1/orch-chats/c1/tasks"}}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>? AND path<?)", seekFrom: "users/u1/orch-chats/c1/tasks/t0008"},
		{name: "TopLevelListing", q: collections.Query{Collection: "users", Limit: 10},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=?)"},
		{name: "TopLevelListingContinued", q: collections.Query{Collection: "users", Limit: 10},
			cur:   &collections.Cursor{Path: "users/u2", Values: []collections.CursorValue{}},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=? AND path>?)"},
		{name: "TopLevelOrderByID", q: collections.Query{Collection: "users", OrderBy: []collections.Order{{Field: collections.FieldID}}, Limit: 10},
			index: "docs_shape", search: "(db=? AND shape=?)"},
		{name: "TopLevelOtherFilter", q: collections.Query{Collection: "people", Filters: []collections.Filter{{Field: "other", Op: collections.OpEq, Value: "x"}}, Limit: 10},
			index: "docs_shape", sorted: true, search: "(db=? AND shape=?)"},
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
			if tc.search != "" && !strings.Contains(plan, "USING INDEX "+tc.index+" "+tc.search) {
				t.Errorf("plan does not search %s %s:\n%s", tc.index, tc.search, plan)
			}
			if tc.seekFrom != "" {
				if got := seekKey(t, s, tc.q, tc.cur); got != tc.seekFrom {
					t.Errorf("the search starts from %q, want %q", got, tc.seekFrom)
				}
			}
			if tc.seek != "" {
				if ops := seekOps(t, s, tc.q, tc.cur); !slices.Equal(ops, []string{tc.seek}) {
					t.Errorf("seeks %v, want [%s]", ops, tc.seek)
				}
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

// TestReopen checks that Open drops indexes no longer declared and builds new
// ones, and that seqs continue after a reopen, also when retention purged the
// whole change log and the tombstones.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	ixA := collections.Index{Collection: "items", Fields: []string{"a"}}
	ixB := collections.Index{Collection: "items", Fields: []string{"b", "c"}}
	ixC := collections.Index{Collection: "users/*/things", Fields: []string{"c"}}
	nameA, nameB, nameC := indexName(t, ixA), indexName(t, ixB), indexName(t, ixC)
	sorted := func(s ...string) []string { return slices.Sorted(slices.Values(s)) }

	cfg := Config{Path: path, PurgeInterval: -1, Retention: time.Millisecond, Indexes: []collections.Index{ixA, ixB}}
	s := mustOpen(t, cfg)
	if got := loomIndexes(t, s); !slices.Equal(got, sorted(nameA, nameB)) {
		t.Fatalf("first open: indexes %v, want %v", got, sorted(nameA, nameB))
	}
	var ws []collections.Write
	for i := range 20 {
		ws = append(ws, create(fmt.Sprintf("items/i%02d", i), obj(t, fmt.Sprintf(`{"a":%d,"b":"x","c":%d}`, i, i%3))))
	}
	mustCommit(t, s, ws...)
	mustCommit(t, s, collections.Write{Type: collections.WriteDelete, Path: "items/i00"})
	head := mustHead(t, s)
	if head != 21 {
		t.Fatalf("head %d, want 21", head)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen with A dropped and C added.
	cfg.Indexes = []collections.Index{ixB, ixC}
	s = mustOpen(t, cfg)
	if got := loomIndexes(t, s); !slices.Equal(got, sorted(nameB, nameC)) {
		t.Fatalf("reopen: indexes %v, want %v", got, sorted(nameB, nameC))
	}
	var stale int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM sqlite_stat1 WHERE idx = ?`, nameA).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("statistics of the dropped index: %d rows, err %v", stale, err)
	}
	if got := mustHead(t, s); got != head {
		t.Fatalf("head after reopen %d, want %d", got, head)
	}
	res := mustCommit(t, s, create("users/u1/things/t1", obj(t, `{"c":1}`)))
	if res[0].Doc.Seq != head+1 {
		t.Fatalf("first seq after reopen %d, want %d", res[0].Doc.Seq, head+1)
	}
	head++
	checkQuery(t, s, "query on the new index", collections.Query{Collection: "users/*/things", Filters: []collections.Filter{{Field: "c", Op: collections.OpEq, Value: int64(1)}}, Limit: 5})
	checkQuery(t, s, "query on the dropped index", collections.Query{Collection: "items", OrderBy: []collections.Order{{Field: "a", Direction: "desc"}}, Limit: 3})

	// Let retention (1ms) purge the whole change log and the tombstone.
	deadline := time.Now().Add(hangGuard)
	for {
		if err := s.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		var changes, docs int
		if err := s.rdb.QueryRow(`SELECT (SELECT COUNT(*) FROM changes), (SELECT COUNT(*) FROM docs WHERE deleted = 1)`).Scan(&changes, &docs); err != nil {
			t.Fatal(err)
		}
		if changes == 0 && docs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("purge left %d changes and %d tombstones", changes, docs)
		}
		time.Sleep(5 * time.Millisecond) // retention is measured in wall-clock milliseconds
	}
	if _, err := s.ReadChanges(ctx, 0, 10); !errors.Is(err, collections.ErrPositionExpired) {
		t.Fatalf("ReadChanges(0) after purge: %v, want ErrPositionExpired", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, cfg)
	if got := mustHead(t, s); got != head {
		t.Fatalf("head after purge and reopen %d, want %d", got, head)
	}
	// Recreate the purged tombstone's path and write another document: seqs
	// continue, nothing is reused.
	res = mustCommit(t, s, create("items/i00", obj(t, `{"a":0}`)), create("items/new", nil))
	for i, r := range res {
		if want := head + 1 + int64(i); r.Doc.Seq != want {
			t.Errorf("write %d: seq %d, want %d", i, r.Doc.Seq, want)
		}
	}
	if got := mustHead(t, s); got != head+2 {
		t.Errorf("head %d, want %d", got, head+2)
	}
	changes, err := s.ReadChanges(ctx, head, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || changes[0].Seq != head+1 || changes[0].Path != "items/i00" || changes[1].Seq != head+2 {
		t.Errorf("changes after %d: %+v", head, changes)
	}
	docs, err := s.ChangedSince(ctx, testDB, "items", collections.Checkpoint{Seq: head}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(docs); !slices.Equal(got, []string{"items/i00", "items/new"}) {
		t.Errorf("ChangedSince after the old head: %v", got)
	}
}

// TestGoFiltersAcrossChunks runs queries whose filters SQL cannot apply over
// more rows than one chunk, with the few matches near the end, and pages
// through them to exhaustion.
func TestGoFiltersAcrossChunks(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	const n = 3000
	special := map[int]bool{}
	for _, i := range []int{7, 2987, 2990, 2991, 2993, 2995, 2996, 2997, 2998, 2999} {
		special[i] = true
	}
	var ws []collections.Write
	for i := range n {
		// Paths are not in n order, so path order and field order differ.
		path := fmt.Sprintf("items/%04d", (i*7919)%n)
		data := fmt.Sprintf(`{"n":%d,"color":"grey","kind":"common","tags":["a","b"]}`, i)
		if special[i] {
			data = fmt.Sprintf(`{"n":%d,"color":"%s","tags":["a","hot"],"group":%d}`, i, []string{"red", "blue"}[i%2], i%3)
		}
		ws = append(ws, create(path, obj(t, data)))
	}
	// Other collections share the table but never match.
	ws = append(ws, create("other/x", obj(t, `{"n":2999,"color":"red","tags":["hot"]}`)))
	commitAll(t, s, ws)
	if len(bruteForce(t, s, collections.Query{Collection: "items"})) != n {
		t.Fatal("seed failed")
	}

	byN := []collections.Order{{Field: "n"}}
	byNDesc := []collections.Order{{Field: "n", Direction: "desc"}}
	for _, tc := range []struct {
		name string
		q    collections.Query
		want int
	}{
		{"In", collections.Query{Collection: "items", OrderBy: byN,
			Filters: []collections.Filter{{Field: "color", Op: collections.OpIn, Value: []any{"red", "blue"}}}}, 10},
		{"InPathOrder", collections.Query{Collection: "items",
			Filters: []collections.Filter{{Field: "color", Op: collections.OpIn, Value: []any{"blue"}}}}, 7},
		{"ArrayContainsDesc", collections.Query{Collection: "items", OrderBy: byNDesc,
			Filters: []collections.Filter{{Field: "tags", Op: collections.OpArrayContains, Value: "hot"}}}, 10},
		{"NotEqual", collections.Query{Collection: "items", OrderBy: byN,
			Filters: []collections.Filter{{Field: "kind", Op: collections.OpNe, Value: "common"}}}, 10},
		{"NotIn", collections.Query{Collection: "items", OrderBy: byNDesc,
			Filters: []collections.Filter{{Field: "color", Op: collections.OpNotIn, Value: []any{"grey", "red"}}}}, 7},
		{"ArrayContainsAnyAndRange", collections.Query{Collection: "items", OrderBy: byN,
			Filters: []collections.Filter{
				{Field: "tags", Op: collections.OpArrayContainsAny, Value: []any{"hot", "cold"}},
				{Field: "n", Op: collections.OpGe, Value: int64(2990)},
			}}, 8},
		{"NotEqualOnMissingOrderedByIt", collections.Query{Collection: "items", OrderBy: []collections.Order{{Field: "group", Direction: "desc"}, {Field: "n"}},
			Filters: []collections.Filter{{Field: "kind", Op: collections.OpNe, Value: "common"}}}, 10},
		{"GroupPattern", collections.Query{Collection: "*", OrderBy: byNDesc,
			Filters: []collections.Filter{{Field: "color", Op: collections.OpEq, Value: "red"}, {Field: "tags", Op: collections.OpArrayContains, Value: "hot"}}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := bruteForce(t, s, tc.q)
			if len(want) != tc.want {
				t.Fatalf("reference has %d docs, the test expects %d", len(want), tc.want)
			}
			for _, limit := range []int{5, 3} {
				q := tc.q
				q.Limit = limit
				samePaths(t, fmt.Sprintf("limit %d", limit), pageAll(t, s, q), want)
			}
		})
	}
}

// TestGoSortFallback covers orderBy fields that have no SQLite JSON path, so
// the engine sorts in Go.
func TestGoSortFallback(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	for _, f := range []string{`a"b`, `c\d`, `it's`, "o.x\"y"} {
		if _, ok := fieldKey(f); ok {
			t.Fatalf("fieldKey(%q) has a SQL form; the test needs one that has not", f)
		}
	}
	vals := []string{``, `null`, `3`, `-1`, `2.5`, `"b"`, `"a"`, `true`, `[1]`, `{}`, `3`, `"a"`, `10`, `9007199254740993`, `9007199254740992`}
	var ws []collections.Write
	for i := range 40 {
		v := vals[(i*11)%len(vals)]
		w := vals[(i*7)%len(vals)]
		data := fmt.Sprintf(`{"k":%d`, i%4)
		if v != "" {
			data += fmt.Sprintf(`,"a\"b":%s,"o":{"x\"y":%s}`, v, v)
		}
		if w != "" {
			data += fmt.Sprintf(`,"c\\d":%s,"it's":%s`, w, w)
		}
		data += "}"
		ws = append(ws, create(fmt.Sprintf("docs/d%02d", (i*13)%40), obj(t, data)))
	}
	mustCommit(t, s, ws...)

	for _, tc := range []struct {
		name string
		q    collections.Query
	}{
		{"Asc", collections.Query{OrderBy: []collections.Order{{Field: `a"b`}}}},
		{"Desc", collections.Query{OrderBy: []collections.Order{{Field: `a"b`, Direction: "desc"}}}},
		{"Nested", collections.Query{OrderBy: []collections.Order{{Field: "o.x\"y", Direction: "desc"}}}},
		{"TwoFields", collections.Query{OrderBy: []collections.Order{{Field: `c\d`}, {Field: `it's`, Direction: "desc"}, {Field: `a"b`}}}},
		{"SQLFieldFirst", collections.Query{OrderBy: []collections.Order{{Field: "k", Direction: "desc"}, {Field: `a"b`}}}},
		{"Filtered", collections.Query{OrderBy: []collections.Order{{Field: `a"b`, Direction: "desc"}},
			Filters: []collections.Filter{{Field: `a"b`, Op: collections.OpGe, Value: int64(0)}, {Field: "k", Op: collections.OpNe, Value: int64(2)}}}},
		{"Deleted", collections.Query{OrderBy: []collections.Order{{Field: `a"b`}}, ShowDeleted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Collection = "docs"
			if _, ok := planQuery(testDB, &q); ok {
				t.Fatal("the query has a SQL order; it must take the Go path")
			}
			for _, limit := range []int{2, 3, 1000} {
				q.Limit = limit
				checkQuery(t, s, fmt.Sprintf("limit %d", limit), q)
			}
		})
		if tc.name == "Filtered" {
			// Tombstones for the ShowDeleted case.
			mustCommit(t, s, collections.Write{Type: collections.WriteDelete, Path: "docs/d00"}, collections.Write{Type: collections.WriteDelete, Path: "docs/d17"})
		}
	}
}

// mixedValues are JSON literals of every type class; "" is a missing field.
// Duplicates and numerically equal literals check path tie-breaks.
var mixedValues = []string{
	``, ``, `null`, `null`, `false`, `true`, `true`,
	`0`, `-0`, `0.0`, `-5`, `3`, `3.0`, `3`, `2.5`, `-1.5`, `0.1`, `1e-300`, `1E2`, `100`,
	`1e300`, `-1e300`, `1e400`, `-1e400`,
	`9007199254740992`, `9007199254740993`, `9007199254740992.0`, `9007199254740993.0`,
	`9223372036854775807`, `-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`,
	`12345678901234567890`, `12345678901234567891`, `-99999999999999999999`,
	`""`, `"a"`, `"a"`, `"B"`, `"é"`, `"e\u0301"`, `"a\u0000b"`, `"a b"`, `"\u00ff"`, `"😀"`, `"\uffff"`, `"10"`,
	`[]`, `[1]`, `["x"]`, `{}`, `{"k":1}`, `{"k":[1,2]}`,
}

// TestMixedTypeOrder checks that SQL ordering and cursors over fields of
// mixed types agree exactly with collections.CompareDocs.
func TestMixedTypeOrder(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, Indexes: []collections.Index{
		{Collection: "indexed", Fields: []string{"v"}},
		{Collection: "indexed", Fields: []string{"w", "v"}},
	}})
	var ws []collections.Write
	m := len(mixedValues)
	for i, v := range mixedValues {
		w := mixedValues[(i*17+5)%m]
		data := `{"i":` + fmt.Sprint(i)
		if v != "" {
			data += `,"v":` + v + `,"o":{"v":` + v + `}`
		}
		if w != "" {
			data += `,"w":` + w
		}
		data += "}"
		id := fmt.Sprintf("d%02d", (i*29)%m) // path order unrelated to value order
		ws = append(ws, create("plain/"+id, obj(t, data)), create("indexed/"+id, obj(t, data)))
	}
	mustCommit(t, s, ws...)

	orders := map[string][]collections.Order{
		"Asc":      {{Field: "v"}},
		"Desc":     {{Field: "v", Direction: "desc"}},
		"Nested":   {{Field: "o.v", Direction: "desc"}},
		"TwoAsc":   {{Field: "w"}, {Field: "v"}},
		"DescAsc":  {{Field: "w", Direction: "desc"}, {Field: "v"}},
		"AscDesc":  {{Field: "w"}, {Field: "v", Direction: "desc"}},
		"Envelope": {{Field: "createdAt", Direction: "desc"}, {Field: "v", Direction: "desc"}},
	}
	filters := map[string][]collections.Filter{
		"All":       nil,
		"Numbers":   {{Field: "v", Op: collections.OpGt, Value: int64(-1 << 62)}},
		"Strings":   {{Field: "v", Op: collections.OpGe, Value: ""}},
		"NotNull":   {{Field: "v", Op: collections.OpNe, Value: nil}},
		"Null":      {{Field: "v", Op: collections.OpEq, Value: nil}},
		"BigEq":     {{Field: "v", Op: collections.OpEq, Value: uint64(9007199254740993)}},
		"BigNumEq":  {{Field: "v", Op: collections.OpGe, Value: json.Number("9007199254740993")}},
		"HugeNum":   {{Field: "v", Op: collections.OpLe, Value: json.Number("12345678901234567890")}},
		"FloatEq":   {{Field: "v", Op: collections.OpEq, Value: 3.0}},
		"BoolLe":    {{Field: "v", Op: collections.OpLe, Value: true}},
		"Prefix":    {{Field: "v", Op: collections.OpPrefix, Value: "a"}},
		"WThenV":    {{Field: "w", Op: collections.OpLt, Value: "zzz"}, {Field: "v", Op: collections.OpIn, Value: []any{int64(3), "a", nil, true}}},
		"HugeRange": {{Field: "v", Op: collections.OpLt, Value: 1e301}},
	}
	for _, coll := range []string{"plain", "indexed"} {
		for oname, order := range orders {
			for fname, fs := range filters {
				t.Run(coll+"/"+oname+"/"+fname, func(t *testing.T) {
					q := collections.Query{Collection: coll, OrderBy: order, Filters: fs}
					if _, ok := planQuery(testDB, &q); !ok {
						t.Fatal("expected a SQL plan")
					}
					q.Limit = 2
					checkQuery(t, s, "limit 2", q)
					q.Limit = 1000
					checkQuery(t, s, "limit 1000", q)
				})
			}
		}
	}
}

// TestClose checks ErrClosed after Close.
func TestClose(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	mustCommit(t, s, create("a/1", nil))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, err := s.Commit(ctx, testDB, []collections.Write{create("a/2", nil)}, collections.CommitOptions{}); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
	if err := s.SetCursor(ctx, "c", 1); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("SetCursor after Close: %v", err)
	}
	if err := s.Purge(ctx); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("Purge after Close: %v", err)
	}
	if _, err := s.Get(ctx, testDB, "a/1"); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := s.Query(ctx, testDB, collections.Query{Collection: "a", Limit: 1}); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("Query after Close: %v", err)
	}
	if err := s.Ready(ctx); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("Ready after Close: %v", err)
	}
}

// waitOrFail waits for ch; the timeout only guards against a hang.
func waitOrFail(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("%s did not finish within %s", what, hangGuard)
	}
}

// TestCloseRacingCommits closes the store while writers commit: each commit
// either succeeds, and is then durable, or fails with ErrClosed and wrote
// nothing. Nothing hangs.
func TestCloseRacingCommits(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Path: tempPath(t), PurgeInterval: -1}
	s := mustOpen(t, cfg)
	const writers = 16
	var (
		mu        sync.Mutex
		committed []string
		refused   []string
		count     atomic.Int64
		enough    = make(chan struct{})
		wg        sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				path := fmt.Sprintf("race/w%02d-%05d", w, i)
				writes := []collections.Write{create(path, map[string]any{"w": w, "i": i})}
				_, err := s.Commit(ctx, testDB, writes, collections.CommitOptions{})
				mu.Lock()
				switch {
				case err == nil:
					committed = append(committed, path)
				case errors.Is(err, collections.ErrClosed):
					refused = append(refused, path)
				default:
					t.Errorf("commit %s: %v", path, err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				if count.Add(1) == 200 {
					close(enough)
				}
			}
		})
	}
	waitOrFail(t, enough, "200 commits")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	waitOrFail(t, closed, "Close")
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	waitOrFail(t, writersDone, "writers")
	if len(refused) != writers {
		t.Fatalf("%d writers saw ErrClosed, want %d", len(refused), writers)
	}

	s = mustOpen(t, cfg)
	if h := mustHead(t, s); h != int64(len(committed)) {
		t.Errorf("head %d after reopen, %d commits succeeded", h, len(committed))
	}
	for _, p := range committed {
		if _, err := s.Get(ctx, testDB, p); err != nil {
			t.Errorf("committed %s: %v", p, err)
		}
	}
	for _, p := range refused {
		if _, err := s.Get(ctx, testDB, p); !errors.Is(err, collections.ErrNotFound) {
			t.Errorf("refused %s: Get says %v, want ErrNotFound", p, err)
		}
	}
	if n := len(allDocs(t, s, testDB)); n != len(committed) {
		t.Errorf("%d documents stored, %d commits succeeded", n, len(committed))
	}
}

// TestCloseFlushesQueuedCommits: commits already handed to the committer
// when Close is called are committed, reported as successes and durable.
// The committer is held in BEGIN (one request taken: MaxBatch 1) while the
// others wait in its queue; Close is called, then the lock released.
func TestCloseFlushesQueuedCommits(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Path: tempPath(t), PurgeInterval: -1, MaxBatch: 1}
	s := mustOpen(t, cfg)
	release := holdWriteLock(t, cfg.Path)
	n := 1 + cap(s.q.C) // one in the blocked batch, the queue full
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Commit(ctx, testDB, []collections.Write{create(fmt.Sprintf("q/%d", i), nil)}, collections.CommitOptions{})
		})
	}
	waitFor(t, "requests queued behind the blocked committer", func() bool { return len(s.q.C) == n-1 })
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	waitFor(t, "Close to stop the committer", func() bool {
		select {
		case <-s.q.Stop:
			return true
		default:
			return false
		}
	})
	release()
	waitOrFail(t, closed, "Close")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitOrFail(t, done, "commits")
	for i, err := range errs {
		if err != nil {
			t.Errorf("commit %d queued before Close: %v", i, err)
		}
	}
	s = mustOpen(t, cfg)
	if h := mustHead(t, s); h != int64(n) {
		t.Errorf("head %d after reopen, want %d", h, n)
	}
}

// waitFor polls cond until it holds; the deadline only guards against a
// hang (and stays inside SQLite's 10s busy timeout).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentClose: of two racing Closes exactly one succeeds.
func TestConcurrentClose(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Close() }()
	}
	var ok, closed int
	for range 2 {
		select {
		case err := <-errs:
			switch {
			case err == nil:
				ok++
			case errors.Is(err, collections.ErrClosed):
				closed++
			default:
				t.Errorf("Close: %v", err)
			}
		case <-time.After(hangGuard):
			t.Fatal("Close hangs")
		}
	}
	if ok != 1 || closed != 1 {
		t.Errorf("%d Closes succeeded and %d saw ErrClosed, want 1 and 1", ok, closed)
	}
}

// holdWriteLock takes SQLite's write lock on path from another connection
// until the returned function is called; the engine's committer blocks in
// BEGIN IMMEDIATE meanwhile (busy timeout 10s).
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func batchHistogram(t *testing.T, reg *prometheus.Registry) (count, sum uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "loom_sqlite_commit_batch_requests" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), uint64(h.GetSampleSum())
		}
	}
	t.Fatal("loom_sqlite_commit_batch_requests not registered")
	return 0, 0
}

// TestGroupCommit runs 64 writers of 50 single-document commits each. The
// committer is held in BEGIN until at least two requests wait in its queue:
// whenever two requests are queued at once they land in the same batch (the
// committer drains the queue after taking one request), so at least one
// batch holds more than one request: a structural property, not a timing one.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	reg := prometheus.NewRegistry()
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1, Registerer: reg})
	release := holdWriteLock(t, path)

	const writers, each = 64, 50
	var wg sync.WaitGroup
	var started atomic.Int32 // writers inside their first Commit
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				p := fmt.Sprintf("gc/w%02d-%02d", w, i)
				if i == 0 {
					started.Add(1)
				}
				if _, err := s.Commit(ctx, testDB, []collections.Write{create(p, nil)}, collections.CommitOptions{}); err != nil {
					errs <- fmt.Errorf("%s: %w", p, err)
				}
			}
		})
	}
	// No commit can finish while the lock is held, so every writer's first
	// request waits on the blocked committer, in its batch or queued behind
	// it. (Waiting for a queue length instead hung until the busy timeout
	// when one batch took them all.)
	waitFor(t, "every writer to start its first commit", func() bool { return started.Load() == writers })
	release()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitOrFail(t, done, "writers")
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if h := mustHead(t, s); h != writers*each {
		t.Errorf("head %d, want %d", h, writers*each)
	}
	changes, err := s.ReadChanges(ctx, 0, writers*each+1)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, c := range changes {
		if c.Seq != int64(i+1) || c.Op != collections.OpCreate || seen[c.Path] {
			t.Fatalf("change %d: seq %d op %s path %s (seen %v)", i, c.Seq, c.Op, c.Path, seen[c.Path])
		}
		seen[c.Path] = true
	}
	if len(changes) != writers*each {
		t.Errorf("%d changes, want %d", len(changes), writers*each)
	}
	count, sum := batchHistogram(t, reg)
	if sum != writers*each {
		t.Errorf("batch histogram sum %d, want %d requests", sum, writers*each)
	}
	if count >= sum {
		t.Errorf("%d batches for %d requests: no group commit", count, sum)
	}
	t.Logf("%d requests in %d batches (average %.1f)", sum, count, float64(sum)/float64(count))
}

// TestMaxDocumentBytes checks the size limit on create, replace and on a
// patch that grows a document: ErrTooLarge as a *WriteError, nothing written.
func TestMaxDocumentBytes(t *testing.T) {
	ctx := context.Background()
	const limit = 100
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, MaxDocumentBytes: limit})
	// {"s":"…"} encodes to 8 bytes plus the string.
	str := func(n int) map[string]any { return map[string]any{"s": strings.Repeat("x", n)} }
	mustCommit(t, s, create("d/exact", str(limit-8)))
	mustCommit(t, s, create("d/small", obj(t, `{"s":"x"}`)))
	head := mustHead(t, s)
	before := allDocs(t, s, testDB)

	for _, tc := range []struct {
		name   string
		writes []collections.Write
		index  int
	}{
		{"Create", []collections.Write{create("d/big", str(limit-7))}, 0},
		{"CreateAfterGood", []collections.Write{create("d/ok", nil), create("d/big", str(10*limit))}, 1},
		{"Replace", []collections.Write{{Type: collections.WriteReplace, Path: "d/small", Data: str(limit)}}, 0},
		{"Upsert", []collections.Write{{Type: collections.WriteReplace, Path: "d/new", Data: str(limit)}}, 0},
		{"PatchGrows", []collections.Write{{Type: collections.WriteUpdate, Path: "d/small", Data: obj(t, `{"t":"`+strings.Repeat("y", limit-10)+`"}`)}}, 0},
		{"PatchGrowsNested", []collections.Write{
			{Type: collections.WriteUpdate, Path: "d/small", Data: obj(t, `{"n":1}`)},
			{Type: collections.WriteUpdate, Path: "d/exact", Data: obj(t, `{"a.b":1}`)},
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Commit(ctx, testDB, tc.writes, collections.CommitOptions{})
			var we *collections.WriteError
			if !errors.As(err, &we) || !errors.Is(err, collections.ErrTooLarge) {
				t.Fatalf("err %v (%T), want a *WriteError wrapping ErrTooLarge", err, err)
			}
			if we.Index != tc.index || we.Path != tc.writes[tc.index].Path {
				t.Errorf("WriteError names write %d (%s), want %d (%s)", we.Index, we.Path, tc.index, tc.writes[tc.index].Path)
			}
			if h := mustHead(t, s); h != head {
				t.Errorf("head %d, want %d", h, head)
			}
			after := allDocs(t, s, testDB)
			if len(after) != len(before) {
				t.Fatalf("%d documents, want %d", len(after), len(before))
			}
			for i := range after {
				if after[i].Path != before[i].Path || after[i].Version != before[i].Version || !collections.Equal(after[i].Data, before[i].Data) {
					t.Errorf("document changed: %+v, was %+v", after[i], before[i])
				}
			}
		})
	}
	// Shrinking back under the limit works, and the limit is on the whole
	// document: a patch to exactly the limit is accepted.
	res := mustCommit(t, s, collections.Write{Type: collections.WriteUpdate, Path: "d/small", Data: obj(t, `{"s":"`+strings.Repeat("z", limit-8)+`"}`)})
	if res[0].Doc.Version != 2 || mustHead(t, s) != head+1 {
		t.Errorf("patch to the limit: version %d head %d", res[0].Doc.Version, mustHead(t, s))
	}
}
