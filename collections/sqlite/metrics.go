package sqlite

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics describe the committer; they are registered only when the
// configuration names a Registerer.
type metrics struct {
	reg     prometheus.Registerer
	batch   prometheus.Histogram
	seconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reg: reg,
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loom_sqlite_commit_batch_requests",
			Help:    "Requests committed together in one SQLite transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loom_sqlite_commit_seconds",
			Help:    "Time to apply and fsync one SQLite transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.batch, m.seconds} {
			if err := reg.Register(c); err != nil {
				// Already registered by an earlier Open on the same
				// registry: that store is closed, keep going unregistered.
				continue
			}
		}
	}
	return m
}

func (m *metrics) observe(requests int, d time.Duration) {
	m.batch.Observe(float64(requests))
	m.seconds.Observe(d.Seconds())
}

func (m *metrics) unregister() {
	if m.reg != nil {
		m.reg.Unregister(m.batch)
		m.reg.Unregister(m.seconds)
	}
}
