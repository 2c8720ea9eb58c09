package collections

import (
	"bytes"
	"context"
	"fmt"
	"unicode/utf8"
)

// RawReader is an optional interface of an engine: reads whose documents
// may carry only their stored encoding (Document.Raw, Data nil) when it is
// already their wire form (WireData), so that a page can be written out
// with no decode and no re-encode. Everything else is as Store.Get and
// Store.Query say: the same documents, errors and cursors. Callers use
// these reads only for documents they write out with AppendJSON (and
// decode Raw themselves when Data is nil and they need the fields); access
// decides every rule before such a document reaches a response.
type RawReader interface {
	GetRaw(ctx context.Context, db, path string) (*Document, error)
	QueryRaw(ctx context.Context, db string, q Query) (QueryResult, error)
}

// DecodeRaw fills in Data of a document a RawReader read left with only its
// stored encoding (Raw is kept: it still is the wire form of Data), for a
// caller that reads its fields (rules, a cursor, a filter). Nil and
// decoded documents are left as they are.
func (d *Document) DecodeRaw() error {
	if d == nil || d.Data != nil {
		return nil
	}
	m, err := DecodeObject(d.Raw)
	if err != nil {
		return fmt.Errorf("corrupt document %s: %w", d.Path, err)
	}
	d.Data = m
	return nil
}

// maxWireDepth bounds the nesting WireData checks; deeper data is decoded.
const maxWireDepth = 64

// WireData reports whether b, a stored encoding of document data, is a
// JSON object written exactly as AppendJSON would write it after decoding
// it with DecodeObject (json.Marshal of the decoded map): no whitespace,
// object keys unique and in byte order, numbers as they are (json.Number
// keeps their text), strings in valid UTF-8 with only the escapes
// json.Marshal writes for what they decode to. It answers false for
// anything it is not sure of (a key with an escape, a rare escape, deep
// nesting, invalid JSON): the caller then decodes, as without it. It does
// not allocate.
func WireData(b []byte) bool {
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	n, ok := wireValue(b, 0, 0)
	return ok && n == len(b)
}

// wireValue checks the value at b[i:] and returns the index after it.
func wireValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{':
		return wireObject(b, i, depth+1)
	case c == '[':
		return wireArray(b, i, depth+1)
	case c == '"':
		return wireString(b, i, true)
	case c == 't':
		return wireLiteral(b, i, "true")
	case c == 'f':
		return wireLiteral(b, i, "false")
	case c == 'n':
		return wireLiteral(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return wireNumber(b, i)
	}
	return 0, false
}

func wireLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

func wireObject(b []byte, i, depth int) (int, bool) {
	if depth > maxWireDepth {
		return 0, false
	}
	i++ // '{'
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	var prev []byte
	for first := true; ; first = false {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		end, ok := wireString(b, i, false) // keys: no escapes at all
		if !ok {
			return 0, false
		}
		key := b[i+1 : end-1]
		if !first && bytes.Compare(prev, key) >= 0 {
			return 0, false
		}
		prev = key
		i = end
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i, ok = wireValue(b, i+1, depth); !ok || i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

func wireArray(b []byte, i, depth int) (int, bool) {
	if depth > maxWireDepth {
		return 0, false
	}
	i++ // '['
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = wireValue(b, i, depth); !ok || i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// wireString checks the string at b[i:] (b[i] == '"'). Accepted escapes are
// those json.Marshal writes for the character they stand for: \" \\ \n \r
// \t, and \u003c \u003e \u0026 (HTML escaping). Characters json.Marshal
// would escape (control characters, < > &, U+2028, U+2029) must not appear
// unescaped. Keys (escapes false) accept no escape.
func wireString(b []byte, i int, escapes bool) (int, bool) {
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if !escapes || i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					return 0, false
				}
				switch string(b[i+2 : i+6]) {
				case "003c", "003e", "0026":
					i += 6
				default:
					return 0, false
				}
			default:
				return 0, false
			}
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			return 0, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return 0, false
			}
			i += size
		}
	}
	return 0, false
}

// wireNumber checks a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func wireNumber(b []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}
