package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/loomdb/loom/collections"
)

// Queries run in SQL as a superset prefilter in exact collections.CompareDocs
// order, and the exact filters are applied in Go (collections.Query.Matches).
// A field's sort key is two SQL expressions: its type class (rank) and its
// value within the class, so SQLite orders mixed-type fields the way Compare
// does. Declared indexes are partial expression indexes over exactly these
// expressions, so the planner uses them for both filtering and ordering.

// Type classes, as collections.TypeClass numbers them.
const (
	rankMissing = 0
	rankNull    = 1
	rankBool    = 2
	rankNumber  = 3
	rankString  = 4
)

// sortKey is the SQL form of one field.
type sortKey struct {
	rank      string // rank expression; "" when every document has constRank
	constRank int
	val       string // value expression: NULL for classes without a value order
}

// fieldKey returns the SQL sort key of a field, or false when the field
// cannot be expressed as a SQLite JSON path.
func fieldKey(field string) (sortKey, bool) {
	switch field {
	case collections.FieldID:
		return sortKey{constRank: rankString, val: "id"}, true
	case collections.FieldCollection:
		return sortKey{constRank: rankString, val: "collection"}, true
	case collections.FieldVersion:
		return sortKey{constRank: rankNumber, val: "version"}, true
	case collections.FieldCreatedAt:
		return sortKey{constRank: rankNumber, val: "created_at"}, true
	case collections.FieldUpdatedAt:
		return sortKey{constRank: rankNumber, val: "updated_at"}, true
	case collections.FieldDeleted:
		return sortKey{rank: "(CASE WHEN deleted THEN 2 ELSE 0 END)", val: "(CASE WHEN deleted THEN 1 END)"}, true
	}
	var b strings.Builder
	b.WriteString("'$")
	for seg := range strings.SplitSeq(field, ".") {
		if strings.ContainsAny(seg, "\"\\'") || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 }) {
			return sortKey{}, false
		}
		b.WriteString(`."`)
		b.WriteString(seg)
		b.WriteString(`"`)
	}
	b.WriteString("'")
	p := b.String()
	return sortKey{
		rank: "(CASE json_type(data, " + p + ") WHEN 'null' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 2" +
			" WHEN 'integer' THEN 3 WHEN 'real' THEN 3 WHEN 'text' THEN 4 WHEN 'array' THEN 5 WHEN 'object' THEN 6 ELSE 0 END)",
		val: "(CASE WHEN json_type(data, " + p + ") IN ('array', 'object') THEN NULL ELSE json_extract(data, " + p + ") END)",
	}, true
}

// sqlValue converts a JSON value to its type class and the SQL value that
// orders it within the class.
func sqlValue(v any, present bool) (int, any) {
	class := collections.TypeClass(v, present)
	switch t := v.(type) {
	case bool:
		if t {
			return class, 1
		}
		return class, 0
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return class, i
		}
		f, _ := strconv.ParseFloat(string(t), 64)
		return class, f
	case float64, float32, int, int64, int32, uint32, uint64, string:
		return class, t
	}
	return class, nil
}

// quote makes a SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// shapeLiteral returns the literal shape a pattern's documents have, or
// false when the pattern has a wildcard in place of a collection name (then
// no single shape covers it).
func shapeLiteral(pattern string) (string, bool) {
	for i, seg := range strings.Split(pattern, "/") {
		if i%2 == 0 && seg == "*" {
			return "", false
		}
	}
	return quote(collections.Shape(pattern)), true
}

// indexDef is a declared index as DDL.
type indexDef struct {
	decl collections.Index
	name string
	ddl  string
	stat string // its sqlite_stat1 line (see writeStats)
}

