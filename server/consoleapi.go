package server

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/internal/auth"
)

// The console session API (docs/console.md, "Session and serving API"):
// sign in once with the admin key or an admin user's password, then keep a
// short-lived access token in the page's memory, re-minted from an HttpOnly
// cookie that authenticates nothing but refresh and logout. The data APIs
// stay bearer-only, so the cookie opens no CSRF surface on them; refresh
// and logout are guarded by SameSite=Strict, a custom header (which a
// cross-origin page cannot send without a preflight this server refuses)
// and a same-origin Origin check.
const (
	routeConsoleAPI = "/admin/v1/console"
	// consoleCookie holds the opaque session value (auth.ParseConsoleCookie).
	consoleCookie = "loom_console"
	// consoleCSRFHeader must be "1" on refresh and logout.
	consoleCSRFHeader = "X-Loom-Console"
)

func (s *Server) consoleAPIRoutes(r *gin.Engine) {
	g := r.Group(routeConsoleAPI, s.consoleAPIEnabled)
	g.POST("/session", s.consoleSignIn)
	g.POST("/refresh", s.consoleRefresh)
	g.POST("/logout", s.consoleLogout)
	g.POST("/sessions/revoke-all", s.authenticate, s.requireAdmin, s.consoleRevokeAll)
}

// consoleAPIEnabled answers 404 unless the server has both an auth service
// (sessions are stored by it) and the console.
func (s *Server) consoleAPIEnabled(c *gin.Context) {
	if s.auth == nil || s.console == nil {
		s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "The console is not enabled on this server."))
		return
	}
	// Answers carry a token or end a session: never cached.
	c.Header("Cache-Control", "no-store")
	c.Next()
}

// consoleSignIn serves POST /admin/v1/console/session {"adminKey"} or
// {"username","password"}.
func (s *Server) consoleSignIn(c *gin.Context) {
	if !s.limitIP(c) || !s.consoleSameOrigin(c) {
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAuthBody)
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	in, err := parseConsoleSignIn(m)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ctx := c.Request.Context()
	var sess auth.ConsoleSession
	if in.adminKey != "" {
		sess, err = s.auth.StartConsoleSessionWithAdminKey(ctx, in.adminKey, s.adminKeyHash, s.clientAddr(c))
	} else {
		sess, err = s.auth.StartConsoleSession(ctx, in.username, in.password, s.clientAddr(c))
	}
	switch {
	case errors.Is(err, auth.ErrInvalidAdminKey):
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: wrong admin key."))
		return
	case errors.Is(err, auth.ErrConsoleNotAdmin):
		s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "The console needs the %s role.", auth.ConsoleRole))
		return
	case err != nil:
		s.writeError(c, err)
		return
	}
	// Signing in again from a browser that holds a session replaces it:
	// end the old one rather than leave it to its idle end.
	if old := consoleCookieValue(c.Request); old != "" {
		if err := s.auth.EndConsoleSession(ctx, old); err != nil {
			s.log.Warn("console sign-in: end the previous session", "error", err)
		}
	}
	s.setConsoleCookie(c, sess)
	c.JSON(http.StatusOK, sess)
}

// consoleSignInBody is a parsed sign-in body: either adminKey, or username
// and password.
type consoleSignInBody struct {
	adminKey, username, password string
}

// parseConsoleSignIn checks a sign-in body: exactly {"adminKey"} or exactly
// {"username","password"}, all non-empty strings.
func parseConsoleSignIn(m map[string]any) (consoleSignInBody, error) {
	bad := func(format string, args ...any) (consoleSignInBody, error) {
		return consoleSignInBody{}, errorf(http.StatusBadRequest, codeBadRequest, format, args...)
	}
	var out consoleSignInBody
	for k, v := range m {
		str, ok := v.(string)
		switch k {
		case "adminKey":
			out.adminKey = str
		case "username":
			out.username = str
		case "password":
			out.password = str
		default:
			return bad("Unknown field %q: the body is {\"adminKey\"} or {\"username\", \"password\"}.", truncate(k, 64))
		}
		if !ok {
			return bad("Field %q must be a string.", k)
		}
	}
	_, hasKey := m["adminKey"]
	_, hasUser := m["username"]
	_, hasPassword := m["password"]
	switch {
	case hasKey && (hasUser || hasPassword):
		return bad("Send either {\"adminKey\"} or {\"username\", \"password\"}, not both.")
	case hasKey:
		if out.adminKey == "" {
			return bad("Field \"adminKey\" must not be empty.")
		}
	case !hasUser || !hasPassword:
		return bad("The body is {\"adminKey\"} or {\"username\", \"password\"}.")
	case out.username == "" || out.password == "":
		return bad("Fields \"username\" and \"password\" must not be empty.")
	}
	return out, nil
}

