package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
)

const dbKey = "loom.db"

// database validates the {db} URL segment: [A-Za-z0-9_-]{1,64}. Every valid
// name exists (a database is created by its first write); "default" is the
// one clients use when they have no reason to pick another.
func (s *Server) database(c *gin.Context) {
	db := c.Param("db")
	if !collections.ValidDatabase(db) {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q: use 1 to %d characters of [A-Za-z0-9_-].", truncate(db, 80), collections.MaxDatabaseName))
		return
	}
	c.Next()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// readBody reads the whole request body into a pooled buffer, bounded by
// MaxRequestBytes (413 REQUEST_TOO_LARGE). The buffer grows with the bytes
// received, never ahead of them to an announced Content-Length: a client
// that announces 10 MiB and sends nothing costs nothing. Every byte counts
// against the server's body budget (503 UNAVAILABLE when it is spent) and
// must arrive within the read timeout. Handlers authorize what they can
// before calling it (authorizeBody). The caller must putBuf the result
// once nothing refers to its bytes any more.
func (s *Server) readBody(c *gin.Context) (*bytes.Buffer, error) {
	r := c.Request
	if r.ContentLength > s.maxRequestBytes {
		return nil, &http.MaxBytesError{Limit: s.maxRequestBytes}
	}
	buf := getBuf()
	if r.Body == nil || r.Body == http.NoBody {
		return buf, nil
	}
	body := io.NopCloser(s.budgeted(c))
	_, err := buf.ReadFrom(http.MaxBytesReader(c.Writer, body, s.maxRequestBytes))
	if err != nil {
		putBuf(buf)
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, mbe
		case errors.Is(err, errBodyBudget):
			return nil, bodyBusy()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, bodyTimeout(s.readTimeout)
		}
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "Could not read the request body.")
	}
	return buf, nil
}

// decodeObject decodes a body that must be one JSON object (numbers kept
// exact). Invalid JSON, a non-object and trailing data are 400 INVALID_JSON.
// readObject reads the request body as one JSON object.
func (s *Server) readObject(c *gin.Context) (map[string]any, error) {
	body, err := s.readBody(c)
	if err != nil {
		return nil, err
	}
	defer putBuf(body)
	return decodeObject(body.Bytes())
}

func decodeObject(b []byte) (map[string]any, error) {
	m, err := collections.DecodeObject(b)
	if err != nil {
		return nil, invalidJSON(err)
	}
	return m, nil
}

func invalidJSON(err error) *apiError {
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF):
		msg = "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "the body ends in the middle of a JSON value"
	}
	return errorf(http.StatusBadRequest, codeInvalidJSON, "The body is not a valid JSON object: %s.", strings.TrimSuffix(msg, "."))
}

// checkObject checks that b is exactly one JSON object (for bodies decoded
// by a stricter parser afterwards, like ParseQuery).
func checkObject(b []byte) error {
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 {
		return invalidJSON(io.EOF)
	}
	if !json.Valid(b) {
		return errorf(http.StatusBadRequest, codeInvalidJSON, "The body is not valid JSON.")
	}
	if t[0] != '{' {
		return errorf(http.StatusBadRequest, codeInvalidJSON, "The body must be a JSON object.")
	}
	return nil
}

func isBlank(b []byte) bool { return len(bytes.TrimLeft(b, " \t\r\n")) == 0 }

// wrapper is the {"doc": {...}, "ifMatch": [...]} body of PUT and PATCH (and
// {"ifMatch": [...]} of DELETE).
type wrapper struct {
	Doc     map[string]any
	HasDoc  bool
	IfMatch []collections.Filter
}

