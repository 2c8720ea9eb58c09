package mongo

import (
	"math"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/loomdb/loom/collections"
)

// Query translation. A Loom query becomes a MongoDB filter over the order
// keys (keys.go) that selects a superset of the matching documents, exactly
// for the scalar operators, and a sort on (keys..., path) that is exactly
// collections.CompareDocs. Every returned document is still checked with
// collections.Query.Matches and Cursor.After in Go, so an over-wide
// filter can cost reads but never change a result.

// selector returns the filter on db, collection (or pattern) and
// tombstones.
func selector(db string, q *collections.Query) bson.D {
	f := bson.D{{Key: fieldDB, Value: db}}
	if !collections.IsPattern(q.Collection) {
		f = append(f, bson.E{Key: fieldColl, Value: q.Collection})
	} else {
		if shape, ok := literalShape(q.Collection); ok {
			f = append(f, bson.E{Key: fieldShape, Value: shape})
		} else {
			f = append(f, bson.E{Key: fieldDepth, Value: int32(strings.Count(q.Collection, "/") + 1)})
		}
		if collections.WildRoot(q.Collection) {
			// A wildcard first segment never selects a system collection.
			f = append(f, bson.E{Key: fieldSys, Value: false})
		}
	}
	if !q.ShowDeleted {
		f = append(f, bson.E{Key: fieldDeleted, Value: false})
	}
	return f
}

// literalShape returns the shape every collection matching the pattern has,
// or false when a collection-name segment is a wildcard.
func literalShape(pattern string) (string, bool) {
	for i, seg := range strings.Split(pattern, "/") {
		if i%2 == 0 && seg == "*" {
			return "", false
		}
	}
	return collections.Shape(pattern), true
}

// classRange is the key range of one type class: [lo, hi).
func classRange(key string) (lo, hi string) {
	c := key[0]
	return string(c), string(c + 1)
}

// filterCond translates one normalized filter into a condition on its key,
// or nil when the filter cannot narrow the candidates (then Go alone
// decides).
func filterCond(f collections.Filter) bson.D {
	if hasNaN(f.Value) {
		// Only a Go caller can send NaN; Compare ranks it equal to every
		// number, which no key range expresses.
		return nil
	}
	k := keyPath(f.Field)
	switch f.Op {
	case collections.OpEq:
		key, ok := orderKey(f.Value)
		if !ok {
			return bson.D{{Key: k, Value: bson.D{{Key: "$in", Value: bson.A{}}}}}
		}
		// Arrays and objects: the class key, refined in Go.
		return bson.D{{Key: k, Value: key}}
	case collections.OpNe:
		key, ok := orderKey(f.Value)
		if !ok || isContainer(f.Value) {
			return nil
		}
		return bson.D{{Key: k, Value: bson.D{{Key: "$ne", Value: key}}}}
	case collections.OpLt, collections.OpLe, collections.OpGt, collections.OpGe:
		key, ok := orderKey(f.Value)
		if !ok || isContainer(f.Value) || f.Value == nil {
			return bson.D{{Key: k, Value: bson.D{{Key: "$in", Value: bson.A{}}}}}
		}
		lo, hi := classRange(key)
		var r bson.D
		switch f.Op {
		case collections.OpLt:
			r = bson.D{{Key: "$gte", Value: lo}, {Key: "$lt", Value: key}}
		case collections.OpLe:
			r = bson.D{{Key: "$gte", Value: lo}, {Key: "$lte", Value: key}}
		case collections.OpGt:
			r = bson.D{{Key: "$gt", Value: key}, {Key: "$lt", Value: hi}}
		default:
			r = bson.D{{Key: "$gte", Value: key}, {Key: "$lt", Value: hi}}
		}
		return bson.D{{Key: k, Value: r}}
	case collections.OpIn:
		list, _ := f.Value.([]any)
		keys := bson.A{}
		seen := map[string]bool{}
		for _, v := range list {
			if key, ok := orderKey(v); ok && !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
		return bson.D{{Key: k, Value: bson.D{{Key: "$in", Value: keys}}}}
	case collections.OpNotIn:
		list, _ := f.Value.([]any)
		keys := bson.A{}
		for _, v := range list {
			if key, ok := orderKey(v); ok && !isContainer(v) {
				keys = append(keys, key)
			}
		}
		if len(keys) == 0 {
			return nil
		}
		return bson.D{{Key: k, Value: bson.D{{Key: "$nin", Value: keys}}}}
	case collections.OpArrayContains, collections.OpArrayContainsAny:
		return bson.D{{Key: k, Value: keyArray}}
	case collections.OpPrefix:
		p, _ := f.Value.(string)
		r := bson.D{{Key: "$gte", Value: keyString + p}}
		// Trailing U+10FFFF has no successor: every string that starts
		// with p also lies below the bound of p without it.
		base := strings.TrimRight(p, "\U0010ffff")
		if hi, ok := prefixEnd(base); ok {
			r = append(r, bson.E{Key: "$lt", Value: keyString + hi})
		} else {
			r = append(r, bson.E{Key: "$lt", Value: keyArray})
		}
		return bson.D{{Key: k, Value: r}}
	}
	return nil
}

// hasNaN reports whether a filter value, or an entry of its list, is NaN.
func hasNaN(v any) bool {
	switch t := v.(type) {
	case float64:
		return math.IsNaN(t)
	case float32:
		return math.IsNaN(float64(t))
	case []any:
		for _, e := range t {
			if hasNaN(e) {
				return true
			}
		}
	}
	return false
}

func isContainer(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return true
	}
	return false
}

