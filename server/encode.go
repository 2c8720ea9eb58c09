package server

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
)

const contentTypeJSON = "application/json; charset=utf-8"

// Shared, never-modified header values: assigning them skips the
// canonicalization and slice allocation of Header.Set on the hot path.
var (
	contentTypeJSONValue = []string{contentTypeJSON}
	nosniffValue         = []string{"nosniff"}
)

// sendJSON writes a JSON response body with its status.
func sendJSON(c *gin.Context, status int, body []byte) {
	h := c.Writer.Header()
	h["Content-Type"] = contentTypeJSONValue
	h["X-Content-Type-Options"] = nosniffValue
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body)
}

// maxPooledBuf keeps one huge response from pinning memory in the pool.
const maxPooledBuf = 1 << 20

var bufPool = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 1024)) }}

func getBuf() *bytes.Buffer { return bufPool.Get().(*bytes.Buffer) }

func putBuf(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuf {
		return
	}
	b.Reset()
	bufPool.Put(b)
}

// writeDoc sends one document with its ETag. Encoding goes through
// Document.AppendJSON into a pooled buffer: no reflection over the envelope
// and no per-request buffer allocation.
func (s *Server) writeDoc(c *gin.Context, status int, d *collections.Document) {
	buf := getBuf()
	defer putBuf(buf)
	if err := d.AppendJSON(buf); err != nil {
		s.writeError(c, err)
		return
	}
	c.Writer.Header()["Etag"] = []string{etag(d.Version)}
	sendJSON(c, status, buf.Bytes())
}

// headerNextCursor carries a query's next cursor under [compat] syntrix,
// where the body is a bare array (absent on the last page).
const headerNextCursor = "X-Next-Cursor"

// writeDocs sends {"docs":[...],"nextCursor":"..."|null}; under [compat]
// syntrix, the bare array [...] with the cursor in X-Next-Cursor, as
// Syntrix's server and its clients' decoders have it.
func (s *Server) writeDocs(c *gin.Context, res collections.QueryResult) {
	buf := getBuf()
	defer putBuf(buf)
	if !s.syntrix {
		buf.WriteString(`{"docs":`)
	}
	if err := appendDocs(buf, res.Docs); err != nil {
		s.writeError(c, err)
		return
	}
	if s.syntrix {
		if res.NextCursor != "" {
			c.Writer.Header()[headerNextCursor] = []string{res.NextCursor}
		}
	} else {
		writeNextCursor(buf, res.NextCursor)
	}
	sendJSON(c, 200, buf.Bytes())
}

// writeNextCursor ends a page after its docs array: `,"nextCursor":<cursor
// or null>}`.
func writeNextCursor(buf *bytes.Buffer, next string) {
	buf.WriteString(`,"nextCursor":`)
	if next == "" {
		buf.WriteString("null")
	} else {
		writeString(buf, next)
	}
	buf.WriteByte('}')
}

// appendDocs appends docs as a JSON array of their wire envelopes ("[]"
// when there are none).
func appendDocs(buf *bytes.Buffer, docs []*collections.Document) error {
	buf.WriteByte('[')
	for i, d := range docs {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := d.AppendJSON(buf); err != nil {
			return err
		}
	}
	buf.WriteByte(']')
	return nil
}

func etag(version int64) string {
	var b [24]byte
	out := append(b[:0], '"')
	out = strconv.AppendInt(out, version, 10)
	out = append(out, '"')
	return string(out)
}

const hexDigits = "0123456789abcdef"

// writeString writes s as a JSON string, escaping like encoding/json (HTML
// characters included, invalid UTF-8 replaced) without allocating.
func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			buf.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				buf.WriteByte('\\')
				buf.WriteByte(c)
			case '\n':
				buf.WriteString(`\n`)
			case '\r':
				buf.WriteString(`\r`)
			case '\t':
				buf.WriteString(`\t`)
			default:
				buf.WriteString(`\u00`)
				buf.WriteByte(hexDigits[c>>4])
				buf.WriteByte(hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf.WriteString(s[start:i])
			buf.WriteString(`\ufffd`)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf.WriteString(s[start:i])
			buf.WriteString(`\u202`)
			buf.WriteByte(hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}
