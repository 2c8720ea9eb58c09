package server

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loomdb/loom/access"
)

// readyTimeout bounds the engine's readiness probe so a wedged engine makes
// /ready answer 503 rather than hang the prober.
const readyTimeout = 2 * time.Second

// health serves GET /health: 200 "OK" while the process serves HTTP.
func (s *Server) health(c *gin.Context) {
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("OK"))
}

// ready serves GET /ready: 200 "OK" when the engine is open and its change
// feed is live (Store.Ready), else 503 UNAVAILABLE.
func (s *Server) ready(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	if err := s.store.Ready(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready", "err", err)
		s.writeError(c, errorf(http.StatusServiceUnavailable, codeUnavailable, "The database is not ready."))
		return
	}
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte("OK"))
}

// roleMetrics is the role that lets a non-admin credential (a service key
// for the scraper) read /metrics when it requires a key.
const roleMetrics = "metrics"

// metricsAccess guards /metrics when Config.MetricsRequireKey is set: the
// admin key, or a credential with the "admin" or "metrics" role. Without a
// valid credential it is 401, with one that lacks the role 403.
func (s *Server) metricsAccess(c *gin.Context) {
	if !s.metricsAuth {
		c.Next()
		return
	}
	caller, err := s.resolveCaller(c.Request)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if caller.Kind == access.KindAnonymous {
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: /metrics requires the admin key or a key with the %q role.", roleMetrics))
		return
	}
	if !caller.Admin && !slices.Contains(caller.Roles, roleMetrics) {
		s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "/metrics requires the admin key or a key with the %q role.", roleMetrics))
		return
	}
	c.Next()
}

// metricsHandler serves GET /metrics in the Prometheus text format from the
// configured registry (the server's collectors and whatever the app
// registered there, e.g. engine collectors).
func (s *Server) metricsHandler() gin.HandlerFunc {
	h := promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{s},
		ErrorHandling: promhttp.ContinueOnError,
	})
	return gin.WrapH(h)
}

// slogPrinter adapts promhttp's error log to slog.
type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Error("metrics", "err", v) }
