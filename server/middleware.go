package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
)

// headerRequestID is X-Request-ID in canonical form (headers are indexed
// directly as maps on the hot path).
const headerRequestID = "X-Request-Id"

// maxRequestIDLen bounds an echoed X-Request-ID so a client cannot make us
// log or reflect arbitrarily large headers.
const maxRequestIDLen = 128

var (
	requestIDPrefix = newRequestIDPrefix()
	requestIDSeq    atomic.Uint64
)

func newRequestIDPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// requestID echoes a sane X-Request-ID or generates one (a random
// per-process prefix plus a counter: unique and allocation-light).
func (s *Server) requestID(c *gin.Context) {
	id := c.Request.Header[headerRequestID]
	if len(id) != 1 || !validRequestID(id[0]) {
		var b [40]byte
		out := append(b[:0], requestIDPrefix...)
		out = append(out, '-')
		out = strconv.AppendUint(out, requestIDSeq.Add(1), 10)
		id = []string{string(out)}
	}
	// The request's own header slice is reused as the response value: it
	// is never modified by either side.
	c.Writer.Header()[headerRequestID] = id
	c.Next()
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// observe records the request metrics and a Debug request log line.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	elapsed := time.Since(start)
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	s.metrics.observe(c.Request.Method, route, status, elapsed)
	if s.log.Enabled(c.Request.Context(), slog.LevelDebug) {
		s.log.LogAttrs(c.Request.Context(), slog.LevelDebug, "request",
			slog.String("method", truncate(c.Request.Method, 16)),
			slog.String("path", c.Request.URL.Path),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Duration("elapsed", elapsed),
			slog.Int("bytes", c.Writer.Size()),
			slog.String("request_id", c.Writer.Header().Get(headerRequestID)),
		)
	}
}

// recover turns a handler panic into a 500 INTERNAL JSON response and an
// error log with the stack. http.ErrAbortHandler keeps its meaning (abort the
// response silently).
func (s *Server) recover(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
			panic(v)
		}
		s.log.ErrorContext(c.Request.Context(), "panic in handler",
			"method", c.Request.Method, "path", c.Request.URL.Path,
			"request_id", c.Writer.Header().Get(headerRequestID),
			"panic", v, "stack", string(debug.Stack()))
		if c.Writer.Written() {
			// Too late for a clean error: cut the connection so the
			// client sees a broken response, not a truncated success.
			panic(http.ErrAbortHandler)
		}
		ae := errorf(http.StatusInternalServerError, codeInternal, "Internal server error.")
		s.writeError(c, ae)
	}()
	c.Next()
}
