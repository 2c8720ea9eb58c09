// Package groupcommit holds what the storage engines' group committers
// share: the request queue with its committer loop, and the batch-size and
// commit-time histograms.
package groupcommit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsOpts names an engine's committer histograms. The names, help texts
// and buckets are part of the engine's wire (dashboards): each engine keeps
// its own.
type MetricsOpts struct {
	BatchName      string // histogram of requests per transaction
	BatchHelp      string
	SecondsName    string // histogram of the time one transaction takes
	SecondsHelp    string
	SecondsBuckets []float64
}

// Metrics describe a committer; they are registered only when a Registerer
// is given.
type Metrics struct {
	reg     prometheus.Registerer
	batch   prometheus.Histogram
	seconds prometheus.Histogram
}

// NewMetrics builds the histograms of o and registers them on reg when it
// is not nil. The batch histogram's buckets are 1, 2, 4 … 512 requests.
func NewMetrics(reg prometheus.Registerer, o MetricsOpts) *Metrics {
	m := &Metrics{
		reg: reg,
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    o.BatchName,
			Help:    o.BatchHelp,
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    o.SecondsName,
			Help:    o.SecondsHelp,
			Buckets: o.SecondsBuckets,
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.batch, m.seconds} {
			// An earlier Open on the same registry may hold it (that store
			// is closed): keep going unregistered.
			_ = reg.Register(c)
		}
	}
	return m
}

// Observe records one committed batch of requests that took d.
func (m *Metrics) Observe(requests int, d time.Duration) {
	m.batch.Observe(float64(requests))
	m.seconds.Observe(d.Seconds())
}

// Unregister removes the histograms from the Registerer, if any.
func (m *Metrics) Unregister() {
	if m.reg != nil {
		m.reg.Unregister(m.batch)
		m.reg.Unregister(m.seconds)
	}
}
