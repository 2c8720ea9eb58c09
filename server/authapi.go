package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
)

// Routes of the auth API (Syntrix-compatible) and of the admin API.
const (
	routeAuth        = "/auth/v1"
	routeRulesReload = "/admin/v1/rules/reload"
	routeKeys        = "/admin/v1/keys"
	routeAgentsAdmin = "/admin/v1/agents"
)

// maxAuthBody bounds auth request bodies: they hold a username and a
// password or a token.
const maxAuthBody = 16 << 10

func (s *Server) authRoutes(r *gin.Engine) {
	g := r.Group(routeAuth, s.authEnabled)
	g.POST("/signup", s.signup)
	g.POST("/login", s.login)
	g.POST("/refresh", s.refresh)
	g.POST("/logout", s.logout)
	g.GET("/me", s.authenticate, s.me)

	r.POST(routeRulesReload, s.authenticate, s.requireAdmin, s.reloadRules)
	keys := r.Group(routeKeys, s.authEnabled, s.authenticate, s.requireAdmin)
	keys.POST("", s.createKey)
	keys.DELETE("/:name", s.revokeKey)
}

// authEnabled answers 404 when the server runs without an auth service.
func (s *Server) authEnabled(c *gin.Context) {
	if s.auth == nil {
		s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "User authentication is not enabled on this server."))
		return
	}
	c.Next()
}

func (s *Server) requireAdmin(c *gin.Context) {
	caller := callerOf(c)
	if !caller.Admin {
		s.writeError(c, access.Deny(caller, "use the admin API"))
		return
	}
	c.Next()
}

// authBody reads a small JSON object (at most maxAuthBody bytes) and checks
// that exactly the wanted fields are present, each a string. Under [compat]
// syntrix other fields, of any JSON type, are ignored, as Syntrix's server
// ignores them: its SDK's login sends "database", its tests' signup
// "tenant". Without it they are refused, so a typo is not silently lost.
func (s *Server) authBody(c *gin.Context, fields ...string) (map[string]string, error) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAuthBody)
	m, err := s.readObject(c)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(fields))
	for k, v := range m {
		known := false
		for _, f := range fields {
			known = known || f == k
		}
		if !known {
			if s.syntrix {
				continue
			}
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q.", truncate(k, 64))
		}
		str, ok := v.(string)
		if !ok {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Field %q must be a string.", k)
		}
		out[k] = str
	}
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Field %q is required.", f)
		}
	}
	return out, nil
}

// limitIP applies the per-address rate limit (clientAddr) to
// unauthenticated auth endpoints.
func (s *Server) limitIP(c *gin.Context) bool {
	return s.allowRate(c, access.Anonymous)
}

// signup serves POST /auth/v1/signup. Each signup costs a bcrypt hash, so
// besides the general rate limit it takes a token from the client address's
// signup bucket (Config.SignupRate): a flood from one address gets cheap
// 429s, and the hashing that does happen is bounded by the auth service.
func (s *Server) signup(c *gin.Context) {
	s.tokenEndpoint(c, []string{"username", "password"}, func(ctx context.Context, b map[string]string) (auth.Tokens, error) {
		if err := s.auth.CheckSignup(b["username"], b["password"]); err != nil {
			return auth.Tokens{}, err
		}
		if wait := s.signups.reserve(s.clientAddr(c), time.Now()); wait > 0 {
			e := rateLimited(wait)
			e.Message = fmt.Sprintf("Too many signups from this address; retry after %d s.", retrySeconds(wait))
			return auth.Tokens{}, e
		}
		return s.auth.Signup(ctx, b["username"], b["password"])
	})
}

func (s *Server) login(c *gin.Context) {
	s.tokenEndpoint(c, []string{"username", "password"}, func(ctx context.Context, b map[string]string) (auth.Tokens, error) {
		return s.auth.Login(ctx, b["username"], b["password"], s.clientAddr(c))
	})
}

func (s *Server) refresh(c *gin.Context) {
	s.tokenEndpoint(c, []string{"refresh_token"}, func(ctx context.Context, b map[string]string) (auth.Tokens, error) {
		return s.auth.Refresh(ctx, b["refresh_token"])
	})
}

