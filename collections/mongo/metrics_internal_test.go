package mongo

import (
	"testing"

	"github.com/loomdb/loom/collections/internal/groupcommit/groupcommittest"
)

func TestCommitMetricsWire(t *testing.T) {
	groupcommittest.CheckMetricsWire(t, newMetrics, map[string]int{
		"loom_mongo_commit_batch_requests": 10,
		"loom_mongo_commit_seconds":        14,
	})
}