// prefixEnd returns a valid UTF-8 string above every string that starts
// with p: p with its last rune incremented. False when p is empty or ends
// in the last code point.
func prefixEnd(p string) (string, bool) {
	r, size := utf8.DecodeLastRuneInString(p)
	if size == 0 || r == utf8.RuneError && size == 1 || r >= utf8.MaxRune {
		return "", false
	}
	r++
	if r >= 0xD800 && r <= 0xDFFF {
		r = 0xE000
	}
	return p[:len(p)-size] + string(r), true
}

// cursorCond is the condition "sorts strictly after c" on the keys and the
// path: an $or over the first differing orderBy term.
func cursorCond(order []collections.Order, c *collections.Cursor) bson.D {
	var or bson.A
	var eq bson.D // the terms before the current one are equal
	for i, o := range order {
		k := keyPath(o.Field)
		cv := c.Values[i]
		key, present := "", !cv.Missing
		if present {
			var ok bool
			if key, ok = orderKey(cv.Value); !ok {
				present = false
			}
		}
		var after bson.D // the field sorts after the cursor's value
		switch {
		case !o.Desc() && present:
			after = bson.D{{Key: k, Value: bson.D{{Key: "$gt", Value: key}}}}
		case !o.Desc():
			after = bson.D{{Key: k, Value: bson.D{{Key: "$exists", Value: true}}}}
		case present:
			// Descending: smaller keys and the missing field come later.
			after = bson.D{{Key: "$or", Value: bson.A{
				bson.D{{Key: k, Value: bson.D{{Key: "$lt", Value: key}}}},
				bson.D{{Key: k, Value: bson.D{{Key: "$exists", Value: false}}}},
			}}}
		}
		if after != nil {
			or = append(or, and(eq, after))
		}
		if present {
			eq = append(eq, bson.E{Key: k, Value: key})
		} else {
			eq = append(eq, bson.E{Key: k, Value: bson.D{{Key: "$exists", Value: false}}})
		}
	}
	or = append(or, and(eq, bson.D{{Key: fieldPath, Value: bson.D{{Key: "$gt", Value: c.Path}}}}))
	return bson.D{{Key: "$or", Value: or}}
}

// and joins conditions; each keeps its own keys, so the same key may be
// constrained twice.
func and(conds ...bson.D) bson.D {
	var parts bson.A
	for _, c := range conds {
		for _, e := range c {
			parts = append(parts, bson.D{e})
		}
	}
	if len(parts) == 1 {
		return parts[0].(bson.D)
	}
	return bson.D{{Key: "$and", Value: parts}}
}

// translate returns the MongoDB filter and sort of a normalized query.
func translate(db string, q *collections.Query, c *collections.Cursor) (filter, sort bson.D) {
	conds := []bson.D{selector(db, q)}
	for _, f := range q.Filters {
		if cond := filterCond(f); cond != nil {
			conds = append(conds, cond)
		}
	}
	if c != nil {
		conds = append(conds, cursorCond(q.OrderBy, c))
	}
	return and(conds...), sortSpec(q.OrderBy)
}

// sortSpec is (keys..., path): MongoDB sorts a missing key before every
// string, as Compare sorts a missing field first.
func sortSpec(order []collections.Order) bson.D {
	sort := bson.D{}
	seen := map[string]bool{}
	for _, o := range order {
		k := keyPath(o.Field)
		if seen[k] {
			continue // a repeated field decides nothing new
		}
		seen[k] = true
		dir := int32(1)
		if o.Desc() {
			dir = -1
		}
		sort = append(sort, bson.E{Key: k, Value: dir})
	}
	return append(sort, bson.E{Key: fieldPath, Value: int32(1)})
}
