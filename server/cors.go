package server

import (
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"
)

// CORS: browsers may call Loom from the origins in Config.CORSOrigins (none
// by default). Credentials travel in the Authorization header, never in
// cookies, so responses never allow credentials and a disallowed origin
// gains nothing from a request the browser sends anyway.

const (
	corsAllowMethods  = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, If-Match, X-API-Key, X-Request-Id, Last-Event-ID"
	corsExposeHeaders = "ETag, Location, Retry-After, X-Next-Cursor, X-Request-Id"
)

// originAllowed reports whether a browser origin may use the API: an exact
// entry of the allow-list, "*" in the list, or the server's own origin
// (same-origin is always allowed; WebSocket upgrades use the same check).
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	if origin == "" {
		return true
	}
	if slices.Contains(s.corsOrigins, "*") || slices.Contains(s.corsOrigins, origin) {
		return true
	}
	return sameOrigin(r, origin)
}

// cors answers preflight requests and adds the CORS headers for allowed
// origins.
func (s *Server) cors(c *gin.Context) {
	origin := c.Request.Header.Get("Origin")
	if origin == "" {
		c.Next()
		return
	}
	h := c.Writer.Header()
	h.Add("Vary", "Origin")
	allowed := s.originAllowed(c.Request, origin)
	preflight := c.Request.Method == http.MethodOptions && c.Request.Header.Get("Access-Control-Request-Method") != ""
	if !allowed {
		if preflight {
			s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "Origin %q is not allowed; add it to [security] cors_origins.", truncate(origin, 128)))
			c.Abort()
			return
		}
		c.Next()
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if preflight {
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", "600")
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	c.Next()
}
