package collections

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// Op is a filter operator.
type Op string

// Filter operators (README, Queries). "contains" is accepted as an alias of
// array-contains by ParseQuery and NormalizeFilters.
const (
	OpEq               Op = "=="
	OpNe               Op = "!="
	OpLt               Op = "<"
	OpLe               Op = "<="
	OpGt               Op = ">"
	OpGe               Op = ">="
	OpIn               Op = "in"
	OpNotIn            Op = "not-in"
	OpArrayContains    Op = "array-contains"
	OpArrayContainsAny Op = "array-contains-any"
	OpPrefix           Op = "prefix"
)

// Query limits.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxListValues bounds the value list of in, not-in and
	// array-contains-any.
	MaxListValues = 100
	// MaxFilters bounds the number of filters (and orderBy fields) of one
	// query.
	MaxFilters = 32
)

// Filter is one predicate: field (a dotted path, or an envelope field) op
// value. The same form is used for ifMatch preconditions.
type Filter struct {
	Field string `json:"field"`
	Op    Op     `json:"op"`
	Value any    `json:"value"`
}

// Order is one orderBy term.
type Order struct {
	Field     string `json:"field"`
	Direction string `json:"direction,omitempty"` // "asc" (default) or "desc"
}

// Desc reports whether the order is descending.
func (o Order) Desc() bool { return o.Direction == "desc" }

// Query selects documents of one collection or collection group.
type Query struct {
	Collection  string   `json:"collection"`
	Filters     []Filter `json:"filters,omitempty"`
	OrderBy     []Order  `json:"orderBy,omitempty"`
	Limit       int      `json:"limit,omitempty"`
	StartAfter  string   `json:"startAfter,omitempty"`
	ShowDeleted bool     `json:"showDeleted,omitempty"`
}

// QueryResult is one page of a query. NextCursor is empty when there are no
// more documents.
type QueryResult struct {
	Docs       []*Document
	NextCursor string
}

// ParseQuery decodes and validates a query body. Unknown keys are an error so
// that a typo never silently widens a query.
func ParseQuery(b []byte) (Query, error) {
	q, err := DecodeQuery(b)
	if err != nil {
		return Query{}, err
	}
	if err := q.Normalize(); err != nil {
		return Query{}, err
	}
	return q, nil
}

// DecodeQuery is ParseQuery without Normalize, for callers whose startAfter
// is not an engine cursor (the server's sealed cursors): they set the
// engine cursor before normalizing.
func DecodeQuery(b []byte) (Query, error) {
	var q Query
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return Query{}, invalidQuery("%v", err)
	}
	// dec.More would accept a stray "}" or "]" after the object; only EOF
	// ends a query body.
	if _, err := dec.Token(); err != io.EOF {
		return Query{}, invalidQuery("unexpected data after the query object")
	}
	return q, nil
}

// Normalize validates q in place and fills defaults: limit 100 when zero,
// capped at 1000; "contains" becomes "array-contains"; direction "asc" when
// empty. The cursor, if any, must have been produced for the same orderBy.
func (q *Query) Normalize() error {
	if err := ValidateCollectionPattern(q.Collection); err != nil {
		return err
	}
	if len(q.Filters) > MaxFilters || len(q.OrderBy) > MaxFilters {
		return invalidQuery("at most %d filters and %d orderBy fields", MaxFilters, MaxFilters)
	}
	if err := NormalizeFilters(q.Filters); err != nil {
		return err
	}
	for i := range q.OrderBy {
		o := &q.OrderBy[i]
		if err := validateField(o.Field); err != nil {
			return err
		}
		switch o.Direction {
		case "", "asc", "ASC":
			o.Direction = "asc"
		case "desc", "DESC":
			o.Direction = "desc"
		default:
			return invalidQuery("orderBy direction %q: use asc or desc", o.Direction)
		}
	}
	switch {
	case q.Limit < 0:
		return invalidQuery("limit must not be negative")
	case q.Limit == 0:
		q.Limit = DefaultLimit
	case q.Limit > MaxLimit:
		q.Limit = MaxLimit
	}
	if q.StartAfter != "" {
		if _, err := DecodeCursor(q.StartAfter, q.OrderBy); err != nil {
			return err
		}
	}
	return nil
}

