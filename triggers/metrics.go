package triggers

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
)

type metrics struct {
	matches        *prometheus.CounterVec
	evalErrors     *prometheus.CounterVec
	deliveries     *prometheus.CounterVec
	attemptSeconds *prometheus.HistogramVec
	reloads        *prometheus.CounterVec
	skipped        prometheus.Counter
	lagSeconds     prometheus.Gauge
	// pending is the outbox depth as last counted by the purge loop.
	pending atomic.Int64
	// scheduled is the number of scheduled rows (not yet due) counted then.
	scheduled atomic.Int64
}

// newMetrics registers the pipeline's metrics; held counts the deliveries
// this node holds.
func newMetrics(reg prometheus.Registerer, store collections.Store, held func() int) (*metrics, error) {
	m := &metrics{
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_trigger_matches_total",
			Help: "Changes that matched a trigger (one outbox row each).",
		}, []string{"trigger"}),
		evalErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_trigger_eval_errors_total",
			Help: "Condition or ordering-key evaluations that failed (counted as no match).",
		}, []string{"trigger"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered, failed (will retry or wait), dead.",
		}, []string{"trigger", "outcome"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_webhook_attempt_duration_seconds",
			Help:    "Webhook request latency.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"trigger"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_trigger_reloads_total",
			Help: "Reloads of triggers.json by result.",
		}, []string{"result"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loom_trigger_skipped_changes_total",
			Help: "Changes the evaluator could not read because retention had purged them (should stay 0).",
		}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loom_trigger_evaluator_lag_seconds",
			Help: "Age of the last change the evaluator processed when it processed it.",
		}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_webhook_outbox_pending",
		Help: "Pending outbox rows, scheduled ones not included (counted every few seconds).",
	}, func() float64 { return float64(m.pending.Load()) })
	scheduled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_webhook_outbox_scheduled",
		Help: "Scheduled outbox rows waiting for their deliverAt (counted every few seconds).",
	}, func() float64 { return float64(m.scheduled.Load()) })
	heldGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_webhook_deliveries_held",
		Help: "Deliveries this node holds in memory (in flight or waiting for a retry).",
	}, func() float64 { return float64(held()) })
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_trigger_evaluator_lag_changes",
		Help: "Changes committed but not yet evaluated (head seq minus the trigger cursor).",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		head, err := store.Head(ctx)
		if err != nil {
			return -1
		}
		pos, err := store.Cursor(ctx, cursorName)
		if err != nil {
			return -1
		}
		return float64(head - pos)
	})
	for _, c := range []prometheus.Collector{m.matches, m.evalErrors, m.deliveries, m.attemptSeconds, m.reloads, m.skipped, m.lagSeconds, depth, scheduled, heldGauge, lag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
