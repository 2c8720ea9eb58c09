package collections

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// Cursor is the decoded form of an opaque query cursor: the sort key of the
// last returned document. A query continues strictly after it.
type Cursor struct {
	Fields []string      `json:"f"` // orderBy fields the cursor was made for
	Values []CursorValue `json:"v"` // the document's value per field
	Path   string        `json:"p"` // tie-break
}

// CursorValue is one sort value; Missing marks an absent field.
type CursorValue struct {
	Missing bool `json:"m,omitempty"`
	Value   any  `json:"x,omitempty"`
}

// MakeCursor builds the cursor that continues after d under order.
func MakeCursor(order []Order, d *Document) string {
	c := Cursor{Path: d.Path, Fields: make([]string, len(order)), Values: make([]CursorValue, len(order))}
	for i, o := range order {
		dir := o.Direction
		if dir == "" {
			dir = "asc" // as DecodeCursor reads it
		}
		c.Fields[i] = o.Field + " " + dir
		v, ok := Lookup(d, o.Field)
		c.Values[i] = CursorValue{Missing: !ok, Value: v}
	}
	b, err := json.Marshal(c)
	if err != nil {
		// Values come from a stored document, which always encodes.
		panic("collections: encode cursor: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor parses a cursor made by MakeCursor and checks that it was made
// for the same orderBy.
func DecodeCursor(s string, order []Order) (*Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, invalidQuery("startAfter is not a cursor returned by this server")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var c Cursor
	if err := dec.Decode(&c); err != nil || c.Path == "" || len(c.Values) != len(c.Fields) {
		return nil, invalidQuery("startAfter is not a cursor returned by this server")
	}
	if len(c.Fields) != len(order) {
		return nil, invalidQuery("startAfter was made for a different orderBy")
	}
	for i, o := range order {
		dir := o.Direction
		if dir == "" {
			dir = "asc"
		}
		if c.Fields[i] != o.Field+" "+dir {
			return nil, invalidQuery("startAfter was made for a different orderBy")
		}
	}
	if err := ValidateDocPath(c.Path); err != nil {
		return nil, invalidQuery("startAfter is not a cursor returned by this server")
	}
	return &c, nil
}

// After reports whether d sorts strictly after the cursor under order.
func (c *Cursor) After(order []Order, d *Document) bool {
	for i, o := range order {
		v, ok := Lookup(d, o.Field)
		cv := c.Values[i]
		cmp := Compare(v, ok, cv.Value, !cv.Missing)
		if o.Desc() {
			cmp = -cmp
		}
		if cmp != 0 {
			return cmp > 0
		}
	}
	return strings.Compare(d.Path, c.Path) > 0
}
