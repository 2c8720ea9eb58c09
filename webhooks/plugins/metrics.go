package plugins

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// engineMetrics are the engine's Prometheus series. The rule label is a
// rule key: bounded by the loaded files, never by users.
type engineMetrics struct {
	evaluations *prometheus.CounterVec
	hookSeconds *prometheus.HistogramVec
}

func newEngineMetrics(reg prometheus.Registerer) (*engineMetrics, error) {
	m := &engineMetrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_agent_rule_evaluations_total",
			Help: "Agent rule evaluations by rule key and outcome (matched, unmatched, error).",
		}, []string{"rule", "outcome"}),
		hookSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_agent_rule_hook_seconds",
			Help:    "Time to evaluate the rules of one hook.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}, []string{"hook"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.evaluations, err = register(reg, m.evaluations); err != nil {
		return nil, err
	}
	if m.hookSeconds, err = register(reg, m.hookSeconds); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered already (a
// second engine in one process, as in tests, shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("plugins: registering metrics: %w", err)
	}
	return c, nil
}