func (s *Server) logout(c *gin.Context) {
	if !s.limitIP(c) {
		return
	}
	b, err := s.authBody(c, "refresh_token")
	if err == nil {
		err = s.auth.Logout(c.Request.Context(), b["refresh_token"])
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{})
}

// tokenEndpoint is the shape of signup, login and refresh: a per-address rate
// limit, a small all-string body, a token pair back.
func (s *Server) tokenEndpoint(c *gin.Context, fields []string, issue func(context.Context, map[string]string) (auth.Tokens, error)) {
	if !s.limitIP(c) {
		return
	}
	b, err := s.authBody(c, fields...)
	if err != nil {
		s.writeError(c, err)
		return
	}
	tok, err := issue(c.Request.Context(), b)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, tok)
}

// me serves GET /auth/v1/me: who the presented credential is.
func (s *Server) me(c *gin.Context) {
	caller := callerOf(c)
	if caller.Kind == access.KindAnonymous {
		s.writeError(c, access.Deny(caller, "read your identity"))
		return
	}
	roles := caller.Roles
	if roles == nil {
		roles = []string{}
	}
	c.JSON(http.StatusOK, gin.H{"uid": caller.UID, "username": caller.Username, "roles": roles})
}

// reloadRules serves POST /admin/v1/rules/reload: re-read the rules file;
// a bad file keeps the current rules and reports why. The built-in rules
// stay as they are while there is no file (none configured, or the
// default file not created yet).
func (s *Server) reloadRules(c *gin.Context) {
	s.rulesReload.serial.Lock()
	defer s.rulesReload.serial.Unlock()
	keepBuiltin := func() {
		s.rulesReload.record(nil)
		n := s.access.Rules().Len()
		s.log.Info("security rules reload: no rules file; the built-in rules stay in force", "rules", n, "file", s.rulesFile)
		res := gin.H{"rules": n, "builtin": true}
		if s.rulesFile != "" {
			res["file"], res["fileAbsent"] = s.rulesFile, true
		}
		c.JSON(http.StatusOK, res)
	}
	if s.rulesFile == "" {
		if s.rulesBuiltin.Load() {
			keepBuiltin()
			return
		}
		s.writeError(c, errorf(http.StatusConflict, codeConflict, "This server has no rules file to reload."))
		return
	}
	set, err := rules.Load(s.rulesFile)
	if err != nil && s.rulesBuiltin.Load() && errors.Is(err, fs.ErrNotExist) {
		keepBuiltin()
		return
	}
	if err != nil {
		s.rulesReload.record(err)
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "The rules file was not loaded; the previous rules stay in force: %s", err.Error()))
		return
	}
	s.access.SetRules(set)
	s.rulesBuiltin.Store(false)
	s.rulesReload.record(nil)
	s.log.Info("security rules reloaded", "file", s.rulesFile, "rules", set.Len())
	c.JSON(http.StatusOK, gin.H{"rules": set.Len(), "file": s.rulesFile})
}

// createKey serves POST /admin/v1/keys {"name", "roles"?}: a service key,
// shown once in the response and stored hashed.
func (s *Server) createKey(c *gin.Context) {
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var name string
	var roles []string
	for k, v := range m {
		switch k {
		case "name":
			name, _ = v.(string)
		case "roles":
			list, ok := v.([]any)
			if !ok {
				s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "\"roles\" must be a list of strings."))
				return
			}
			for _, r := range list {
				str, ok := r.(string)
				if !ok {
					s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "\"roles\" must be a list of strings."))
					return
				}
				roles = append(roles, str)
			}
		default:
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q: the body is {\"name\", \"roles\"}.", truncate(k, 64)))
			return
		}
	}
	key, err := s.auth.CreateServiceKey(c.Request.Context(), name, roles)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if roles == nil {
		roles = []string{"service"}
	}
	c.JSON(http.StatusCreated, gin.H{"name": name, "roles": roles, "key": key})
}

// revokeKey serves DELETE /admin/v1/keys/{name}.
func (s *Server) revokeKey(c *gin.Context) {
	if err := s.auth.RevokeServiceKey(c.Request.Context(), c.Param("name")); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