// NormalizeFilters validates filters in place (also used for ifMatch).
func NormalizeFilters(fs []Filter) error {
	for i := range fs {
		f := &fs[i]
		if err := validateField(f.Field); err != nil {
			return err
		}
		if f.Op == "contains" {
			f.Op = OpArrayContains
		}
		switch f.Op {
		case OpEq, OpNe, OpArrayContains:
		case OpLt, OpLe, OpGt, OpGe:
			switch classOf(f.Value, true) {
			case classNumber, classString, classBool:
			default:
				return invalidQuery("filter %q %s needs a number, string or boolean value", f.Field, f.Op)
			}
		case OpIn, OpNotIn, OpArrayContainsAny:
			list, ok := f.Value.([]any)
			if !ok {
				return invalidQuery("filter %q %s needs an array value", f.Field, f.Op)
			}
			if len(list) > MaxListValues {
				return invalidQuery("filter %q %s: at most %d values", f.Field, f.Op, MaxListValues)
			}
		case OpPrefix:
			if _, ok := f.Value.(string); !ok {
				return invalidQuery("filter %q prefix needs a string value", f.Field)
			}
		default:
			return invalidQuery("unknown operator %q on field %q", f.Op, f.Field)
		}
		if Depth(f.Value) > MaxDepth {
			return invalidQuery("filter value nests deeper than %d levels", MaxDepth)
		}
	}
	return nil
}

func validateField(field string) error {
	if field == "" {
		return invalidQuery("empty field name")
	}
	if len(field) > MaxPathBytes {
		return invalidQuery("field name longer than %d bytes", MaxPathBytes)
	}
	for _, p := range strings.Split(field, ".") {
		if p == "" {
			return invalidQuery("field %q has an empty segment", field)
		}
	}
	return nil
}

// Lookup returns the value of a field (envelope field or dotted path into the
// data) and whether it is present.
func Lookup(d *Document, field string) (any, bool) {
	switch field {
	case FieldID:
		return d.ID, true
	case FieldCollection:
		return d.Collection, true
	case FieldVersion:
		return json.Number(itoa(d.Version)), true
	case FieldCreatedAt:
		return json.Number(itoa(d.CreatedAt)), true
	case FieldUpdatedAt:
		return json.Number(itoa(d.UpdatedAt)), true
	case FieldDeleted:
		if d.Deleted {
			return true, true
		}
		return nil, false
	}
	var cur any = d.Data
	for {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		i := strings.IndexByte(field, '.')
		if i < 0 {
			v, ok := m[field]
			return v, ok
		}
		cur, ok = m[field[:i]]
		if !ok {
			return nil, false
		}
		field = field[i+1:]
	}
}

// Matches reports whether a document belongs to the query's result set
// (collection or pattern, tombstones, filters), ignoring order and cursor.
func (q *Query) Matches(d *Document) bool {
	if d.Deleted && !q.ShowDeleted {
		return false
	}
	if !MatchCollection(q.Collection, d.Collection) {
		return false
	}
	return MatchFilters(d, q.Filters)
}

// MatchFilters reports whether d satisfies every filter.
func MatchFilters(d *Document, fs []Filter) bool {
	for i := range fs {
		v, ok := Lookup(d, fs[i].Field)
		if !MatchValue(v, ok, fs[i].Op, fs[i].Value) {
			return false
		}
	}
	return true
}

// MatchValue applies one operator to a field value (present reports whether
// the field exists). Comparison follows JSON type classes: values of different
// classes are never equal and never ordered against each other; a missing
// field matches only != and not-in.
func MatchValue(v any, present bool, op Op, want any) bool {
	switch op {
	case OpNe:
		return !present || !Equal(v, want)
	case OpNotIn:
		if !present {
			return true
		}
		list, _ := want.([]any) // not a list only when filters were not normalized
		for _, w := range list {
			if Equal(v, w) {
				return false
			}
		}
		return true
	}
	if !present {
		return false
	}
	switch op {
	case OpEq:
		return Equal(v, want)
	case OpLt, OpLe, OpGt, OpGe:
		c, ok := compareSameClass(v, want)
		if !ok {
			return false
		}
		switch op {
		case OpLt:
			return c < 0
		case OpLe:
			return c <= 0
		case OpGt:
			return c > 0
		default:
			return c >= 0
		}
	case OpIn:
		list, _ := want.([]any)
		for _, w := range list {
			if Equal(v, w) {
				return true
			}
		}
		return false
	case OpArrayContains:
		arr, ok := v.([]any)
		if !ok {
			return false
		}
		for _, e := range arr {
			if Equal(e, want) {
				return true
			}
		}
		return false
	case OpArrayContainsAny:
		arr, ok := v.([]any)
		if !ok {
			return false
		}
		list, _ := want.([]any)
		for _, e := range arr {
			for _, w := range list {
				if Equal(e, w) {
					return true
				}
			}
		}
		return false
	case OpPrefix:
		s, ok := v.(string)
		p, _ := want.(string)
		return ok && strings.HasPrefix(s, p)
	}
	return false
}
