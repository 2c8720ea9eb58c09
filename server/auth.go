package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/internal/auth"
)

// untilExpiry is how long a long-lived stream opened with the credential
// may run before it must end (a year when it never expires).
func untilExpiry(exp time.Time) time.Duration {
	if exp.IsZero() {
		return 365 * 24 * time.Hour
	}
	return max(time.Until(exp), 0)
}

// errTokenExpired ends realtime streams whose token expired.
//
// Every UNAUTHENTICATED message starts with "Unauthorized: ": Syntrix's
// TypeScript SDK refreshes its token and re-authenticates only when a
// realtime error message contains "unauthor" (docs/syntrix.md, "Realtime:
// WebSocket and SSE").
var errTokenExpired = errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the token expired; reconnect with a fresh token and resume from your last resumeToken (on WebSocket, send auth with a fresh token before it expires).")

// rateKey identifies the caller for rate limiting: the uid, or the client
// address (see clientAddr) when anonymous.
func rateKey(c *access.Caller, addr string) string {
	if c.UID != "" {
		return "uid:" + c.UID
	}
	return "ip:" + addr
}

// clientAddr is the client's address as every per-address limit keys it
// (rate limit, login and signup limits, streams per address). It is the
// peer address, unless the peer is one of Config.TrustedProxies: then it is
// the rightmost X-Forwarded-For hop that is not a trusted proxy (or
// X-Real-IP), so a client cannot pick its address by sending the header
// itself. gin implements that walk; New configures its trusted list.
//
// An IPv6 address is reduced to its /64: one host usually holds a whole
// /64 and could otherwise present a fresh address for every request.
func (s *Server) clientAddr(c *gin.Context) string {
	if !s.engine.ForwardedByClientIP && c.Request.Header.Get("X-Forwarded-For") != "" {
		// Most likely a reverse proxy nobody told us about: every client
		// behind it shares its address, and so its limits. Say so once.
		s.proxyWarning.Do(func() {
			s.log.Warn("requests carry X-Forwarded-For but [server] trusted_proxies is empty: if a reverse proxy is in front, every client behind it shares its address for the rate, signup and login limits; list the proxy in trusted_proxies",
				"peer", c.RemoteIP())
		})
	}
	ip := c.ClientIP()
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		if ip == "" {
			return c.Request.RemoteAddr
		}
		return ip
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		return netip.PrefixFrom(addr, 64).Masked().String()
	}
	return addr.String()
}

// trustProxies makes clientAddr read X-Forwarded-For and X-Real-IP from
// peers in proxies (addresses or CIDRs) and from no one else. With no proxy
// the headers are not read at all (gin would otherwise trust any peer on a
// unix socket).
func (s *Server) trustProxies(proxies []string) error {
	if len(proxies) == 0 {
		return nil
	}
	if err := s.engine.SetTrustedProxies(proxies); err != nil {
		return fmt.Errorf("server: trusted proxies: %w", err)
	}
	s.engine.ForwardedByClientIP = true
	s.engine.RemoteIPHeaders = []string{"X-Forwarded-For", "X-Real-IP"}
	s.engine.TrustedPlatform = ""
	return nil
}

const callerKey = "loom.caller"

func hashKey(k string) [32]byte { return sha256.Sum256([]byte(k)) }

// credential extracts the presented API key: "Authorization: Bearer <key>"
// or "X-API-Key: <key>". ok is false when none is presented.
func credential(r *http.Request) (key string, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			return strings.TrimSpace(h[7:]), true
		}
		return "", true // some other scheme: presented, but not a key we know
	}
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k, true
	}
	return "", false
}

// authenticate resolves the Caller from the request's credentials and
// applies the rate limit. A credential that is presented but wrong or
// expired is always 401 (never silently anonymous); what the caller may do
// is decided per request by package access.
func (s *Server) authenticate(c *gin.Context) {
	caller, err := s.resolveCaller(c.Request)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Set(callerKey, caller)
	if !s.allowRate(c, caller) {
		return
	}
	c.Next()
}

// resolveCaller checks the presented credential: the admin key, then (when
// auth is configured) access tokens, OIDC tokens and service keys.
func (s *Server) resolveCaller(r *http.Request) (*access.Caller, error) {
	key, ok := credential(r)
	if !ok {
		return access.Anonymous, nil
	}
	// Compare fixed-size hashes so neither content nor length of the admin
	// key leaks through timing.
	h := hashKey(key)
	if subtle.ConstantTimeCompare(h[:], s.adminKeyHash[:]) == 1 {
		return access.AdminKey, nil
	}
	if s.auth != nil && key != "" {
		id, err := s.auth.Authenticate(r.Context(), key)
		if err == nil {
			return access.CallerOfIdentity(id), nil
		}
		if !errors.Is(err, auth.ErrInvalidToken) {
			return nil, err
		}
	}
	return nil, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the credential is not valid or has expired.")
}

func callerOf(c *gin.Context) *access.Caller {
	if v, ok := c.Get(callerKey); ok {
		return v.(*access.Caller)
	}
	return access.Anonymous
}

// allowRate applies the per-client rate limit; it writes the 429 and
// returns false when the caller is over it.
func (s *Server) allowRate(c *gin.Context, caller *access.Caller) bool {
	if s.limits == nil || caller.Admin {
		return true
	}
	var addr string
	if caller.UID == "" { // only an anonymous caller is keyed by address
		addr = s.clientAddr(c)
	}
	if wait := s.limits.reserve(rateKey(caller, addr), time.Now()); wait > 0 {
		s.writeError(c, rateLimited(wait))
		c.Abort()
		return false
	}
	return true
}