func indexDefs(decls []collections.Index) ([]indexDef, error) {
	var out []indexDef
	seen := map[string]bool{}
	for _, ix := range decls {
		if err := ix.Validate(); err != nil {
			return nil, err
		}
		shape, ok := shapeLiteral(ix.Collection)
		if !ok {
			return nil, fmt.Errorf("index on %q: use * only in place of document ids", ix.Collection)
		}
		// stat: the index covers one shape, which is one collection for a
		// top-level collection (as many rows as a collection has in the
		// docs_changed estimate) and many for nested ones (as many as
		// docs_shape's); db and a type
		// class select nothing, the first field's value selects about 10
		// rows, further values and the path about 1.
		rows := "10000"
		if !strings.Contains(ix.Collection, "/") {
			rows = "100"
		}
		cols := []string{"db"}
		stat := []string{rows, rows}
		for i, f := range ix.Fields {
			k, ok := fieldKey(f)
			if !ok {
				return nil, fmt.Errorf("index on %q: field %q cannot be indexed (quotes, backslashes or control characters)", ix.Collection, f)
			}
			if k.rank != "" {
				cols = append(cols, k.rank)
				stat = append(stat, stat[len(stat)-1])
			}
			cols = append(cols, k.val)
			if i == 0 {
				stat = append(stat, "10")
			} else {
				stat = append(stat, "1")
			}
		}
		cols = append(cols, "path")
		stat = append(stat, "1")
		body := "ON docs (" + strings.Join(cols, ", ") + ") WHERE shape = " + shape
		sum := sha256.Sum256([]byte(body))
		name := "loomix_" + hex.EncodeToString(sum[:8])
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, indexDef{decl: ix, name: name, ddl: `CREATE INDEX IF NOT EXISTS "` + name + `" ` + body, stat: strings.Join(stat, " ")})
	}
	return out, nil
}

// term is one column of the query's total order.
type term struct {
	expr string
	desc bool
}

// plan is the SQL for one query, minus the continuation condition.
type plan struct {
	where []string
	args  []any
	terms []term
	keys  []sortKey // per orderBy field
	// fixed maps the rank expressions a filter pins to one type class to
	// that class. They are constant over the result, so ORDER BY leaves them
	// out (SQLite drops a WHERE-pinned ORDER BY term only when it is a plain
	// column; an expression term it keeps stops a declared index from
	// yielding the order: "score > 3" orderBy score sorted every match), and
	// a continuation seeks on the term after them.
	fixed map[string]int
	// exact is set when the WHERE clause selects exactly q.Matches'
	// documents (exactFilter), so rows need no check in Go.
	exact bool
	// binds records, per filter, which arguments its condition binds, so
	// a plan cached for the query's shape (planFor) binds another query of
	// that shape without building the SQL again.
	binds []bind
	// first is the SQL text of the first round (no continuation, the
	// query's limit + 1), set on plans kept in the cache.
	first string
	// in is the first "in" filter whose condition has one parameter per
	// value, and merge is set when a declared index leads with its field:
	// then sql reads each value's first rows in order from the index and
	// merges them, instead of one IN seek whose rows SQLite must
	// read in full and sort.
	in    *inList
	merge bool
	// concrete is set when the query names one collection (no pattern),
	// coll: then every row's collection column is coll, so ordering by it
	// orders by nothing (orderTerms leaves it out, and a continuation
	// seeks on the next term, as for fixed).
	concrete bool
	coll     string
}

// inList is an "in" filter as merge arms: where[at] is its IN condition,
// arms[i] the condition of the i-th value alone.
type inList struct {
	at    int
	field string
	val   string // the field's value expression
	arms  []string
}

// maxMergeValues bounds the values of an "in" filter read by a merge;
// longer lists are one IN seek.
const maxMergeValues = 10

// bind is what a filter's condition binds.
type bind uint8

const (
	bindNone       bind = iota
	bindValue           // sqlValue of the filter value
	bindPrefix          // the prefix and the prefix + "\xff"
	bindList            // sqlValue of each value of the list
	bindCollection      // the value and its shape (collections.Shape)
)

// nested reports whether a concrete collection is a subcollection, whose
// shape other collections share.
func nested(collection string) bool { return strings.IndexByte(collection, '/') >= 0 }

// pathRange returns bounds strictly around the paths of collection's
// documents.
func pathRange(collection string) (lo, hi string) { return collection + "/", collection + "0" }

func (p *plan) arg(v any) string {
	p.args = append(p.args, v)
	return param(len(p.args))
}

// param is the SQL for parameter n. Read statements write every parameter
// as +?n (unary plus is the identity on any value, and leaves a term usable
// as an index constraint): when the planner looks at a bare parameter's
// value (an equality it leaves to the row filter, a LIMIT) SQLite marks the
// statement for re-preparation whenever that parameter is bound anew, and
// the driver clears every binding after each run, so such a statement was
// compiled again, planner and all, on every call — most of the SQLite time
// of an indexed query. The planner never looks inside +?n.
// TestReadsCompileOnce checks it.
func param(n int) string { return "+?" + strconv.Itoa(n) }

