package webhooks

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/webhooks/llm"
)

// metrics are the agent runtime's Prometheus collectors.
type metrics struct {
	handled   *prometheus.HistogramVec // by handler and outcome
	llmCalls  *prometheus.HistogramVec // by outcome
	llmTokens *prometheus.CounterVec   // by kind (prompt, completion)
	toolRuns  *prometheus.CounterVec   // by tool and outcome
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		handled: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_agent_handler_duration_seconds",
			Help:    "Agent runtime webhook handling time by handler and outcome (ok; failed: the document's content failed it and the failure was recorded; error: retried).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"handler", "outcome"}),
		llmCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_agent_llm_request_duration_seconds",
			Help:    "LLM requests of the agent runtime by outcome (ok, error).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"outcome"}),
		llmTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_agent_llm_tokens_total",
			Help: "Tokens the agent runtime's LLM requests used, by kind (prompt, completion).",
		}, []string{"kind"}),
		toolRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_agent_tool_runs_total",
			Help: "Tool runs by tool and outcome (success, failed; refused: a tool call the runtime did not create; timeout: a client tool's call the app did not answer in time).",
		}, []string{"tool", "outcome"}),
	}
	if err := registerAll(reg, m.handled, m.llmCalls, m.llmTokens, m.toolRuns); err != nil {
		return nil, err
	}
	return m, nil
}

// registerAll registers the runtime's collectors on reg, stopping at the
// first error.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// unknownTool is the "tool" label of a tool call naming no registered tool.
const unknownTool = "unknown"

// toolLabel is the "tool" label of a tool call: the name when it is a
// registered tool, else unknownTool. The name comes from a tool-call
// document that its user (or the model) wrote, and each distinct label
// value is a series kept for the life of the process.
func (h *Handlers) toolLabel(name string) string {
	if _, ok := h.tools.Get(name); ok {
		return name
	}
	return unknownTool
}

// meteredModel counts a model's requests, latency and tokens.
type meteredModel struct {
	llm.Model
	m *metrics
}

func (mm meteredModel) Complete(ctx context.Context, req llm.Request) (*llm.Response, error) {
	start := time.Now()
	res, err := mm.Model.Complete(ctx, req)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	mm.m.llmCalls.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	if res != nil {
		mm.m.llmTokens.WithLabelValues("prompt").Add(float64(res.Usage.PromptTokens))
		mm.m.llmTokens.WithLabelValues("completion").Add(float64(res.Usage.CompletionTokens))
	}
	return res, err
}
