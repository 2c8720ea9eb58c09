package auth

import (
	"sync"
	"time"
)

// maxLimiterKeys bounds the usernames and IPs the login limiter tracks
// (roughly 200 bytes each). Past it, expired entries are dropped first, then
// arbitrary idle ones: an attacker spraying usernames can only make the
// limiter forget, never make it grow.
const maxLimiterKeys = 50_000

// loginLimiter counts failed logins per key ("u:"+username key, "ip:"+IP) in
// a sliding window. Attempts in flight count as failures until they finish,
// so concurrent guesses cannot overshoot the limit.
type loginLimiter struct {
	max     int
	window  time.Duration
	maxKeys int

	mu      sync.Mutex
	entries map[string]*failures
}

type failures struct {
	times   []time.Time // failures inside the window, oldest first, at most max
	pending int         // attempts begun and not yet finished
}

func newLoginLimiter(l Limit) *loginLimiter {
	if l.Failures < 0 {
		return nil // disabled
	}
	return &loginLimiter{max: l.Failures, window: l.Window, maxKeys: maxLimiterKeys, entries: make(map[string]*failures)}
}

// attempt is one login in progress; exactly one of its methods is called
// when it ends. A nil attempt (limiter disabled) ignores them.
type attempt struct {
	l       *loginLimiter
	userKey string // "" when the username is not tracked
	ipKey   string
}

// begin admits a login attempt for the username key and client IP (either
// may be empty), or refuses it with *RateLimitError.
func (l *loginLimiter) begin(userKey, ip string, now time.Time) (*attempt, error) {
	if l == nil {
		return nil, nil
	}
	a := &attempt{l: l}
	if userKey != "" {
		a.userKey = "u:" + userKey
	}
	if ip != "" {
		a.ipKey = "ip:" + ip
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var retry time.Duration
	for _, k := range a.keys() {
		if r := l.retryAfter(k, now); r > retry {
			retry = r
		}
	}
	if retry > 0 {
		return nil, &RateLimitError{RetryAfter: retry}
	}
	for _, k := range a.keys() {
		l.entry(k, now).pending++
	}
	return a, nil
}

func (a *attempt) keys() []string {
	ks := make([]string, 0, 2)
	if a.userKey != "" {
		ks = append(ks, a.userKey)
	}
	if a.ipKey != "" {
		ks = append(ks, a.ipKey)
	}
	return ks
}

// retryAfter returns how long until key may make another attempt (0: now).
// Caller holds l.mu.
func (l *loginLimiter) retryAfter(key string, now time.Time) time.Duration {
	e := l.entries[key]
	if e == nil {
		return 0
	}
	e.prune(now, l.window)
	excess := len(e.times) + e.pending - l.max // attempts over the limit, minus one
	if excess < 0 {
		return 0
	}
	if excess >= len(e.times) {
		// Only finishing attempts can free a slot; they take about as
		// long as one bcrypt comparison.
		return time.Second
	}
	// The slot frees when the (excess+1)-th oldest failure leaves the window.
	return e.times[excess].Add(l.window).Sub(now)
}

// entry returns the entry for key, creating it (and evicting when full).
// Caller holds l.mu.
func (l *loginLimiter) entry(key string, now time.Time) *failures {
	if e := l.entries[key]; e != nil {
		return e
	}
	if len(l.entries) >= l.maxKeys {
		l.evict(now)
	}
	e := &failures{}
	l.entries[key] = e
	return e
}

// evict drops entries with no failure left in the window, then, if that was
// not enough, idle entries in map order until 10% of the room is free.
// Entries with attempts in flight are kept. Caller holds l.mu.
func (l *loginLimiter) evict(now time.Time) {
	for k, e := range l.entries {
		if e.pending == 0 && (len(e.times) == 0 || !e.times[len(e.times)-1].After(now.Add(-l.window))) {
			delete(l.entries, k)
		}
	}
	target := l.maxKeys - max(1, l.maxKeys/10)
	for k, e := range l.entries {
		if len(l.entries) <= target {
			break
		}
		if e.pending == 0 {
			delete(l.entries, k)
		}
	}
}

// prune drops failures that left the window.
func (e *failures) prune(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	i := 0
	for i < len(e.times) && !e.times[i].After(cut) {
		i++
	}
	if i > 0 {
		e.times = append(e.times[:0], e.times[i:]...)
	}
}

// failed ends an attempt whose credentials were wrong.
func (a *attempt) failed(now time.Time) {
	if a == nil {
		return
	}
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range a.keys() {
		e := l.entry(k, now)
		e.pending = max(0, e.pending-1)
		e.prune(now, l.window)
		e.times = append(e.times, now)
		if len(e.times) > l.max {
			e.times = append(e.times[:0], e.times[len(e.times)-l.max:]...)
		}
	}
}

// succeeded ends a successful login: the username's failures are forgotten.
// The IP's are kept, or an attacker owning one account could clear its IP
// counter between guesses at other accounts.
func (a *attempt) succeeded() {
	if a == nil {
		return
	}
	a.finish(true)
}

// abandoned ends an attempt that failed for another reason (a store error).
func (a *attempt) abandoned() {
	if a == nil {
		return
	}
	a.finish(false)
}

func (a *attempt) finish(reset bool) {
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range a.keys() {
		e := l.entries[k]
		if e == nil {
			continue
		}
		e.pending = max(0, e.pending-1)
		if reset && k == a.userKey {
			e.times = nil
		}
		if e.pending == 0 && len(e.times) == 0 {
			delete(l.entries, k)
		}
	}
}
