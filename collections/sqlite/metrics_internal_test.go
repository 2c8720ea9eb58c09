package sqlite

import (
	"testing"

	"github.com/loomdb/loom/collections/internal/groupcommit/groupcommittest"
)

func TestCommitMetricsWire(t *testing.T) {
	groupcommittest.CheckMetricsWire(t, newMetrics, map[string]int{
		"loom_sqlite_commit_batch_requests": 10,
		"loom_sqlite_commit_seconds":        12,
	})
}
