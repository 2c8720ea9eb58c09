// Package groupcommittest checks an engine's committer metrics in its tests.
package groupcommittest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections/internal/groupcommit"
)

// CheckMetricsWire registers newMetrics on a fresh registry, observes one
// batch and checks that exactly the histograms of buckets (name: number of
// buckets) are gathered, and that Unregister removes them. The names and
// bucket layouts are wire (dashboards).
func CheckMetricsWire(t *testing.T, newMetrics func(prometheus.Registerer) *groupcommit.Metrics, buckets map[string]int) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.Observe(3, 2*time.Millisecond)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric()[0].GetHistogram().GetBucket())
	}
	if len(got) != len(buckets) {
		t.Errorf("gathered %v, want %v", got, buckets)
	}
	for name, n := range buckets {
		if got[name] != n {
			t.Errorf("%s: %d buckets, want %d (gathered %v)", name, got[name], n, got)
		}
	}
	m.Unregister()
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families left after Unregister", len(mfs))
	}
}