// planQuery builds the SQL plan, or returns false when an orderBy field has
// no SQL form (the query then sorts in Go).
func planQuery(db string, q *collections.Query) (*plan, bool) {
	p := &plan{}
	p.where = append(p.where, "db = "+p.arg(db))
	p.concrete = !collections.IsPattern(q.Collection)
	if p.concrete {
		p.coll = q.Collection
		// A concrete collection is read from docs_shape (db, shape, path):
		// there is no index on the collection column for documents (it
		// would cost every write an index entry). A top-level collection
		// is its own shape. A nested collection is a range of paths within
		// its shape: a path C/id sorts in (C+"/", C+"0") ('0' follows
		// '/'), and the deeper paths in that range have another shape, so
		// the range holds exactly the collection's documents, and a seek
		// never steps over its subcollections' documents. A declared index
		// on a nested shape holds every collection of the shape, (db, field
		// values..., path): after the fields' equalities the same range on
		// its last column seeks to the queried collection instead of
		// reading every collection's entries for those values (one user's
		// query paid for all users' documents). likelihood(..., 1.0) keeps
		// the planner from counting the range as a narrowing: otherwise it
		// would prefer any index the range applies to over one that yields
		// the ORDER BY, and sort every match of a large collection.
		shape, _ := shapeLiteral(q.Collection)
		p.where = append(p.where, "shape = "+shape)
		if nested(q.Collection) {
			lo, hi := pathRange(q.Collection)
			p.where = append(p.where, "likelihood(path > "+p.arg(lo)+", 1.0) AND likelihood(path < "+p.arg(hi)+", 1.0)")
		}
	} else if shape, ok := shapeLiteral(q.Collection); ok {
		p.where = append(p.where, "shape = "+shape)
	}
	if collections.WildRoot(q.Collection) {
		// A wildcard never reaches Loom's own state: q.Matches
		// (collections.MatchCollection) drops such rows anyway; this keeps
		// them from being read and decoded at all.
		p.where = append(p.where, "substr(collection, 1, 1) <> '_'")
	}
	if !q.ShowDeleted {
		p.where = append(p.where, "deleted = 0")
	}
	p.exact = !collections.IsPattern(q.Collection) // the collection's documents, deleted = 0 unless ShowDeleted
	for _, f := range q.Filters {
		cond, b := p.pushdown(f)
		if cond != "" {
			p.where = append(p.where, cond)
		}
		p.binds = append(p.binds, b)
		p.exact = p.exact && exactFilter(f)
	}
	for _, o := range q.OrderBy {
		k, ok := fieldKey(o.Field)
		if !ok {
			return p, false
		}
		p.keys = append(p.keys, k)
		if k.rank != "" {
			p.terms = append(p.terms, term{k.rank, o.Desc()})
		}
		p.terms = append(p.terms, term{k.val, o.Desc()})
	}
	p.terms = append(p.terms, term{expr: "path"})
	return p, true
}

// leadKey names a shape and a field for stmtCache.leading; "" when the
// collection (a pattern with a wildcard collection name) has no one shape.
func leadKey(collection, field string) string {
	if _, ok := shapeLiteral(collection); !ok {
		return ""
	}
	return collections.Shape(collection) + "\x00" + field
}

// setIndexes records which fields lead a declared index, per shape: the
// "in" filters on them are read by a merge (plan.merge). Without such an
// index each merge arm would scan the collection on its own.
func (c *stmtCache) setIndexes(defs []indexDef) {
	c.leading = map[string]bool{}
	for _, d := range defs {
		c.leading[leadKey(d.decl.Collection, d.decl.Fields[0])] = true
	}
}

// maxCachedPlans bounds the query shapes whose plans are kept; past it,
// new shapes are planned per call (nothing is evicted).
const maxCachedPlans = 512

// maxCachedPlanKey bounds the key of a cached plan: a shape's key (and its
// SQL) grows with its field names and collection pattern, which a request
// chooses, so a longer shape is planned per call rather than kept.
const maxCachedPlanKey = 1024

