package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
)

// Routes of the access admin API (README, "Users, keys and security
// rules"): who the users are and which roles they hold, the service keys,
// and the rules file. Admin only, like the rest of /admin/v1.
const (
	routeUsers = "/admin/v1/users"
	routeRules = "/admin/v1/rules"
)

// maxRulesSource caps the rules source GET /admin/v1/rules returns; a
// longer file is cut there and flagged "truncated".
const maxRulesSource = 1 << 20

func (s *Server) accessRoutes(r *gin.Engine) {
	users := r.Group(routeUsers, s.authEnabled, s.authenticate, s.requireAdmin)
	users.GET("", s.listUsers)
	users.PUT("/:uid/roles", s.setUserRoles)
	r.GET(routeKeys, s.authEnabled, s.authenticate, s.requireAdmin, s.listKeys)
	r.GET(routeRules, s.authenticate, s.requireAdmin, s.getRules)
}

// listUsers serves GET /admin/v1/users?after=&limit=&prefix=: one page of
// accounts by username (case-insensitive), never the password hash.
func (s *Server) listUsers(c *gin.Context) {
	q := c.Request.URL.Query()
	for k := range q {
		switch k {
		case "after", "limit", "prefix":
		default:
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Unknown parameter %q: use after, limit and prefix.", truncate(k, 64)))
			return
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "limit must be a whole number from 1 to %d.", auth.MaxListLimit))
			return
		}
		limit = min(n, auth.MaxListLimit)
	}
	page, err := s.auth.ListUsers(c.Request.Context(), q.Get("after"), q.Get("prefix"), limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var next any // null on the last page
	if page.NextCursor != "" {
		next = page.NextCursor
	}
	c.JSON(http.StatusOK, gin.H{"users": page.Users, "nextCursor": next})
}

// setUserRoles serves PUT /admin/v1/users/{uid}/roles {"roles": [...]}:
// replace the user's roles and revoke its refresh tokens; the answer is the
// user.
func (s *Server) setUserRoles(c *gin.Context) {
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	badRoles := errorf(http.StatusBadRequest, codeBadRequest, "The body is {\"roles\": [\"role\", ...]}: a list of strings.")
	var roles []string
	seen := false
	for k, v := range m {
		if k != "roles" {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q: the body is {\"roles\"}.", truncate(k, 64)))
			return
		}
		list, ok := v.([]any)
		if !ok {
			s.writeError(c, badRoles)
			return
		}
		seen = true
		roles = make([]string, 0, len(list))
		for _, r := range list {
			str, ok := r.(string)
			if !ok {
				s.writeError(c, badRoles)
				return
			}
			roles = append(roles, str)
		}
	}
	if !seen {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Field \"roles\" is required (a list of strings; [] for none)."))
		return
	}
	uid := c.Param("uid")
	u, err := s.auth.SetUserRoles(c.Request.Context(), uid, roles)
	if errors.Is(err, collections.ErrNotFound) {
		s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "No user with uid %q.", truncate(uid, 128)))
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.log.Info("user roles set; the user's refresh tokens are revoked", "uid", u.UID, "roles", u.Roles, "by", callerOf(c).UID)
	c.JSON(http.StatusOK, u)
}

// listKeys serves GET /admin/v1/keys: the service keys by name (never a
// key or its hash), at most auth.MaxListedServiceKeys ("truncated" says
// there are more).
func (s *Server) listKeys(c *gin.Context) {
	l, err := s.auth.ListServiceKeys(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"keys": l.Keys, "truncated": l.Truncated})
}

// lastReload remembers the outcome of the last rules reload.
type lastReload struct {
	// serial runs one reload at a time (reloadRules holds it from reading
	// the file to recording the outcome), so two concurrent reloads cannot
	// install an older file's rules after a newer one's, and the recorded
	// outcome is that of the rules in force.
	serial sync.Mutex
	mu     sync.Mutex
	done   bool
	at     time.Time
	err    string // "" when it succeeded
}

func (l *lastReload) record(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done, l.at, l.err = true, time.Now(), ""
	if err != nil {
		l.err = err.Error()
	}
}

// view is the "lastReload" of GET /admin/v1/rules: null before the first
// reload; "error" is null when it succeeded.
func (l *lastReload) view() any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		return nil
	}
	var e any
	if l.err != "" {
		e = l.err
	}
	return gin.H{"at": l.at.UnixMilli(), "ok": l.err == "", "error": e}
}

// getRules serves GET /admin/v1/rules: where the rules come from, how many
// are in force, the source text (the file as it is on disk now, which may
// differ from the rules in force until a reload; at most maxRulesSource
// bytes) and the last reload's outcome.
func (s *Server) getRules(c *gin.Context) {
	builtin := s.rulesBuiltin.Load()
	res := gin.H{
		"file":       nil,
		"builtin":    builtin,
		"rules":      s.access.Rules().Len(),
		"source":     nil,
		"truncated":  false,
		"lastReload": s.rulesReload.view(),
	}
	switch {
	case builtin:
		// With a file: it was absent at start; a reload loads it once it
		// exists. fileAbsent says whether it is still absent (a file
		// created but refused by a reload is there, yet not in force).
		res["source"] = rules.DefaultSource()
		if s.rulesFile != "" {
			_, err := os.Stat(s.rulesFile)
			res["file"], res["fileAbsent"] = s.rulesFile, errors.Is(err, fs.ErrNotExist)
		}
	case s.rulesFile != "":
		res["file"] = s.rulesFile
		src, truncated, err := readCapped(s.rulesFile, maxRulesSource)
		if err != nil {
			res["sourceError"] = err.Error()
		} else {
			res["source"], res["truncated"] = src, truncated
		}
	}
	c.JSON(http.StatusOK, res)
}

// readCapped reads at most limit bytes of the file and says whether there
// was more.
func readCapped(path string, limit int64) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		// Cut before a character that straddles the limit, so the JSON
		// carries no replacement character of our making.
		n := int(limit)
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		return string(b[:n]), true, nil
	}
	return string(b), false, nil
}
