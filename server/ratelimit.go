package server

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate limiting: one token bucket per client — the authenticated uid, or
// the client address for anonymous callers. The admin key is never limited.
// Signups have buckets of their own per client address.

// Defaults: generous enough that one client running a benchmark is not
// throttled unless the operator configures lower limits.
const (
	DefaultRateLimit = 20000 // requests per second per client
	DefaultRateBurst = 20000
	// DefaultSignupRate and DefaultSignupBurst: signups per minute per
	// client address, and how many may come at once.
	DefaultSignupRate  = 5
	DefaultSignupBurst = 10
	// sweepInterval is how often buckets that refilled are dropped.
	sweepInterval = time.Minute
	// maxBuckets bounds the clients a limiter tracks (about 200 bytes
	// each). Past it, full buckets go first, then the least recently used.
	maxBuckets = 100_000
)

type clientLimiter struct {
	lim  *rate.Limiter
	seen time.Time
}

// limiters is a bounded set of per-client token buckets. A nil *limiters
// limits nothing.
type limiters struct {
	limit   rate.Limit
	burst   int
	maxKeys int

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
	return &limiters{limit: rate.Limit(perSecond), burst: burst, maxKeys: maxBuckets, m: map[string]*clientLimiter{}}
}

// reserve takes one token for client and reports how long to wait when
// none is available (0 = go ahead).
func (l *limiters) reserve(client string, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > sweepInterval {
		l.sweep(now)
	}
	cl := l.m[client]
	if cl == nil {
		if len(l.m) >= l.maxKeys {
			l.evict(now)
		}
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

// sweep drops the buckets that refilled: a full bucket is the same as a new
// one, so forgetting it lets no client through sooner. Caller holds l.mu.
func (l *limiters) sweep(now time.Time) {
	for k, cl := range l.m {
		if cl.lim.TokensAt(now) >= float64(l.burst) {
			delete(l.m, k)
		}
	}
	l.lastSweep = now
}

// evict makes room when the limiter is full: refilled buckets first, then
// the least recently used until 10% of the room is free. Caller holds l.mu.
func (l *limiters) evict(now time.Time) {
	l.sweep(now)
	target := l.maxKeys - max(1, l.maxKeys/10)
	if len(l.m) <= target {
		return
	}
	keys := make([]string, 0, len(l.m))
	for k := range l.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return l.m[a].seen.Compare(l.m[b].seen) })
	for _, k := range keys[:len(keys)-target] {
		delete(l.m, k)
	}
}

// rateLimited is the 429 RATE_LIMITED error; writeError adds Retry-After.
func rateLimited(wait time.Duration) *apiError {
	e := errorf(http.StatusTooManyRequests, codeRateLimited, "Too many requests; retry after %d s.", retrySeconds(wait))
	e.retryAfter = wait
	return e
}

// retrySeconds is wait in whole seconds, rounded up and at least 1.
func retrySeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
