package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/quick"
	"unsafe"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

func TestToAPIError(t *testing.T) {
	t.Parallel()
	doc := &collections.Document{Path: "rooms/r1", Collection: "rooms", ID: "r1", Version: 3}
	cases := []struct {
		name      string
		err       error
		status    int
		code      string
		inBody    string
		notInBody string
	}{
		{"not found", fmt.Errorf("sqlite: get rooms/x: %w", collections.ErrNotFound), 404, codeNotFound, "", "sqlite"},
		{"already exists", collections.ErrAlreadyExists, 409, codeAlreadyExists, "", ""},
		{"cursor conflict", collections.ErrCursorConflict, 409, codeConflict, "", ""},
		{"precondition", &collections.PreconditionError{Path: "rooms/r1", Current: doc}, 412, codePreconditionFailed, `"details":{"current":{"id":"r1","collection":"rooms","version":3,`, ""},
		{"precondition absent", &collections.PreconditionError{Path: "rooms/r1"}, 412, codePreconditionFailed, `"details":{"current":null}`, ""},
		{"too large", fmt.Errorf("sqlite: commit: %w", collections.ErrTooLarge), 413, codeDocumentTooLarge, "", "sqlite"},
		{"request too large", &http.MaxBytesError{Limit: 10}, 413, codeRequestTooLarge, "", ""},
		{"invalid path", fmt.Errorf("%w: empty segment", collections.ErrInvalidPath), 400, codeInvalidPath, `Invalid path: empty segment.`, ""},
		{"invalid query", fmt.Errorf("%w: unknown operator", collections.ErrInvalidQuery), 400, codeInvalidQuery, "", ""},
		{"invalid document with engine prefix", fmt.Errorf("sqlite: commit rooms/r1: %w", fmt.Errorf("%w: too deep", collections.ErrInvalidDocument)), 400, codeBadRequest, `"message":"Invalid document: too deep."`, "sqlite"},
		{"closed", collections.ErrClosed, 503, codeUnavailable, "", ""},
		{"deadline", context.DeadlineExceeded, 503, codeUnavailable, "", ""},
		{"batch index", &collections.WriteError{Index: 4, Path: "a/b", Err: collections.ErrNotFound}, 404, codeNotFound, `"details":{"index":4}`, ""},
		{"batch index with current", &collections.WriteError{Index: 2, Err: &collections.PreconditionError{Current: doc}}, 412, codePreconditionFailed, `"index":2`, ""},
		{"own error in a batch", &collections.WriteError{Index: 7, Err: errorf(403, codePermissionDenied, "no")}, 403, codePermissionDenied, `"details":{"index":7}`, ""},
		// Package access's errors: the wire bytes they had when the server
		// built them itself.
		{"denied anonymous", &access.Denied{Anonymous: true, What: "read rooms/r1"}, 401, codeUnauthenticated, `{"code":"UNAUTHENTICATED","message":"Unauthorized: authentication required to read rooms/r1."}`, ""},
		{"denied", &access.Denied{What: "list rooms"}, 403, codePermissionDenied, `{"code":"PERMISSION_DENIED","message":"Security rules do not allow you to list rooms."}`, ""},
		{"denied in a batch", &collections.WriteError{Index: 3, Path: "rooms/r1", Err: &access.Denied{What: "update rooms/r1"}}, 403, codePermissionDenied, `{"code":"PERMISSION_DENIED","message":"Security rules do not allow you to update rooms/r1.","details":{"index":3}}`, ""},
		{"system write", access.ErrSystemWrite, 403, codePermissionDenied, `{"code":"PERMISSION_DENIED","message":"System collections cannot be written through the document API."}`, ""},
		{"bad cursor", access.ErrBadCursor, 400, codeInvalidQuery, `{"code":"INVALID_QUERY","message":"startAfter is not a cursor this server returned for this query."}`, ""},
		{"hidden precondition", &collections.WriteError{Index: 1, Err: &access.HiddenPrecondition{Path: "rooms/r1"}}, 412, codePreconditionFailed, `{"code":"PRECONDITION_FAILED","message":"The precondition (ifMatch / If-Match) does not hold for rooms/r1.","details":{"index":1}}`, ""},
		{"unknown", errors.New("sqlite: disk I/O error at /var/secret/loom.db"), 500, codeInternal, `"message":"Internal server error."`, "secret"},
		{"unknown in a batch has no index", &collections.WriteError{Index: 1, Err: errors.New("boom")}, 500, codeInternal, "", "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ae := toAPIError(tc.err)
			if ae.Status != tc.status || ae.Code != tc.code {
				t.Errorf("toAPIError=%d %s, want %d %s", ae.Status, ae.Code, tc.status, tc.code)
			}
			var buf bytes.Buffer
			encodeError(&buf, ae)
			if !json.Valid(buf.Bytes()) {
				t.Fatalf("error body %s is not JSON", buf.Bytes())
			}
			if tc.inBody != "" && !strings.Contains(buf.String(), tc.inBody) {
				t.Errorf("body=%s, want it to contain %s", buf.String(), tc.inBody)
			}
			if tc.notInBody != "" && strings.Contains(buf.String(), tc.notInBody) {
				t.Errorf("body=%s leaks %s", buf.String(), tc.notInBody)
			}
		})
	}
}