// parseWrapper reads the keys of a PUT/PATCH/DELETE body. Unknown keys are
// rejected so that a misspelt "ifMatch" never turns a conditional write into
// an unconditional one.
func parseWrapper(m map[string]any, allowDoc bool) (wrapper, error) {
	var w wrapper
	for k, v := range m {
		switch k {
		case "doc":
			if !allowDoc {
				return w, errorf(http.StatusBadRequest, codeBadRequest, "A DELETE body may only carry \"ifMatch\".")
			}
			doc, ok := v.(map[string]any)
			if !ok {
				return w, errorf(http.StatusBadRequest, codeBadRequest, "\"doc\" must be a JSON object.")
			}
			w.Doc, w.HasDoc = doc, true
		case "ifMatch":
			fs, err := parseFilters(v, "ifMatch")
			if err != nil {
				return w, err
			}
			w.IfMatch = fs
		default:
			if allowDoc {
				return w, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q: the body is {\"doc\": {...}, \"ifMatch\": [...]}.", truncate(k, 64))
			}
			return w, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q: the body is {\"ifMatch\": [...]}.", truncate(k, 64))
		}
	}
	if allowDoc && !w.HasDoc {
		return w, errorf(http.StatusBadRequest, codeBadRequest, "The body must be {\"doc\": {...}, \"ifMatch\": [...]?}.")
	}
	return w, nil
}

// parseFilters converts a decoded ifMatch value (a list of {field, op,
// value}) into filters and validates them (unknown op → INVALID_QUERY). A
// JSON null means no filters.
func parseFilters(v any, name string) ([]collections.Filter, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "%q must be a list of filters {\"field\", \"op\", \"value\"}.", name)
	}
	if len(list) > collections.MaxFilters {
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "%q has more than %d filters.", name, collections.MaxFilters)
	}
	fs := make([]collections.Filter, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "%s[%d] must be an object {\"field\", \"op\", \"value\"}.", name, i)
		}
		var f collections.Filter
		for k, x := range m {
			switch k {
			case "field":
				s, ok := x.(string)
				if !ok {
					return nil, errorf(http.StatusBadRequest, codeBadRequest, "%s[%d].field must be a string.", name, i)
				}
				f.Field = s
			case "op":
				s, ok := x.(string)
				if !ok {
					return nil, errorf(http.StatusBadRequest, codeBadRequest, "%s[%d].op must be a string.", name, i)
				}
				f.Op = collections.Op(s)
			case "value":
				f.Value = x
			default:
				return nil, errorf(http.StatusBadRequest, codeBadRequest, "%s[%d] has unknown field %q.", name, i, truncate(k, 64))
			}
		}
		fs[i] = f
	}
	if err := collections.NormalizeFilters(fs); err != nil {
		return nil, err
	}
	return fs, nil
}

// ifMatchHeader turns an If-Match header into a precondition on version:
// `"3"`, `W/"3"` and `3` all mean version == 3; a list of tags means version
// in the list; `*` means the document must exist. ok is false when the header
// is absent.
func ifMatchHeader(r *http.Request) (f collections.Filter, ok bool, err error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return f, false, nil
	}
	if h == "*" {
		return collections.Filter{Field: collections.FieldVersion, Op: collections.OpGe, Value: json.Number("1")}, true, nil
	}
	var versions []any
	for _, tag := range strings.Split(h, ",") {
		tag = strings.TrimSpace(tag)
		tag = strings.TrimPrefix(tag, "W/")
		if len(tag) >= 2 && tag[0] == '"' && tag[len(tag)-1] == '"' {
			tag = tag[1 : len(tag)-1]
		}
		n, perr := strconv.ParseInt(tag, 10, 64)
		if perr != nil || n < 0 {
			return f, false, errorf(http.StatusBadRequest, codeBadRequest, "If-Match must be a document version such as \"3\" (the ETag), or *.")
		}
		versions = append(versions, json.Number(strconv.FormatInt(n, 10)))
	}
	if len(versions) == 1 {
		return collections.Filter{Field: collections.FieldVersion, Op: collections.OpEq, Value: versions[0]}, true, nil
	}
	return collections.Filter{Field: collections.FieldVersion, Op: collections.OpIn, Value: versions}, true, nil
}

// docPathParam returns the *path URL parameter without its leading slash.
func docPathParam(c *gin.Context) string {
	p := c.Param("path")
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	return p
}

// segments counts the segments of a path (for routing GET between a document
// and a collection).
func segments(p string) int { return strings.Count(p, "/") + 1 }

func documentURL(db, path string) string {
	return "/api/v1/databases/" + db + "/documents/" + path // one allocation, on every create
}
