package sqlite

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The committer histograms are wire (dashboards): their names and bucket
// layouts must not change.
func TestCommitMetricsWire(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.Observe(3, 2*time.Millisecond)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	buckets := map[string]int{}
	for _, mf := range mfs {
		buckets[mf.GetName()] = len(mf.GetMetric()[0].GetHistogram().GetBucket())
	}
	want := map[string]int{"loom_sqlite_commit_batch_requests": 10, "loom_sqlite_commit_seconds": 12}
	for name, n := range want {
		if buckets[name] != n {
			t.Errorf("%s: %d buckets, want %d (gathered %v)", name, buckets[name], n, buckets)
		}
	}
	m.Unregister()
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families left after Unregister", len(mfs))
	}
}
