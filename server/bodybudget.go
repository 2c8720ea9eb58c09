package server

import (
	"errors"
	"io"
	"net/http"
	"sync"
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
// either. One client address may hold at most share of it, so a few slow
// uploads from one client (any number of accounts behind one address)
// cannot take the whole budget and make every other client's writes 503.
type bodyBudget struct {
	max, share int64
	used       atomic.Int64 // read lock-free by the gauge

	mu       sync.Mutex
	byClient map[string]int64 // bytes held per client address; "" (admin) is not counted
}

// newBodyBudget bounds all bodies to max and one client to share of it.
func newBodyBudget(total, share int64) *bodyBudget {
	return &bodyBudget{max: total, share: min(share, total), byClient: map[string]int64{}}
}

// bodyShare is one client's part of a budget of max bytes: a quarter, and
// always room for one request of the largest size.
func bodyShare(total, maxRequest int64) int64 { return max(total/4, maxRequest) }

// take counts n more bytes of client in; false (and nothing counted) when
// that would exceed max, or the client's share.
func (b *bodyBudget) take(client string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used.Load()+n > b.max {
		return false
	}
	if client != "" {
		held := b.byClient[client]
		if held+n > b.share {
			return false
		}
		b.byClient[client] = held + n
	}
	b.used.Add(n)
	return true
}

func (b *bodyBudget) give(client string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used.Add(-n)
	if client == "" {
		return
	}
	if left := b.byClient[client] - n; left > 0 {
		b.byClient[client] = left
	} else {
		delete(b.byClient, client)
	}
}

// bodyLease is what one request (or WebSocket message) took from the
// budget; limitBodies gives it back when the request's handler is done.
type bodyLease struct {
	budget *bodyBudget
	client string
	taken  atomic.Int64
}

// release gives back everything the lease took.
func (l *bodyLease) release() { l.budget.give(l.client, l.taken.Load()) }

// budgetedReader counts the bytes read from a request body against the
// request's lease.
type budgetedReader struct {
	io.Reader
	lease *bodyLease
}

func (r budgetedReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if n > 0 {
		if !r.lease.budget.take(r.lease.client, int64(n)) {
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
	var client string // the admin key is bounded by the total only
	if !callerOf(c).Admin {
		client = s.clientAddr(c)
	}
	lease := &bodyLease{budget: s.bodies, client: client}
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
			v.(*bodyLease).release()
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