// planFor returns planQuery's plan for q, reading rounds of want rows,
// from the cache when a query of the same shape was planned before. The
// SQL text of a plan depends only on what planKey writes: the collection
// (a concrete collection through its shape), ShowDeleted, each filter's
// field, operator and value class, the orderBy fields and directions, and
// want; values only fill the arguments, which binds says how to compute.
// TestPlanCache checks it against planQuery for many queries.
func (c *stmtCache) planFor(db string, q *collections.Query, want int) (*plan, bool) {
	var buf [256]byte
	key := appendPlanKey(buf[:0], q, want)
	c.planMu.RLock()
	t, ok := c.plans[string(key)]
	c.planMu.RUnlock()
	if ok {
		p := *t
		p.coll = q.Collection
		p.args = make([]any, 0, 2+2*len(q.Filters)+len(p.terms))
		p.args = append(p.args, db)
		if nested(q.Collection) && !collections.IsPattern(q.Collection) {
			lo, hi := pathRange(q.Collection)
			p.args = append(p.args, lo, hi)
		}
		for i, f := range q.Filters {
			switch t.binds[i] {
			case bindValue:
				_, v := sqlValue(f.Value, true)
				p.args = append(p.args, v)
			case bindPrefix:
				s, _ := f.Value.(string)
				p.args = append(p.args, s, s+"\xff")
			case bindCollection:
				c, _ := f.Value.(string)
				p.args = append(p.args, c, collections.Shape(c))
			case bindList:
				list, _ := f.Value.([]any)
				for _, e := range list {
					_, v := sqlValue(e, true)
					p.args = append(p.args, v)
				}
			}
		}
		return &p, true
	}
	p, ordered := planQuery(db, q)
	if !ordered {
		return p, false // the Go-sorted scan: rare, and planned per call
	}
	p.merge = p.in != nil && c.leading[leadKey(q.Collection, p.in.field)]
	t = &plan{}
	*t = *p
	t.args = nil // each call binds its own
	t.first = p.sql("", want)
	p.first = t.first
	c.planMu.Lock()
	if len(c.plans) < maxCachedPlans && len(key) <= maxCachedPlanKey {
		if c.plans == nil {
			c.plans = map[string]*plan{}
		}
		c.plans[string(key)] = t
	}
	c.planMu.Unlock()
	return p, true
}

