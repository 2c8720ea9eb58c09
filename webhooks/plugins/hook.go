package plugins

// Hook is a point of the agent runtime's lifecycle where rules run.
type Hook string

// The hook points.
const (
	// OnQueryStart: a user message reaches the orchestrator (not an answer
	// routed to a waiting task), before the orchestrator asks the model.
	OnQueryStart Hook = "on_query_start"
	// OnTurnStart: before a sub-agent's LLM step (its prompt is built after).
	OnTurnStart Hook = "on_turn_start"
	// OnTurnEnd: after a sub-agent's LLM step was written.
	OnTurnEnd Hook = "on_turn_end"
	// OnToolCall: before a tool runs.
	OnToolCall Hook = "on_tool_call"
	// OnToolComplete: a tool returned a result.
	OnToolComplete Hook = "on_tool_complete"
	// OnToolFailure: a tool failed (an error, a timeout, bad arguments).
	OnToolFailure Hook = "on_tool_failure"
	// OnSessionEnd: a task ended (success or failure).
	OnSessionEnd Hook = "on_session_end"
)

// Hooks lists every hook point.
var Hooks = []Hook{OnQueryStart, OnTurnStart, OnTurnEnd, OnToolCall, OnToolComplete, OnToolFailure, OnSessionEnd}

// Valid reports whether h is a known hook point.
func (h Hook) Valid() bool {
	for _, k := range Hooks {
		if h == k {
			return true
		}
	}
	return false
}
