package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// metricsHandler serves GET /metrics in the Prometheus text format from the
// configured registry (the server's collectors and whatever cmd/loom
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
