package sqlite

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections/internal/groupcommit"
)

// newMetrics describes the committer; the histograms are registered only
// when the configuration names a Registerer.
func newMetrics(reg prometheus.Registerer) *groupcommit.Metrics {
	return groupcommit.NewMetrics(reg, groupcommit.MetricsOpts{
		BatchName:      "loom_sqlite_commit_batch_requests",
		BatchHelp:      "Requests committed together in one SQLite transaction (group commit).",
		SecondsName:    "loom_sqlite_commit_seconds",
		SecondsHelp:    "Time to apply and fsync one SQLite transaction.",
		SecondsBuckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
	})
}
