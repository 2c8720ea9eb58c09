package webhooks

import (
	"fmt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// The range of a sub-agent's context budget (seed 000), and how far over
// it a context may go before the task fails.
const (
	MinTokenBudget = 4_000
	MaxTokenBudget = 128_000
	// budgetOverflow is the hard stop: a context over budget × 1.1 after
	// compression fails the task.
	budgetOverflow = 1.1
)

// validateBudgets checks the configured budgets and temperatures (the
// config package reports the same with the loom.toml keys).
func validateBudgets(cfg Config) error {
	inRange := func(n int) bool { return n == 0 || n >= MinTokenBudget && n <= MaxTokenBudget }
	temp := func(t *float64) bool { return t == nil || *t >= 0 && *t <= 2 }
	if !inRange(cfg.TokenBudget) {
		return fmt.Errorf("webhooks: TokenBudget must be between %d and %d, got %d", MinTokenBudget, MaxTokenBudget, cfg.TokenBudget)
	}
	if !temp(cfg.OrchestratorTemperature) {
		return fmt.Errorf("webhooks: OrchestratorTemperature must be between 0 and 2, got %g", *cfg.OrchestratorTemperature)
	}
	for name, r := range cfg.Roles {
		if !inRange(r.TokenBudget) {
			return fmt.Errorf("webhooks: role %s: TokenBudget must be between %d and %d, got %d", name, MinTokenBudget, MaxTokenBudget, r.TokenBudget)
		}
		if !temp(r.Temperature) {
			return fmt.Errorf("webhooks: role %s: Temperature must be between 0 and 2, got %g", name, *r.Temperature)
		}
		if r.MaxIterations < 0 {
			return fmt.Errorf("webhooks: role %s: MaxIterations must not be negative", name)
		}
	}
	return nil
}

// roleBudget is the context budget a new sub-agent of role gets: the
// role's, else the runtime's.
func (h *Handlers) roleBudget(role string) int {
	if b := h.cfg.Roles[role].TokenBudget; b > 0 {
		return b
	}
	return h.cfg.TokenBudget
}

// roleIterations is the step limit of a sub-agent of role.
func (h *Handlers) roleIterations(role string) int {
	if n := h.cfg.Roles[role].MaxIterations; n > 0 {
		return n
	}
	return h.cfg.MaxIterations
}

// roleModel is the model name a sub-agent of role uses: the role's, else
// the configured model's (the offline model ignores the role's). Names
// come from the configuration only.
func (h *Handlers) roleModel(role string) string {
	return h.modelName(h.cfg.Roles[role].Model)
}

// orchestratorModel is the model name of the orchestrator's decisions,
// finalize's summaries and the chat's compressions (what the chat's
// lastModel records when a response names none).
func (h *Handlers) orchestratorModel() string {
	return h.modelName(h.cfg.OrchestratorModel)
}

// modelName is the name of the model a call configured with override
// ("": none) uses: override, unless the model is the offline one (which
// ignores it), else the configured model's.
func (h *Handlers) modelName(override string) string {
	if override != "" && h.model.Name() != "offline" {
		return override
	}
	return h.model.Name()
}

// forRole sets the role's model and temperature on req.
func (h *Handlers) forRole(role string, req llm.Request) llm.Request {
	r := h.cfg.Roles[role]
	req.Model, req.Temperature = r.Model, r.Temperature
	return req
}

// forOrchestrator sets the orchestrator's model and temperature on req.
func (h *Handlers) forOrchestrator(req llm.Request) llm.Request {
	req.Model, req.Temperature = h.cfg.OrchestratorModel, h.cfg.OrchestratorTemperature
	return req
}

// budgetOf is a sub-agent's context budget: its tokenBudget, or, when
// that is not in the range (a document the runtime did not write so), its
// role's default, logged.
func (h *Handlers) budgetOf(agent *collections.Document) int64 {
	n, ok := collections.Int64(agent.Data["tokenBudget"])
	if ok && n >= MinTokenBudget && n <= MaxTokenBudget {
		return n
	}
	def := int64(h.roleBudget(str(agent, "role")))
	h.log.Warn("sub-agent tokenBudget out of range; using the default", "path", agent.Path, "tokenBudget", agent.Data["tokenBudget"], "default", def)
	return def
}

// overBudget is the hard stop's failure when a prompt of tokens exceeds
// budget × 1.1, else "".
func overBudget(tokens, budget int64) string {
	if float64(tokens) <= float64(budget)*budgetOverflow {
		return ""
	}
	return fmt.Sprintf("the context (%d tokens) exceeds this sub-agent's token budget of %d tokens", tokens, budget)
}