// appendPlanKey appends q's shape as planFor keys it. Strings are length
// prefixed, so no two shapes share a key.
func appendPlanKey(b []byte, q *collections.Query, want int) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(want))
	b = append(b, boolByte(q.ShowDeleted))
	if collections.IsPattern(q.Collection) {
		b = append(b, 'p')
		str(q.Collection)
	} else {
		// The shape: document-id segments (odd positions) as "*".
		b = append(b, 'c')
		b = binary.AppendUvarint(b, uint64(strings.Count(q.Collection, "/")+1))
		for i, seg := 0, q.Collection; ; i++ {
			j := strings.IndexByte(seg, '/')
			part := seg
			if j >= 0 {
				part = seg[:j]
			}
			if i%2 == 1 {
				part = "*"
			}
			str(part)
			if j < 0 {
				break
			}
			seg = seg[j+1:]
		}
	}
	b = binary.AppendUvarint(b, uint64(len(q.Filters)))
	for _, f := range q.Filters {
		str(f.Field)
		str(string(f.Op))
		b = append(b, byte(collections.TypeClass(f.Value, true)))
		if list, ok := f.Value.([]any); ok && f.Op == collections.OpIn {
			// An in-list's SQL has a parameter per value, and depends on
			// their classes (listClass).
			b = binary.AppendUvarint(b, uint64(len(list)))
			for _, e := range list {
				b = append(b, byte(collections.TypeClass(e, true)))
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(q.OrderBy)))
	for _, o := range q.OrderBy {
		str(o.Field)
		b = append(b, boolByte(o.Desc()))
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// exactFilter reports whether pushdown's condition for f holds for exactly
// the documents f matches (collections.MatchValue), not only for a
// superset: an equality with a string (or "in" with strings) on a field
// SQL can address. The
// condition pins the field's type class to string (json_type 'text', or a
// column that always holds a string) and compares json_extract's text with
// BINARY collation, i.e. by bytes, as collections.Equal compares strings.
// Stored data is json.Marshal output (valid UTF-8, standard escapes), so
// json_extract decodes a stored string to the same bytes as DecodeJSON.
// Anything else (numbers, whose SQL form may round; ranges; prefixes;
// null, bools, other lists) is checked in Go as before.
func exactFilter(f collections.Filter) bool {
	switch f.Op {
	case collections.OpEq:
		if _, ok := f.Value.(string); !ok {
			return false
		}
	case collections.OpIn:
		// The same condition with a list of strings: the field equals one
		// of them. An empty list's condition is false, as is the filter.
		list, _ := f.Value.([]any)
		if len(list) > 0 && listClass(list) != rankString {
			return false
		}
	default:
		return false
	}
	k, ok := fieldKey(f.Field)
	return ok && (k.rank != "" || k.constRank == rankString)
}

// listClass returns the type class every value of a non-empty list has,
// or -1 when they differ.
func listClass(list []any) int {
	class := -1
	for i, e := range list {
		c := collections.TypeClass(e, true)
		if i > 0 && c != class {
			return -1
		}
		class = c
	}
	return class
}

// pushdown returns a SQL condition implied by the filter (a superset of its
// matches), or "" when the filter is left to Go alone, and what the
// condition binds.
func (p *plan) pushdown(f collections.Filter) (string, bind) {
	k, ok := fieldKey(f.Field)
	if !ok {
		return "", bindNone
	}
	class, v := sqlValue(f.Value, true)
	var list []any
	if f.Field == collections.FieldCollection && p.concrete {
		// Only the queried collection can match, and its path range is
		// read in order already (planQuery): the "+" keeps docs_changed
		// (db, collection, seq) from being searched for the condition
		// instead, and every match sorted.
		k.val = "+" + k.val
	}
	if f.Op == collections.OpIn {
		// "in" is an equality with any of the values: with values of one
		// class, the class condition and the value IN (...) let SQLite seek
		// a declared index once per value.
		list, _ = f.Value.([]any)
		if len(list) == 0 {
			return "0", bindNone
		}
		class = listClass(list)
	}
	if class < rankNull || class > rankString {
		return "", bindNone // arrays and objects are compared in Go, as are mixed lists
	}
	classCond := func() string {
		if k.rank == "" {
			if class != k.constRank {
				return "0" // a field of a fixed class never matches another class
			}
			return ""
		}
		if p.fixed == nil {
			p.fixed = map[string]int{}
		}
		p.fixed[k.rank] = class
		return k.rank + " = " + strconv.Itoa(class)
	}
	and := func(a, b string) string {
		switch {
		case a == "":
			return b
		case a == "0":
			return a
		}
		return a + " AND " + b
	}
	switch f.Op {
	case collections.OpEq, collections.OpIn, collections.OpLt, collections.OpLe, collections.OpGt, collections.OpGe, collections.OpPrefix:
	default:
		return "", bindNone
	}
	// The class condition first: when it is false no argument is bound,
	// so the SQL uses every argument (prepared statements insist).
	cc := classCond()
	if cc == "0" || ((f.Op == collections.OpEq || f.Op == collections.OpIn) && class == rankNull) {
		return cc, bindNone
	}
	switch f.Op {
	case collections.OpEq:
		if f.Field == collections.FieldCollection {
			// No index leads with the collection column in path order
			// (see planQuery): the collection's documents are a path
			// range of its shape, which docs_shape (or a declared index)
			// seeks in order, also for a pattern with no one shape. The
			// "+" keeps docs_changed (db, collection, seq) from being
			// searched instead and its rows sorted.
			c, _ := v.(string)
			ph, shape := p.arg(c), p.arg(collections.Shape(c))
			return "+collection = " + ph + " AND shape = " + shape + " AND path > (" + ph + " || '/') AND path < (" + ph + " || '0')", bindCollection
		}
		return and(cc, k.val+" = "+p.arg(v)), bindValue
	case collections.OpIn:
		ps := make([]string, len(list))
		for i, e := range list {
			_, v := sqlValue(e, true)
			ps[i] = p.arg(v)
		}
		if p.in == nil && len(list) > 1 && len(list) <= maxMergeValues {
			// The caller appends the condition to where. Each arm excludes
			// the values before it, so no row is read by two arms even
			// when the list repeats a value (1 and 1.0 alike).
			in := &inList{at: len(p.where), field: f.Field, val: k.val}
			for i := range ps {
				arm := k.val + " = " + ps[i]
				if i > 0 {
					arm += " AND " + k.val + " NOT IN (" + strings.Join(ps[:i], ", ") + ")"
				}
				in.arms = append(in.arms, and(cc, arm))
			}
			p.in = in
		}
		return and(cc, k.val+" IN ("+strings.Join(ps, ", ")+")"), bindList
	case collections.OpPrefix:
		s, _ := f.Value.(string)
		// Every string with prefix s sorts in [s, s+"\xff"): 0xff never
		// occurs in UTF-8.
		return and(cc, k.val+" >= "+p.arg(s)+" AND "+k.val+" < "+p.arg(s+"\xff")), bindPrefix
	}
	return and(cc, k.val+" "+string(f.Op)+" "+p.arg(v)), bindValue
}

// after returns the condition "sorts strictly after c" over the plan's
// terms, plus a leading range on the first term so SQLite can seek.
func (p *plan) after(c *collections.Cursor) string {
	vals := make([]any, 0, len(p.terms))
	for i, k := range p.keys {
		cv := c.Values[i]
		class, v := sqlValue(cv.Value, !cv.Missing)
		if k.rank != "" {
			vals = append(vals, class)
		} else if class != k.constRank {
			v = nil // a forged cursor: continue at the class boundary
		}
		vals = append(vals, v)
	}
	vals = append(vals, c.Path)
	var ors []string
	var eqs []string
	for i, t := range p.terms {
		ph := p.arg(vals[i])
		op := " > "
		if t.desc {
			op = " < "
		}
		ors = append(ors, "("+strings.Join(append(slices.Clone(eqs), t.expr+op+ph), " AND ")+")")
		eqs = append(eqs, t.expr+" IS "+ph)
	}
	cond := "(" + strings.Join(ors, " OR ") + ")"
	// The range goes on the first term not pinned by a filter to the
	// cursor's own class: pinned terms are equal on every candidate.
	lead := 0
	for lead < len(p.terms)-1 {
		if p.pinnedCollection(p.terms[lead]) && vals[lead] == any(p.coll) {
			lead++
			continue
		}
		class, ok := p.fixed[p.terms[lead].expr]
		if !ok || vals[lead] != any(class) {
			break
		}
		lead++
	}
	// On the last term (path) the condition needs no range of its own,
	// unless pinned terms before it made it an OR.
	if (lead < len(p.terms)-1 || lead > 0) && vals[lead] != nil {
		op := " >= "
		if p.terms[lead].desc {
			op = " <= "
		}
		cond = p.terms[lead].expr + op + param(len(p.args)-len(p.terms)+1+lead) + " AND " + cond
	}
	return cond
}

func (p *plan) sql(afterCond string, limit int) string {
	var b strings.Builder
	if !p.merge {
		p.selectSQL(&b, afterCond, p.where, -1)
		p.orderBy(&b, false)
		b.WriteString(" LIMIT " + strconv.Itoa(limit))
		return b.String()
	}
	// A merge: one arm per value, each selecting its rows with the order
	// terms as k0, k1, ...; a compound ORDER BY over those makes SQLite
	// merge the arms (MERGE (UNION ALL)), each read in order from the
	// index as an equality is, until limit rows: the first limit rows of
	// the IN query. The arms are disjoint, so UNION ALL repeats no row.
	//
	// When the query orders by the "in" field, SQLite sorts each arm by
	// it (it does not see that the arm's value is constant): such an arm
	// is a subquery ordered without the field, limited, so a sort takes at
	// most limit rows of it.
	where := slices.Clone(p.where)
	terms := p.orderTerms()
	byIn := slices.ContainsFunc(terms, func(t term) bool { return t.expr == p.in.val })
	b.WriteString("SELECT " + docColumns + " FROM (")
	for i, arm := range p.in.arms {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		where[p.in.at] = arm
		if !byIn {
			p.selectSQL(&b, afterCond, where, i)
			continue
		}
		b.WriteString("SELECT * FROM (")
		p.selectSQL(&b, afterCond, where, i)
		b.WriteString(" ORDER BY ")
		first := true
		for _, t := range terms {
			if t.expr == p.in.val {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString(t.expr)
			if t.desc {
				b.WriteString(" DESC")
			}
		}
		b.WriteString(" LIMIT " + strconv.Itoa(limit) + ")")
	}
	p.orderBy(&b, true)
	b.WriteString(" LIMIT " + strconv.Itoa(limit) + ")")
	return b.String()
}

// selectSQL writes the query over docs with the given conditions, without
// ORDER BY; in a merge arm (arm >= 0), with the order terms as k0, k1, ...
func (p *plan) selectSQL(b *strings.Builder, afterCond string, where []string, arm int) {
	b.WriteString("SELECT " + docColumns)
	if arm >= 0 {
		for i, t := range p.orderTerms() {
			b.WriteString(", " + t.expr + " AS k" + strconv.Itoa(i))
		}
	}
	b.WriteString(" FROM docs WHERE ")
	if afterCond != "" {
		b.WriteString(afterCond)
		b.WriteString(" AND ")
	}
	b.WriteString(strings.Join(where, " AND "))
}

// orderTerms are the terms ORDER BY names: those no filter pins.
func (p *plan) orderTerms() []term {
	var out []term
	for _, t := range p.terms {
		if _, ok := p.fixed[t.expr]; !ok && !p.pinnedCollection(t) {
			out = append(out, t)
		}
	}
	return out
}

// pinnedCollection reports whether t is the collection column of a query
// on one collection: constant over the result.
func (p *plan) pinnedCollection(t term) bool {
	return p.concrete && t.expr == "collection"
}

// orderBy writes the ORDER BY clause, over the merge's keys (k0, k1, ...)
// or the expressions themselves.
func (p *plan) orderBy(b *strings.Builder, keys bool) {
	b.WriteString(" ORDER BY ")
	for i, t := range p.orderTerms() {
		if i > 0 {
			b.WriteString(", ")
		}
		if keys {
			b.WriteString("k" + strconv.Itoa(i))
		} else {
			b.WriteString(t.expr)
		}
		if t.desc {
			b.WriteString(" DESC")
		}
	}
}

// maxChunk bounds one round of a query whose filters SQL could not apply
// fully.
const maxChunk = 2000

// Query returns one page of q in CompareDocs order.
func (s *Store) Query(ctx context.Context, db string, q collections.Query) (collections.QueryResult, error) {
	return s.query(ctx, db, q, false)
}

// QueryRaw is Query for collections.RawReader: documents may carry only
// their stored encoding (Raw, Data nil). Data is decoded only where the
// page needs it: for q.Matches when q has filters the SQL does not apply
// exactly, and for the document a cursor is made from; the Go sort of
// queryScan reads decoded documents only.
func (s *Store) QueryRaw(ctx context.Context, db string, q collections.Query) (collections.QueryResult, error) {
	return s.query(ctx, db, q, true)
}

func (s *Store) query(ctx context.Context, db string, q collections.Query, raw bool) (collections.QueryResult, error) {
	if err := s.begin(ctx); err != nil {
		return collections.QueryResult{}, err
	}
	var cur *collections.Cursor
	if q.StartAfter != "" {
		var err error
		if cur, err = collections.DecodeCursor(q.StartAfter, q.OrderBy); err != nil {
			return collections.QueryResult{}, err
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = collections.DefaultLimit
	}
	p, ok := s.queries.planFor(db, &q, limit+1)
	var docs []*collections.Document
	var err error
	if ok {
		docs, err = s.queryOrdered(ctx, p, &q, cur, limit+1, raw)
	} else {
		docs, err = s.queryScan(ctx, p, &q, cur, limit+1)
	}
	if err != nil {
		return collections.QueryResult{}, err
	}
	var res collections.QueryResult
	if len(docs) > limit {
		docs = docs[:limit]
		if len(q.OrderBy) > 0 { // else the cursor holds only the path
			if err := docs[limit-1].DecodeRaw(); err != nil {
				return collections.QueryResult{}, s.readErr("query "+q.Collection, err)
			}
		}
		res.NextCursor = collections.MakeCursor(q.OrderBy, docs[limit-1])
	}
	res.Docs = docs
	return res, nil
}

// queryOrdered reads rows in order, in growing chunks, until want matching
// documents are found or the candidates run out.
func (s *Store) queryOrdered(ctx context.Context, p *plan, q *collections.Query, cur *collections.Cursor, want int, raw bool) ([]*collections.Document, error) {
	base := len(p.args)
	chunk := want
	out := make([]*collections.Document, 0, min(want, 256))
	// Documents are allocated together, as many as the page still needs
	// (at most 64) at a time. A row q.Matches rejects gives its slot to
	// the next row, so no rejected document stays reachable from a block.
	var block []collections.Document
	for {
		p.args = p.args[:base]
		cond := ""
		if cur != nil {
			cond = p.after(cur)
		}
		text := p.first
		if cond != "" || chunk != want || text == "" {
			text = p.sql(cond, chunk)
		}
		rows, err := s.queries.query(ctx, s.rdb, text, p.args...)
		if err != nil {
			return nil, s.readErr("query "+q.Collection, err)
		}
		n := 0
		var last *collections.Document // the last row read
		var rejected collections.Document
		for rows.Next() {
			if len(block) == 0 {
				block = make([]collections.Document, min(want-len(out), 64))
			}
			d := &block[0]
			if err := scanRow(rows, d, raw, !p.exact && len(q.Filters) > 0); err != nil {
				rows.Close()
				return nil, s.readErr("query "+q.Collection, err)
			}
			n++
			if p.exact || q.Matches(d) {
				block = block[1:]
				out = append(out, d)
				last = d
				if len(out) == want {
					break
				}
			} else {
				rejected, *d = *d, collections.Document{} // the slot goes to the next row
				last = &rejected
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, s.readErr("query "+q.Collection, err)
		}
		if len(out) == want || n < chunk {
			return out, nil
		}
		if len(q.OrderBy) > 0 { // else the continuation needs only the path
			if err := last.DecodeRaw(); err != nil {
				return nil, s.readErr("query "+q.Collection, err)
			}
		}
		cur = cursorAt(q.OrderBy, last)
		chunk = min(chunk*4, maxChunk)
	}
}

// scanRow reads one docColumns row of a query into d: decoded unless raw;
// when raw, Data is still decoded if decode (the caller reads fields of it).
func scanRow(rows scanner, d *collections.Document, raw, decode bool) error {
	if !raw {
		return scanDocInto(rows, d, nil)
	}
	err := scanDocRawInto(rows, d)
	if err == nil && decode {
		err = d.DecodeRaw()
	}
	return err
}

// cursorAt is the decoded cursor of d.
func cursorAt(order []collections.Order, d *collections.Document) *collections.Cursor {
	c := &collections.Cursor{Path: d.Path, Values: make([]collections.CursorValue, len(order))}
	for i, o := range order {
		v, ok := collections.Lookup(d, o.Field)
		c.Values[i] = collections.CursorValue{Missing: !ok, Value: v}
	}
	return c
}

// queryScan reads every candidate and sorts in Go; used only when an
// orderBy field has no SQL form. The sort needs every candidate decoded,
// so even for QueryRaw it reads decoded documents only: keeping each
// candidate's stored bytes as well (and checking them with WireData)
// would add to what an unbounded scan holds, to save encoding one page.
func (s *Store) queryScan(ctx context.Context, p *plan, q *collections.Query, cur *collections.Cursor, want int) ([]*collections.Document, error) {
	sqlText := "SELECT " + docColumns + " FROM docs WHERE " + strings.Join(p.where, " AND ")
	rows, err := s.queries.query(ctx, s.rdb, sqlText, p.args...)
	if err != nil {
		return nil, s.readErr("query "+q.Collection, err)
	}
	defer rows.Close()
	var out []*collections.Document
	for rows.Next() {
		d, err := scanDoc(rows, nil)
		if err != nil {
			return nil, s.readErr("query "+q.Collection, err)
		}
		if q.Matches(d) && (cur == nil || cur.After(q.OrderBy, d)) {
			out = append(out, d)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("query "+q.Collection, err)
	}
	slices.SortFunc(out, func(a, b *collections.Document) int { return collections.CompareDocs(q.OrderBy, a, b) })
	// A copy of the page, so the rest of the candidates are not held
	// while the page is written out.
	return slices.Clone(out[:min(want, len(out))]), nil
}
