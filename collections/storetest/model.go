package storetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/loomdb/loom/collections"
)

// reference answers q by brute force over docs with the package's reference
// evaluator: Matches, then CompareDocs order, then the cursor. It returns
// every matching document after the cursor (no limit).
func reference(docs []*collections.Document, q collections.Query) []*collections.Document {
	var c *collections.Cursor
	if q.StartAfter != "" {
		var err error
		if c, err = collections.DecodeCursor(q.StartAfter, q.OrderBy); err != nil {
			panic("storetest: reference with a bad cursor: " + err.Error())
		}
	}
	var out []*collections.Document
	for _, d := range docs {
		if q.Matches(d) && (c == nil || c.After(q.OrderBy, d)) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *collections.Document) int { return collections.CompareDocs(q.OrderBy, a, b) })
	return out
}

var (
	modelCollections = []string{"m/a/items", "m/b/items", "items", "m/a/other", "m/a/items/d01/deep", "items-x", "m/a.b/items", "m/a/items.x", "m/a/items-x/d01/deep"}
	modelPatterns    = []string{"m/a/items", "m/b/items", "items", "m/*/items", "m/a/*", "*", "m/*/other", "m/*/*", "m/a/items/d01/deep", "m/*/items/*/deep", "nope", "items-x", "m/a.b/items", "m/a/items.x"}
	modelFields      = []string{"collection", "collection", "a", "b", "n", "s", "tags", "c", "c.d", "c.e", "id", "version", "createdAt", "missing"}
	modelOrderFields = []string{"collection", "collection", "a", "b", "n", "s", "tags", "c", "c.d", "id", "version", "createdAt", "updatedAt"}
	modelOps         = []collections.Op{"==", "!=", "<", "<=", ">", ">=", "in", "not-in", "array-contains", "array-contains-any", "prefix", "contains"}
	modelIndexes     = func() []collections.Index {
		var ixs []collections.Index
		for _, coll := range []string{"m/*/items", "items", "m/*/other", "m/*/items/*/deep"} {
			for _, f := range []string{"a", "b", "n", "s", "tags", "c", "c.d", "c.e"} {
				ixs = append(ixs, collections.Index{Collection: coll, Fields: []string{f}})
			}
			ixs = append(ixs,
				collections.Index{Collection: coll, Fields: []string{"n", "s"}},
				collections.Index{Collection: coll, Fields: []string{"a", "b"}},
			)
		}
		return ixs
	}()
)

// gen draws document values from small domains so that filters hit: equal
// numbers written differently, integers around 2^53, every type class.
type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g gen) number() any {
	switch g.r.IntN(3) {
	case 0:
		return num(int64(g.r.IntN(7) - 3))
	case 1:
		return json.Number(g.pick("9007199254740992", "9007199254740993", "-9007199254740993", "1000000"))
	}
	return json.Number(g.pick("0.5", "-1.5", "2.0", "1e1", "2.5", "-0"))
}

func (g gen) str() any { return g.pick("", "a", "ab", "abc", "b", "B", "é", "a b", "1", "d01") }

func (g gen) scalar() any {
	switch g.r.IntN(6) {
	case 0, 1:
		return g.number()
	case 2, 3:
		return g.str()
	case 4:
		return g.r.IntN(2) == 0
	}
	return nil
}

func (g gen) value() any {
	switch g.r.IntN(10) {
	case 0, 1:
		arr := make([]any, g.r.IntN(4))
		for i := range arr {
			if g.r.IntN(8) == 0 {
				arr[i] = []any{g.scalar()}
			} else {
				arr[i] = g.scalar()
			}
		}
		return arr
	case 2:
		m := map[string]any{"x": g.scalar()}
		if g.r.IntN(2) == 0 {
			m["y"] = g.scalar()
		}
		return m
	}
	return g.scalar()
}

func (g gen) maybe(m map[string]any, field string, v func() any) {
	if g.r.IntN(5) != 0 {
		m[field] = v()
	}
}