// TestWriteString checks the allocation-free JSON string encoder against
// encoding/json.
func TestWriteString(t *testing.T) {
	t.Parallel()
	check := func(s string) bool {
		var buf bytes.Buffer
		writeString(&buf, s)
		want, _ := json.Marshal(s)
		return buf.String() == string(want)
	}
	for _, s := range []string{"", "plain", `q"b\`, "\x00\x1f\n\r\t", "<a&b>", "\u2028\u2029", "\xff\xfe", "héllo 世界 🎉", "a\xc3"} {
		if !check(s) {
			var buf bytes.Buffer
			writeString(&buf, s)
			want, _ := json.Marshal(s)
			t.Errorf("writeString(%q)=%s, want %s", s, buf.String(), want)
		}
	}
	if err := quick.Check(check, nil); err != nil {
		t.Error(err)
	}
}

func TestIfMatchHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		header string
		ok     bool
		bad    bool
		op     collections.Op
		value  string
	}{
		{"", false, false, "", ""},
		{`"3"`, true, false, collections.OpEq, "3"},
		{`W/"3"`, true, false, collections.OpEq, "3"},
		{`3`, true, false, collections.OpEq, "3"},
		{`*`, true, false, collections.OpGe, "1"},
		{`"1", W/"2"`, true, false, collections.OpIn, "[1 2]"},
		{`"x"`, false, true, "", ""},
		{`"-1"`, false, true, "", ""},
		{`"3`, false, true, "", ""},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("PUT", "/", nil)
		if tc.header != "" {
			r.Header.Set("If-Match", tc.header)
		}
		f, ok, err := ifMatchHeader(r)
		if (err != nil) != tc.bad || ok != tc.ok {
			t.Errorf("ifMatchHeader(%q)=ok %v err %v, want ok %v bad %v", tc.header, ok, err, tc.ok, tc.bad)
			continue
		}
		if !ok {
			continue
		}
		if f.Field != "version" || f.Op != tc.op || fmt.Sprint(f.Value) != tc.value {
			t.Errorf("ifMatchHeader(%q)=%+v, want version %s %s", tc.header, f, tc.op, tc.value)
		}
	}
}

func TestParseOrderTerm(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in         string
		field, dir string
		bad        bool
	}{
		{"n", "n", "asc", false},
		{"n:asc", "n", "asc", false},
		{"n:DESC", "n", "desc", false},
		{"-a.b", "a.b", "desc", false},
		{"n:up", "", "", true},
		{"", "", "", true},
		{"-", "", "", true},
		{":desc", "", "", true},
	}
	for _, tc := range cases {
		o, err := parseOrderTerm(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("parseOrderTerm(%q) err=%v, want bad %v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad && (o.Field != tc.field || o.Direction != tc.dir) {
			t.Errorf("parseOrderTerm(%q)=%+v, want %s %s", tc.in, o, tc.field, tc.dir)
		}
	}
}

// newTestServer is a server with admin key "k" on a fresh SQLite store.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(st, Config{AdminKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServer_PanicRecovery checks that a panicking handler becomes a 500
// INTERNAL JSON response that leaks nothing.
func TestServer_PanicRecovery(t *testing.T) {
	t.Parallel()
	s := newTestServer(t)
	s.engine.GET("/panic", func(*gin.Context) { panic("secret internals") })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/panic", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":"INTERNAL"`) || strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("panic response=%d %s, want 500 INTERNAL without internals", rec.Code, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type=%q, want JSON", ct)
	}
}

// TestServer_PanicGivesBackBodyBudget: a handler that panics after reading
// its body still gives the bytes back to the server's body budget (else
// every such panic would shrink the budget for good).
func TestServer_PanicGivesBackBodyBudget(t *testing.T) {
	t.Parallel()
	s := newTestServer(t)
	s.engine.POST("/panic", func(c *gin.Context) {
		if _, err := s.readBody(c); err != nil {
			t.Errorf("readBody: %v", err)
		}
		panic("after the body")
	})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/panic", strings.NewReader(strings.Repeat("x", 1000))))
	if rec.Code != 500 {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if used := s.bodies.used.Load(); used != 0 {
		t.Errorf("body bytes in flight after the panic=%d, want 0", used)
	}
}

// TestAPIErrorSize: every error response allocates an apiError; issue 16's
// Syntrix fields (a string and a slice) took it from the 80-byte size
// class to 112 bytes, +32 B on every error with [compat] syntrix off.
func TestAPIErrorSize(t *testing.T) {
	if n := unsafe.Sizeof(apiError{}); n > 80 {
		t.Errorf("apiError is %d bytes, want at most 80 (its size class before issue 16)", n)
	}
}
