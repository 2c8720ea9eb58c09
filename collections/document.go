package collections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// MaxDepth is the deepest nesting of objects and arrays a document may have.
const MaxDepth = 32

// Envelope field names. They are reserved: user data never contains them.
const (
	FieldID         = "id"
	FieldCollection = "collection"
	FieldVersion    = "version"
	FieldCreatedAt  = "createdAt"
	FieldUpdatedAt  = "updatedAt"
	FieldDeleted    = "deleted"
)

// IsEnvelopeField reports whether name is one of the server-owned fields.
func IsEnvelopeField(name string) bool {
	switch name {
	case FieldID, FieldCollection, FieldVersion, FieldCreatedAt, FieldUpdatedAt, FieldDeleted:
		return true
	}
	return false
}

// Document is one stored document: the envelope plus user data. Data holds
// values as decoded by DecodeJSON: nil, bool, json.Number, string, []any and
// map[string]any.
type Document struct {
	Path       string
	Collection string
	ID         string
	Version    int64
	CreatedAt  int64 // unix ms
	UpdatedAt  int64 // unix ms
	Deleted    bool
	// Seq is the change-log position of the document's last write. RxDB
	// checkpoints use it. Zero for system documents, which are not logged
	// (but _triggers ones: IsLogged).
	Seq  int64
	Data map[string]any
	// Raw, when not nil, is the stored encoding of Data in exactly the
	// form AppendJSON would write for it (see WireData), and AppendJSON
	// writes it as is. Only the optional RawReader reads and an engine's
	// write results return documents with Raw set, and only the reads may
	// leave Data nil: such a document is for writing out, not for reading
	// its fields. Raw is never modified; whoever changes or drops Data
	// drops Raw with it (Clone does).
	Raw []byte
}

// MarshalJSON writes the flat wire envelope: user fields plus id, collection,
// version, createdAt, updatedAt and (on tombstones) deleted.
func (d *Document) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	if err := d.AppendJSON(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AppendJSON writes the wire envelope of d to buf: from Raw when it is set,
// else by encoding Data.
func (d *Document) AppendJSON(buf *bytes.Buffer) error {
	data := d.Raw
	if data == nil && len(d.Data) > 0 {
		var err error
		data, err = json.Marshal(d.Data)
		if err != nil {
			return fmt.Errorf("encode document %s: %w", d.Path, err)
		}
	}
	buf.WriteString(`{"id":`)
	writeJSONString(buf, d.ID)
	buf.WriteString(`,"collection":`)
	writeJSONString(buf, d.Collection)
	buf.WriteString(`,"version":`)
	buf.Write(strconv.AppendInt(buf.AvailableBuffer(), d.Version, 10))
	buf.WriteString(`,"createdAt":`)
	buf.Write(strconv.AppendInt(buf.AvailableBuffer(), d.CreatedAt, 10))
	buf.WriteString(`,"updatedAt":`)
	buf.Write(strconv.AppendInt(buf.AvailableBuffer(), d.UpdatedAt, 10))
	if d.Deleted {
		buf.WriteString(`,"deleted":true`)
	}
	if len(data) > 2 { // more than "{}"
		buf.WriteByte(',')
		buf.Write(data[1:])
	} else {
		buf.WriteByte('}')
	}
	return nil
}

// writeJSONString writes s as json.Marshal does. Ids and collection paths
// are nearly always printable ASCII that json.Marshal writes unchanged
// between quotes; anything else (control characters, quotes, backslashes,
// the HTML characters it escapes, non-ASCII) goes through json.Marshal.
func writeJSONString(buf *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // strings always encode
			buf.Write(b)
			return
		}
	}
	buf.WriteByte('"')
	buf.WriteString(s)
	buf.WriteByte('"')
}

// Clone returns a deep copy of d.
func (d *Document) Clone() *Document {
	if d == nil {
		return nil
	}
	c := *d
	if d.Data != nil {
		c.Data = CloneValue(d.Data).(map[string]any)
		c.Raw = nil // the copy's Data may change; it is encoded from Data
	}
	return &c
}

// Int64 reads an integer stored in a document: a json.Number after a round
// trip through an engine (an integral float form such as "3.0" counts), or
// an int64/int/float64 the process put there itself.
func Int64(v any) (int64, bool) {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, true
		}
		f, err := t.Float64()
		if err != nil || f != float64(int64(f)) {
			return 0, false
		}
		return int64(f), true
	case int64:
		return t, true
	case int:
		return int64(t), true
	case float64:
		return int64(t), t == float64(int64(t))
	}
	return 0, false
}

// CloneValue deep-copies a decoded JSON value.
func CloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = CloneValue(x)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, x := range t {
			a[i] = CloneValue(x)
		}
		return a
	default:
		return v
	}
}

// DecodeJSON decodes one JSON value from b, keeping numbers as json.Number so
// integers up to 2^53 and beyond keep their exact text. Trailing data after
// the value is an error.
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the JSON value")
	}
	return v, nil
}

// DecodeObject decodes a JSON object (see DecodeJSON). A JSON null or any
// other non-object value is an error.
func DecodeObject(b []byte) (map[string]any, error) {
	v, err := DecodeJSON(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok || m == nil {
		return nil, fmt.Errorf("expected a JSON object")
	}
	return m, nil
}

// Depth returns the nesting depth of a decoded JSON value: 0 for scalars, 1
// for a flat object or array.
func Depth(v any) int {
	max := 0
	switch t := v.(type) {
	case map[string]any:
		for _, x := range t {
			if d := Depth(x); d > max {
				max = d
			}
		}
		return max + 1
	case []any:
		for _, x := range t {
			if d := Depth(x); d > max {
				max = d
			}
		}
		return max + 1
	}
	return 0
}

// CleanInput prepares client-supplied document data for a write to the
// document at id: envelope fields are dropped (they are server-owned), an
// "id" field must equal the document id, and the data must not nest deeper
// than MaxDepth. The map is modified in place and returned.
func CleanInput(data map[string]any, id string) (map[string]any, error) {
	if data == nil {
		return map[string]any{}, nil
	}
	if v, ok := data[FieldID]; ok {
		s, isStr := v.(string)
		if !isStr || s != id {
			return nil, invalidDocument("field \"id\" must equal the document id %q", id)
		}
	}
	for _, f := range [...]string{FieldID, FieldCollection, FieldVersion, FieldCreatedAt, FieldUpdatedAt, FieldDeleted} {
		delete(data, f)
	}
	if Depth(data) > MaxDepth {
		return nil, invalidDocument("document nests deeper than %d levels", MaxDepth)
	}
	return data, nil
}

// EncodeData encodes user data for storage and checks the size limit
// (maxBytes <= 0 means no limit).
func EncodeData(data map[string]any, maxBytes int) ([]byte, error) {
	if data == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, invalidDocument("%v", err)
	}
	if maxBytes > 0 && len(b) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), maxBytes)
	}
	return b, nil
}