func (g gen) doc() map[string]any {
	m := map[string]any{}
	g.maybe(m, "a", g.value)
	g.maybe(m, "b", g.value)
	g.maybe(m, "n", func() any {
		if g.r.IntN(5) == 0 {
			return g.value()
		}
		return g.number()
	})
	g.maybe(m, "s", func() any {
		if g.r.IntN(5) == 0 {
			return g.value()
		}
		return g.str()
	})
	g.maybe(m, "tags", func() any {
		if g.r.IntN(4) == 0 {
			return g.value()
		}
		tags := make([]any, g.r.IntN(4))
		for i := range tags {
			tags[i] = g.pick("x", "y", "z", "")
		}
		return tags
	})
	g.maybe(m, "c", func() any {
		if g.r.IntN(4) == 0 {
			return g.value()
		}
		c := map[string]any{}
		g.maybe(c, "d", g.value)
		g.maybe(c, "e", g.scalar)
		return c
	})
	return m
}

// filterValue draws a value that suits op (and, for envelope fields, the
// field) so that most filters are valid and many of them match something.
func (g gen) filterValue(field string, op collections.Op, docs []*collections.Document) any {
	one := func() any {
		d := docs[g.r.IntN(len(docs))]
		switch field {
		case "id":
			if g.r.IntN(4) == 0 {
				return g.pick("d00", "d1", "zz", "")
			}
			return d.ID
		case "version":
			return num(int64(g.r.IntN(4)))
		case "createdAt":
			return num(d.CreatedAt + int64(g.r.IntN(3)-1))
		case "collection":
			if g.r.IntN(4) == 0 {
				return g.pick("m/a", "m/a/items/", "items", "m/a/items-x/d01/deep", "m/*/items", "")
			}
			return d.Collection
		}
		if v, ok := collections.Lookup(d, field); ok && g.r.IntN(2) == 0 {
			return v
		}
		return g.value()
	}
	switch op {
	case "<", "<=", ">", ">=":
		for {
			v := one()
			switch collections.TypeClass(v, true) {
			case 2, 3, 4: // bool, number, string
				return v
			}
		}
	case "in", "not-in", "array-contains-any":
		list := make([]any, g.r.IntN(5))
		// Half the lists hold values of one type class (often repeated):
		// an engine may answer those from an index, one value at a time.
		same := g.r.IntN(2) == 0
		for i := range list {
			list[i] = one()
			for try := 0; same && i > 0 && try < 20 && collections.TypeClass(list[i], true) != collections.TypeClass(list[0], true); try++ {
				list[i] = one()
			}
		}
		return list
	case "prefix":
		if v, ok := one().(string); ok && len(v) > 0 && g.r.IntN(2) == 0 {
			// API values are valid UTF-8: never cut a character in two.
			if p := v[:g.r.IntN(len(v)+1)]; utf8.ValidString(p) {
				return p
			}
			return v
		}
		return g.pick("", "a", "ab", "b", "é", "d0", "d1")
	}
	return one()
}

func (g gen) query(docs []*collections.Document) collections.Query {
	q := collections.Query{Collection: g.pick(modelPatterns...), ShowDeleted: g.r.IntN(5) == 0}
	nf := []int{0, 0, 1, 1, 1, 2, 2, 3}[g.r.IntN(8)]
	for i := 0; i < nf; i++ {
		field := g.pick(modelFields...)
		op := modelOps[g.r.IntN(len(modelOps))]
		q.Filters = append(q.Filters, filter(field, op, g.filterValue(field, op, docs)))
	}
	no := []int{0, 1, 1, 2}[g.r.IntN(4)]
	for i := 0; i < no; i++ {
		q.OrderBy = append(q.OrderBy, collections.Order{Field: g.pick(modelOrderFields...), Direction: g.pick("asc", "desc")})
	}
	q.Limit = []int{1, 2, 3, 5, 8, 13, 50, 0}[g.r.IntN(8)]
	return q
}

// testQueryModel seeds random documents and compares many random queries,
// paged through every cursor, with the reference evaluator; once without
// and once with indexes on the queried fields.
func testQueryModel(t *testing.T, f Factory) {
	s := seed(t)
	t.Run("NoIndexes", func(t *testing.T) {
		t.Parallel()
		runQueryModel(t, open(t, f, Options{}), s)
	})
	t.Run("Indexes", func(t *testing.T) {
		t.Parallel()
		runQueryModel(t, open(t, f, Options{Indexes: modelIndexes}), s)
	})
}

