package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Route templates. They are also the "route" label of the HTTP metrics.
const (
	routeDatabase  = "/api/v1/databases/:db"
	routeDocuments = "/documents/*path"
	routeQuery     = "/query"
	routeBatch     = "/batch"
)

// routes builds the gin engine: global middleware, the operational
// endpoints, and the database API.
func (s *Server) routes() *gin.Engine {
	// gin's debug mode prints the route table and warnings to stdout. The
	// mode is process-global in gin (no per-engine setting), so it is set
	// here, where an engine is built, and importing this package changes
	// nothing. It must precede gin.New, which warns in debug mode.
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// Paths are exact: no redirects that would turn a POST into a GET or
	// hide a client's typo.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	// No proxy is trusted until New applies Config.TrustedProxies
	// (trustProxies): ClientIP is the peer address.
	_ = r.SetTrustedProxies(nil)
	r.ForwardedByClientIP = false

	r.Use(s.requestID, s.observe, s.recover, s.limitBodies, s.cors)
	r.NoRoute(s.noRoute)
	r.NoMethod(func(c *gin.Context) {
		if s.console != nil && isConsolePath(c.Request.URL.Path) {
			consoleHeaders(c.Writer.Header())
		}
		s.writeError(c, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "Method %s is not allowed here; allowed: %s.", truncate(c.Request.Method, 16), c.Writer.Header().Get("Allow")))
	})

	r.GET("/health", s.health)
	r.HEAD("/health", s.health)
	r.GET("/ready", s.ready)
	r.HEAD("/ready", s.ready)
	r.GET("/metrics", s.metricsAccess, s.metricsHandler())

	s.authRoutes(r)
	s.accessRoutes(r)
	s.realtimeRoutes(r)
	s.rxdbRoutes(r)
	s.syntrixReplicationRoutes(r)
	s.triggerRoutes(r)
	s.triggerAPIRoutes(r)
	s.catalogRoutes(r)
	s.consoleAPIRoutes(r)
	s.consoleRoutes(r)
	if s.webhooks != nil {
		// Signed deliveries, not API calls: no API-key authentication.
		r.POST("/webhooks/*name", s.budgetBody, gin.WrapH(s.webhooks))
	}

	if s.agentsAdmin != nil {
		// The agent runtime's rules admin API (docs/agent-rules.md): the
		// handler routes below the prefix; only the admin reaches it.
		h := gin.WrapH(s.agentsAdmin)
		r.GET(routeAgentsAdmin+"/*rest", s.authenticate, s.requireAdmin, h)
		r.POST(routeAgentsAdmin+"/*rest", s.authenticate, s.requireAdmin, s.budgetBody, h)
	}

	db := r.Group(routeDatabase, s.authenticate, s.database)
	db.GET(routeDocuments, s.getDocuments)
	db.POST(routeDocuments, s.createDocument)
	db.PUT(routeDocuments, s.replaceDocument)
	db.PATCH(routeDocuments, s.updateDocument)
	db.DELETE(routeDocuments, s.deleteDocument)
	db.POST(routeQuery, s.query)
	db.POST(routeBatch, s.batch)
	return r
}