// consoleRefresh serves POST /admin/v1/console/refresh: the cookie's
// session mints a new access token and, usually, a new cookie value. Any
// refusal clears the cookie.
func (s *Server) consoleRefresh(c *gin.Context) {
	if !s.limitIP(c) || !s.consoleCSRF(c) {
		return
	}
	sess, err := s.auth.RefreshConsoleSession(c.Request.Context(), consoleCookieValue(c.Request), s.adminKeyHash)
	if errors.Is(err, auth.ErrInvalidToken) {
		s.clearConsoleCookie(c)
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: no console session, or it expired or ended; sign in again."))
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	if sess.Cookie != "" {
		s.setConsoleCookie(c, sess)
	}
	c.JSON(http.StatusOK, sess)
}

// consoleLogout serves POST /admin/v1/console/logout: the session is
// deleted and the cookie cleared (204 also when there was none).
func (s *Server) consoleLogout(c *gin.Context) {
	if !s.limitIP(c) || !s.consoleCSRF(c) {
		return
	}
	if err := s.auth.EndConsoleSession(c.Request.Context(), consoleCookieValue(c.Request)); err != nil {
		s.writeError(c, err)
		return
	}
	s.clearConsoleCookie(c)
	c.Status(http.StatusNoContent)
}

// consoleRevokeAll serves POST /admin/v1/console/sessions/revoke-all (the
// admin): every console session ends, for example after the admin key was
// rotated. Access tokens already issued live out their few minutes.
func (s *Server) consoleRevokeAll(c *gin.Context) {
	n, err := s.auth.RevokeAllConsoleSessions(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.log.Info("console sessions revoked", "count", n, "by", callerOf(c).Username)
	c.JSON(http.StatusOK, gin.H{"revoked": n})
}

// consoleCookieValue is the request's session cookie value ("" when none,
// or when it is longer than a session value can be: refused unparsed).
func consoleCookieValue(r *http.Request) string {
	ck, err := r.Cookie(consoleCookie)
	if err != nil || len(ck.Value) > auth.ConsoleCookieLength {
		return ""
	}
	return ck.Value
}

// consoleCSRF refuses (403) a refresh or logout without the console header
// or from another origin.
func (s *Server) consoleCSRF(c *gin.Context) bool {
	if c.Request.Header.Get(consoleCSRFHeader) != "1" {
		s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "This endpoint needs the header %s: 1.", consoleCSRFHeader))
		return false
	}
	return s.consoleSameOrigin(c)
}

// consoleSameOrigin refuses (403) a request whose Origin, when present, is
// not this server's own: [security] cors_origins do not apply here.
func (s *Server) consoleSameOrigin(c *gin.Context) bool {
	origin := c.Request.Header.Get("Origin")
	if origin == "" || sameOrigin(c.Request, origin) {
		return true
	}
	s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "The console session API is same-origin only; Origin %q is not this server.", truncate(origin, 128)))
	return false
}

// sameOrigin reports whether a browser origin is the server's own (the
// host the request was sent to).
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

func (s *Server) setConsoleCookie(c *gin.Context, sess auth.ConsoleSession) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name:     consoleCookie,
		Value:    sess.Cookie,
		Path:     routeConsoleAPI,
		MaxAge:   max(1, int(time.Until(sess.CookieExpires)/time.Second)),
		HttpOnly: true,
		Secure:   s.requestIsHTTPS(c.Request),
		SameSite: http.SameSiteStrictMode,
	})
}

func (s *Server) clearConsoleCookie(c *gin.Context) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name:     consoleCookie,
		Path:     routeConsoleAPI,
		MaxAge:   -1, // Max-Age=0: delete now
		HttpOnly: true,
		Secure:   s.requestIsHTTPS(c.Request),
		SameSite: http.SameSiteStrictMode,
	})
}

// requestIsHTTPS reports whether the client reached us over HTTPS: TLS
// here, or a trusted proxy ([server] trusted_proxies) says so in
// X-Forwarded-Proto (its first value: the scheme the client used).
// Another peer's header is ignored.
func (s *Server) requestIsHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto := r.Header.Get("X-Forwarded-Proto")
	if proto == "" || len(s.trustedProxies) == 0 {
		return false
	}
	first, _, _ := strings.Cut(proto, ",")
	if !strings.EqualFold(strings.TrimSpace(first), "https") {
		return false
	}
	return s.peerIsTrustedProxy(r)
}

func (s *Server) peerIsTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range s.trustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseProxies reads [server] trusted_proxies (addresses or CIDRs) as
// prefixes; entries that do not parse are skipped (trustProxies, which gin
// validates, refuses them first).
func parseProxies(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, e := range list {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}
