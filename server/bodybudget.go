package server

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxBodyBytesInFlight bounds the request body bytes that all
// requests together hold at once (Config.MaxBodyBytesInFlight).
const DefaultMaxBodyBytesInFlight = 64 << 20

// errBodyBudget is what a request body read returns when the server-wide
// budget of body bytes in flight is spent; readBody answers it with 503
// UNAVAILABLE and Retry-After.
var errBodyBudget = errors.New("server: request body bytes in flight at their limit")

// bodyBudget counts the request body bytes received and not yet released
// by all requests together. Bytes are counted as they arrive (not as
// announced by Content-Length), so a client that trickles a body holds
// only what it has sent; and a request that would take the total over max
// fails at once rather than wait, so slow clients cannot queue up memory
// either.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// take counts n more bytes in; false (and nothing counted) when that would
// exceed max.
func (b *bodyBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *bodyBudget) give(n int64) { b.used.Add(-n) }

// bodyLease is what one request took from the budget; limitBodies gives
// it back when the request's handler is done.
type bodyLease struct {
	budget *bodyBudget
	taken  atomic.Int64
}

// budgetedReader counts the bytes read from a request body against the
// request's lease.
type budgetedReader struct {
	io.Reader
	lease *bodyLease
}

func (r budgetedReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if n > 0 {
		if !r.lease.budget.take(int64(n)) {
			return 0, errBodyBudget
		}
		r.lease.taken.Add(int64(n))
	}
	return n, err
}

const bodyLeaseKey = "loom.bodyLease"

// budgeted returns the request body as a reader counted against the
// budget. It wraps a reader rather than replacing Request.Body: net/http
// looks at the body's own type to close a connection at once when a
// handler refused a large body unread, instead of draining it first.
func (s *Server) budgeted(c *gin.Context) io.Reader {
	lease := &bodyLease{budget: s.bodies}
	c.Set(bodyLeaseKey, lease)
	return budgetedReader{Reader: c.Request.Body, lease: lease}
}

// limitBodies gives back what a request took from the body budget once
// its handler is done (the handlers release their buffers by then; a
// buffer kept in the pool is bounded by maxPooledBuf) — also when it
// panics: recover, further out, turns the panic into a 500, and the
// bytes would otherwise stay counted for the life of the process.
func (s *Server) limitBodies(c *gin.Context) {
	defer func() {
		if v, ok := c.Get(bodyLeaseKey); ok {
			s.bodies.give(v.(*bodyLease).taken.Load())
		}
	}()
	c.Next()
}

// budgetBody replaces the request body by one counted against the budget,
// for handlers outside this package that read Request.Body themselves
// (the webhook handlers, which read every body they accept).
func (s *Server) budgetBody(c *gin.Context) {
	if r := c.Request; r.Body != nil && r.Body != http.NoBody {
		r.Body = struct {
			io.Reader
			io.Closer
		}{s.budgeted(c), r.Body}
	}
	c.Next()
}

// bodyBusy is the answer to a body read refused by the budget: the server
// as a whole is busy, not this request too large, so 503 with Retry-After
// (writeError adds it) tells a well-behaved client to come back.
func bodyBusy() *apiError {
	return errorf(http.StatusServiceUnavailable, codeUnavailable, "The server is receiving too many request bodies at once; retry shortly.")
}

// bodyTimeout is the answer to a body that did not arrive within the read
// timeout.
func bodyTimeout(d time.Duration) *apiError {
	return errorf(http.StatusBadRequest, codeBadRequest, "The request body did not arrive within %s.", d)
}

// newBodyMetrics registers the gauge of body bytes in flight.
func newBodyMetrics(reg *prometheus.Registry, b *bodyBudget) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_http_request_body_bytes_in_flight",
		Help: "Request body bytes received and held by requests in progress (bounded by [limits] max_body_bytes_in_flight).",
	}, func() float64 { return float64(b.used.Load()) }))
}