func runQueryModel(t *testing.T, h *harness, seed uint64) {
	h.raw = true
	g := gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	perCollection := scale(30, 15)

	// Seed, then update and delete some, keeping the last result per path.
	latest := map[string]*collections.Document{}
	var order []string
	var batch []collections.Write
	flush := func() {
		if len(batch) == 0 {
			return
		}
		for i, r := range h.mustCommit(db, batch...) {
			if _, ok := latest[batch[i].Path]; !ok {
				order = append(order, batch[i].Path)
			}
			latest[batch[i].Path] = r.Doc
		}
		batch = batch[:0]
	}
	for _, coll := range modelCollections {
		for i := 0; i < perCollection; i++ {
			batch = append(batch, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("%s/d%02d", coll, i), Data: g.doc()})
			if len(batch) == 16 {
				flush()
			}
		}
	}
	flush()
	for _, p := range slices.Clone(order) {
		switch g.r.IntN(10) {
		case 0, 1:
			patch := map[string]any{g.pick("a", "n", "c.d", "tags"): g.value()}
			if g.r.IntN(3) == 0 {
				patch[g.pick("b", "s", "c")] = nil
			}
			batch = append(batch, collections.Write{Type: collections.WriteUpdate, Path: p, Data: patch})
		case 2:
			batch = append(batch, collections.Write{Type: collections.WriteReplace, Path: p, Data: g.doc()})
		case 3:
			batch = append(batch, del(p))
		}
		if len(batch) == 16 {
			flush()
		}
	}
	flush()
	var docs []*collections.Document
	for _, p := range order {
		d := latest[p]
		if !d.Deleted {
			got := h.mustGet(db, p)
			if got.Version != d.Version || got.CreatedAt != d.CreatedAt || got.UpdatedAt != d.UpdatedAt || !collections.Equal(got.Data, d.Data) {
				t.Fatalf("Get(%s)=%s, want the last commit result %s", p, docString(got), docString(d))
			}
		}
		docs = append(docs, d)
	}

	queries := scale(300, 80)
	failures := 0
	for i := 0; i < queries && failures < 5; i++ {
		q := g.query(docs)
		if err := q.Normalize(); err != nil {
			t.Fatalf("generated query %s does not normalize: %v", queryString(q), err)
		}
		if msg := h.checkModelQuery(q, docs); msg != "" {
			failures++
			t.Errorf("query %d %s: %s", i, queryString(q), msg)
		}
	}
	if failures > 0 {
		t.Errorf("%d of the random queries disagree with the reference evaluator (seed %d)", failures, seed)
	}
}

// checkModelQuery pages through q and compares every page with the
// reference; it returns a description of the first difference.
func (h *harness) checkModelQuery(q collections.Query, docs []*collections.Document) string {
	want := reference(docs, q)
	pos := 0
	for page := 0; ; page++ {
		res, err := h.query(db, q)
		if err != nil {
			return fmt.Sprintf("page %d: %v", page, err)
		}
		end := min(pos+q.Limit, len(want))
		wantPage := want[pos:end]
		if msg := diffDocs(res.Docs, wantPage); msg != "" {
			return fmt.Sprintf("page %d (after %d docs): %s", page, pos, msg)
		}
		pos = end
		if more := pos < len(want); more != (res.NextCursor != "") {
			return fmt.Sprintf("page %d: NextCursor=%q with %d of %d documents returned", page, res.NextCursor, pos, len(want))
		}
		if res.NextCursor == "" {
			return ""
		}
		c, err := collections.DecodeCursor(res.NextCursor, q.OrderBy)
		if err != nil {
			return fmt.Sprintf("page %d: NextCursor does not decode: %v", page, err)
		}
		if last := res.Docs[len(res.Docs)-1]; c.Path != last.Path {
			return fmt.Sprintf("page %d: NextCursor at %s, want the last document %s", page, c.Path, last.Path)
		}
		q.StartAfter = res.NextCursor
	}
}

func diffDocs(got, want []*collections.Document) string {
	if !slices.Equal(paths(got), paths(want)) {
		return fmt.Sprintf("got %v, want %v", paths(got), paths(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Version != w.Version || g.Deleted != w.Deleted || g.CreatedAt != w.CreatedAt || !collections.Equal(g.Data, w.Data) {
			return fmt.Sprintf("document %d=%s, want %s", i, docString(g), docString(w))
		}
	}
	return ""
}
