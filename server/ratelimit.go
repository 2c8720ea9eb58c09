package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate limiting: one token bucket per client — the authenticated uid, or
// the remote IP for anonymous callers. The admin key is never limited.

// Defaults: generous enough that one client running a benchmark is not
// throttled unless the operator configures lower limits.
const (
	DefaultRateLimit = 20000 // requests per second per client
	DefaultRateBurst = 20000
	// limiterIdle is how long an unused bucket is kept.
	limiterIdle = 5 * time.Minute
)

type clientLimiter struct {
	lim  *rate.Limiter
	seen time.Time
}

// limiters is a bounded-lifetime set of per-client token buckets.
type limiters struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	m         map[string]*clientLimiter
	lastSweep time.Time
}

func newLimiters(perSecond float64, burst int) *limiters {
	if perSecond <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = int(math.Ceil(perSecond))
	}
	return &limiters{limit: rate.Limit(perSecond), burst: burst, m: map[string]*clientLimiter{}}
}

// reserve takes one token for client and reports how long to wait when
// none is available (0 = go ahead).
func (l *limiters) reserve(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > limiterIdle {
		for k, cl := range l.m {
			if now.Sub(cl.seen) > limiterIdle {
				delete(l.m, k)
			}
		}
		l.lastSweep = now
	}
	cl := l.m[client]
	if cl == nil {
		cl = &clientLimiter{lim: rate.NewLimiter(l.limit, l.burst)}
		l.m[client] = cl
	}
	cl.seen = now
	r := cl.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

// rateLimited is the 429 RATE_LIMITED error; writeError adds Retry-After.
func rateLimited(wait time.Duration) *apiError {
	e := errorf(http.StatusTooManyRequests, codeRateLimited, "Too many requests; retry after %d s.", max(1, int(math.Ceil(wait.Seconds()))))
	e.retryAfter = wait
	return e
}
