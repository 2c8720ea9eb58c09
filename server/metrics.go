package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loomdb/loom/collections"
)

// headTimeout bounds the Store.Head call made on every scrape.
const headTimeout = time.Second

// httpMetrics are the server's Prometheus collectors.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg *prometheus.Registry, store collections.Store) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_http_requests_total",
			Help: "HTTP requests by method, route template and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
	}
	head := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_changefeed_head_seq",
		Help: "Seq of the last committed change in the change log.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), headTimeout)
		defer cancel()
		seq, err := store.Head(ctx)
		if err != nil {
			return -1 // visible to alerts; a scrape must not fail for it
		}
		return float64(seq)
	})
	for _, c := range []prometheus.Collector{m.requests, m.duration, head} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// The Go and process collectors may already be on a registry shared
	// with the composition root (app); that is fine.
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}

// statusText caches the "code" label values of common statuses.
var statusText = func() map[int]string {
	m := make(map[int]string)
	for code := 100; code < 600; code++ {
		m[code] = strconv.Itoa(code)
	}
	return m
}()

// methodOther is the "method" label of every method outside the standard
// ones.
const methodOther = "other"

// methodLabel maps a request method to a label from a fixed set: the method
// is client input, and every distinct label value is a time series kept for
// the life of the process (and sent on every scrape).
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions,
		http.MethodConnect, http.MethodTrace:
		return method
	}
	return methodOther
}

// observe records one request. route must come from a fixed set too (a
// route template or "unmatched"); the status code is bounded by net/http.
func (m *httpMetrics) observe(method, route string, status int, elapsed time.Duration) {
	code, ok := statusText[status]
	if !ok {
		code = "other"
	}
	method = methodLabel(method)
	m.requests.WithLabelValues(method, route, code).Inc()
	m.duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
}
