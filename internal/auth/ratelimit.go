package auth

import (
	"slices"
	"sync"
	"time"
)

// maxLimiterKeys bounds the pairs, usernames and addresses the login limiter
// tracks. Past it, the least recently active entries are dropped: an
// attacker spraying usernames or addresses can only make the limiter forget
// the oldest activity, never make it grow. Each entry holds at most its
// limit's worth of timestamps, and every failure costs the caller one
// (bounded, see hashGate) bcrypt comparison, so the timestamps held within a
// window are bounded by the hashing throughput too.
const maxLimiterKeys = 50_000

// underAttackFailures is what a (username, address) pair may fail while the
// username as a whole is over Limit.UserFailures: guessing from many
// addresses gets slower, yet an address that has not failed yet is always
// let through to check its password.
const underAttackFailures = 3

// loginLimiter counts failed logins in a sliding window under three kinds of
// key (see Limit):
//
//   - "p:" username and address pair: past the limit that pair is refused;
//   - "a:" address, over all usernames: past the ceiling that address is
//     refused (credential stuffing);
//   - "u:" username, over all addresses: never refuses by itself; past its
//     threshold each pair of that username is allowed fewer failures.
//
// Attempts in flight count as failures until they finish, so concurrent
// guesses cannot overshoot a limit.
type loginLimiter struct {
	pairMax, addrMax, userMax int // negative: that key is not limited
	window                    time.Duration
	maxKeys                   int

	mu      sync.Mutex
	entries map[string]*failures
}

type failures struct {
	times   []time.Time // failures inside the window, oldest first, at most the key's limit
	pending int         // attempts begun and not yet finished
	last    time.Time   // last activity, for eviction
}

func newLoginLimiter(l Limit) *loginLimiter {
	if l.Failures < 0 {
		return nil // disabled
	}
	return &loginLimiter{
		pairMax: l.Failures, addrMax: l.AddressFailures, userMax: l.UserFailures,
		window: l.Window, maxKeys: maxLimiterKeys, entries: make(map[string]*failures),
	}
}

// attempt is one login in progress; exactly one of its methods is called
// when it ends. A nil attempt (limiter disabled) ignores them.
type attempt struct {
	l    *loginLimiter
	keys []limKey
}

// limKey is one counter an attempt is charged to, with its limit (the
// number of failures kept).
type limKey struct {
	key  string
	max  int
	pair bool
}

// begin admits a login attempt for the username key and client address
// (either may be empty: not tracked), or refuses it with *RateLimitError.
func (l *loginLimiter) begin(userKey, addr string, now time.Time) (*attempt, error) {
	if l == nil {
		return nil, nil
	}
	a := &attempt{l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	var retry time.Duration
	if userKey != "" {
		pairMax := l.pairMax
		if l.userMax >= 0 && l.failuresOf("u:"+userKey, now) >= l.userMax {
			pairMax = min(pairMax, underAttackFailures)
		}
		pk := limKey{key: "p:" + userKey + "\x00" + addr, max: l.pairMax, pair: true}
		retry = max(retry, l.retryAfter(pk.key, pairMax, now))
		a.keys = append(a.keys, pk)
		if l.userMax >= 0 {
			a.keys = append(a.keys, limKey{key: "u:" + userKey, max: l.userMax})
		}
	}
	if addr != "" && l.addrMax >= 0 {
		ak := limKey{key: "a:" + addr, max: l.addrMax}
		retry = max(retry, l.retryAfter(ak.key, ak.max, now))
		a.keys = append(a.keys, ak)
	}
	if retry > 0 {
		return nil, &RateLimitError{RetryAfter: retry}
	}
	for _, k := range a.keys {
		e := l.entry(k.key, now)
		e.pending++
		e.last = now
	}
	return a, nil
}

// failuresOf is the number of failures of key inside the window. Caller
// holds l.mu.
func (l *loginLimiter) failuresOf(key string, now time.Time) int {
	e := l.entries[key]
	if e == nil {
		return 0
	}
	e.prune(now, l.window)
	return len(e.times)
}

// retryAfter returns how long until key may make another attempt when it
// may fail limit times per window (0: now). Caller holds l.mu.
func (l *loginLimiter) retryAfter(key string, limit int, now time.Time) time.Duration {
	e := l.entries[key]
	if e == nil {
		return 0
	}
	e.prune(now, l.window)
	excess := len(e.times) + e.pending - limit // attempts over the limit, minus one
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
	e := &failures{last: now}
	l.entries[key] = e
	return e
}

// evict drops entries with no failure left in the window, then, if that was
// not enough, the least recently active ones until 10% of the room is free.
// Entries with attempts in flight are kept. Caller holds l.mu.
func (l *loginLimiter) evict(now time.Time) {
	idle := make([]string, 0, len(l.entries))
	for k, e := range l.entries {
		if e.pending > 0 {
			continue
		}
		if len(e.times) == 0 || !e.times[len(e.times)-1].After(now.Add(-l.window)) {
			delete(l.entries, k)
			continue
		}
		idle = append(idle, k)
	}
	target := l.maxKeys - max(1, l.maxKeys/10)
	if len(l.entries) <= target {
		return
	}
	slices.SortFunc(idle, func(a, b string) int { return l.entries[a].last.Compare(l.entries[b].last) })
	for _, k := range idle {
		if len(l.entries) <= target {
			break
		}
		delete(l.entries, k)
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
	for _, k := range a.keys {
		e := l.entry(k.key, now)
		e.pending = max(0, e.pending-1)
		e.last = now
		e.prune(now, l.window)
		e.times = append(e.times, now)
		if len(e.times) > k.max {
			e.times = append(e.times[:0], e.times[len(e.times)-k.max:]...)
		}
	}
}

// succeeded ends a successful login: the pair's failures are forgotten. The
// address's are kept, or an attacker owning one account could clear its
// address counter between guesses at other accounts; the username's are
// kept so that the owner logging in does not lift the slow-down on the
// attacker's addresses.
func (a *attempt) succeeded() {
	if a == nil {
		return
	}
	a.finish(true)
}

// abandoned ends an attempt that failed for another reason (a store error,
// a busy server).
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
	for _, k := range a.keys {
		e := l.entries[k.key]
		if e == nil {
			continue
		}
		e.pending = max(0, e.pending-1)
		if reset && k.pair {
			e.times = nil
		}
		if e.pending == 0 && len(e.times) == 0 {
			delete(l.entries, k.key)
		}
	}
}
