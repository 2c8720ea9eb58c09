package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
)

// Caller is who made a request. Today there are two kinds: anonymous and the
// admin key. Users (JWT), service keys and roles arrive with the auth issue;
// they extend Caller and authenticate, and the rules engine plugs into
// authorize, so handlers do not change.
type Caller struct {
	// Admin is true for the admin API key: it may do everything the
	// document API allows (system collections stay read-only).
	Admin bool
	// Kind names the credential for logs: "anonymous" or "admin-key".
	Kind string
	// UID is the authenticated user's id ("" when anonymous or admin key).
	UID string
}

var anonymous = &Caller{Kind: "anonymous"}

// rateKey identifies the caller for rate limiting: the remote IP when
// anonymous. Proxy headers are not trusted.
func (c *Caller) rateKey(r *http.Request) string {
	if c.UID != "" {
		return "uid:" + c.UID
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

var adminCaller = &Caller{Admin: true, Kind: "admin-key"}

// Action is what a request does to a path; it is what security rules will
// match on ("read" = get+list, "write" = create+update+delete).
type Action int

// Actions checked by authorize.
const (
	// ActionAccess is the coarse check every /api/v1 request passes before
	// its body is read: may this caller use the database API at all?
	ActionAccess Action = iota
	ActionGet
	ActionList // list a collection, or run a query on a collection/pattern
	ActionCreate
	ActionUpdate // replace or update
	ActionDelete
)

func (a Action) write() bool { return a == ActionCreate || a == ActionUpdate || a == ActionDelete }

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

// authenticate resolves the Caller from the request's credentials. A
// credential that is presented but wrong is always 401 (never silently
// anonymous). It then applies the coarse ActionAccess check.
func (s *Server) authenticate(c *gin.Context) {
	caller := anonymous
	if key, ok := credential(c.Request); ok {
		// Compare fixed-size hashes so neither content nor length of the
		// admin key leaks through timing.
		h := hashKey(key)
		if subtle.ConstantTimeCompare(h[:], s.adminKeyHash[:]) != 1 {
			s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "The API key is not valid."))
			return
		}
		caller = adminCaller
	}
	c.Set(callerKey, caller)
	if !s.allowRate(c, caller) {
		return
	}
	if err := s.authorize(caller, ActionAccess, c.Param("db"), ""); err != nil {
		s.writeError(c, err)
		return
	}
	c.Next()
}

func callerOf(c *gin.Context) *Caller {
	if v, ok := c.Get(callerKey); ok {
		return v.(*Caller)
	}
	return anonymous
}

// authorize is the single access decision of the API: every handler calls it
// with the caller, the action and the document or collection path (or
// collection pattern for queries) before touching the store. It returns nil
// or an *apiError (401 or 403).
//
// Policy today: the document API needs the admin key; system collections
// (first segment starts with "_") are readable only by admins and writable by
// nobody through the document API. Security rules (issue 3) slot in here.
func (s *Server) authorize(caller *Caller, action Action, db, path string) error {
	if caller == nil || !caller.Admin {
		return errorf(http.StatusUnauthorized, codeUnauthenticated, "Authentication required: send the API key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\".")
	}
	if action.write() && collections.IsSystemPath(path) {
		return errorf(http.StatusForbidden, codePermissionDenied, "System collections cannot be written through the document API.")
	}
	if collections.IsSystemPath(path) && !caller.Admin {
		return errorf(http.StatusForbidden, codePermissionDenied, "Only admins may read system collections.")
	}
	_ = db // databases share one policy until rules are per-database
	return nil
}

// allowRate applies the per-client rate limit; it writes the 429 and
// returns false when the caller is over it.
func (s *Server) allowRate(c *gin.Context, caller *Caller) bool {
	if s.limits == nil || caller.Admin {
		return true
	}
	if wait := s.limits.reserve(caller.rateKey(c.Request), time.Now()); wait > 0 {
		s.writeError(c, s.rateLimited(c.Writer.Header(), wait))
		c.Abort()
		return false
	}
	return true
}
