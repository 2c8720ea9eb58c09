package auth

import (
	"strings"
	"sync"
	"time"
)

// Verified-token cache. Our access tokens are stateless: whether one is
// accepted depends only on its bytes, the signing secret (fixed for the
// life of a Service) and the clock (exp, nbf and iat). So once verifyAccess
// accepted a token, the same string is accepted again as long as the clock
// is inside the same window, with the same Identity; the cache remembers
// that window and skips the base64, JSON and HMAC work of a repeated
// token. Console admin-key session tokens are no exception: their tie to
// the admin key is checked when the session is refreshed, not on the
// token (console.go). Only successes are cached, each Service has its own
// cache (so its own secret), and a hit outside the window falls back to
// the full verification, which refuses the token as before.
const (
	// verifiedCacheSize bounds the entries; past it an arbitrary entry is
	// evicted for each new one.
	verifiedCacheSize = 10000
	// maxCachedTokenBytes: longer tokens are verified every time, so the
	// cache holds at most verifiedCacheSize × this many key bytes.
	maxCachedTokenBytes = 2048
)

// verifiedCache maps an access token to what verifyAccess made of it. It is
// safe for concurrent use.
type verifiedCache struct {
	mu  sync.RWMutex
	m   map[string]verifiedEntry
	max int
}

type verifiedEntry struct {
	id *Identity // never modified after it is stored
	// The token is valid at now iff !now.Before(from) && now.Before(exp),
	// exactly the checks of jwt's validator (no leeway): from is the later
	// of iat and nbf (zero when the token has neither).
	from, exp time.Time
}

func newVerifiedCache(max int) *verifiedCache {
	return &verifiedCache{m: make(map[string]verifiedEntry), max: max}
}

// get returns a copy of the Identity of tok when it was verified before and
// now is inside its validity window. The copy's Roles and Claims are shared
// with the cache, as they are shared by every caller of one token: they
// must not be modified.
func (c *verifiedCache) get(tok string, now time.Time) (*Identity, bool) {
	c.mu.RLock()
	e, ok := c.m[tok]
	c.mu.RUnlock()
	if !ok {
		return nil, false
	}
	if !now.Before(e.exp) {
		// Expired for good (the clock may go back in tests, but then the
		// full verification accepts it again).
		c.mu.Lock()
		if cur, ok := c.m[tok]; ok && cur.id == e.id {
			delete(c.m, tok)
		}
		c.mu.Unlock()
		return nil, false
	}
	if now.Before(e.from) {
		return nil, false
	}
	id := *e.id
	return &id, true
}

// put remembers a token verifyAccess accepted.
func (c *verifiedCache) put(tok string, e verifiedEntry) {
	if len(tok) > maxCachedTokenBytes || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[tok]; !ok {
		for k := range c.m { // map order is randomized: a cheap random victim
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
		}
	}
	// A copy: tok may be a slice of a much longer header value (spaces
	// after "Bearer "), which the key must not keep alive.
	c.m[strings.Clone(tok)] = e
}

// len is the number of entries (tests).
func (c *verifiedCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
