// Package webhooks is Loom's agent runtime: the built-in webhook handlers
// (orchestrator, agent-init, agent-loop, tool-runner, orchestrator-finalize,
// orchestrator-notify) that turn trigger deliveries into an orchestrator →
// sub-agent → tool → answer run whose entire state is documents (listed in
// docs/architecture.md, "The agent runtime's documents"). The chat document
// is the chat's memory (memory.go: a summary of the messages older than the
// recent window, key decisions, token counts) and lifecycle (chatidle.go,
// the chat-idle handler: suspension and cleanup of idle or closed chats).
//
// Handlers are real webhook consumers: they verify the Standard Webhooks
// signature and read and write documents through Loom's HTTP API with a
// service key (Docs), so they run inside `loom serve` or alone (`loom
// agents`) the same way. Every handler is idempotent: document ids derive
// from the triggering document, creates must not overwrite, and a
// redelivered event finds its work done and writes nothing twice.
//
// The documents of a run belong to the runtime. The default security rules
// let a user create only 'user' messages in their chats (and name the
// chat); tasks, sub-agents, their messages, tool calls, statuses and
// counters are written by the handlers alone. The handlers do not rely on
// the rules for that: every document they create in a chat carries a seal
// (an HMAC keyed from the webhook secret over its path and the fields they
// act on), and they act only on sealed documents; a tool runs only if it is
// in the sub-agent's role; a sub-agent's steps are bounded by its
// iterationCount and by the assistant messages it has written, whichever
// is more. Each user's LLM use is bounded too: tokens per UTC day (counted
// in users/{uid}/agent-usage/{yyyy-mm-dd}) and queries in progress at once,
// checked before every LLM call; a run over a limit ends with a message in
// the chat.
//
// Lifecycle rules (package plugins, Config.Rules) run at the hook points:
// on_query_start in the orchestrator before it asks the model about a new
// user message (not one routed to a waiting task, not once the reply is
// written); on_turn_start before a sub-agent's step (after compression)
// and on_turn_end after it is written; on_tool_call before a tool runs
// (only when it will), on_tool_complete or on_tool_failure once its
// outcome is recorded and before the tool message wakes the loop; and
// on_session_end as a task ends. runHook returns at once when no rule at
// the hook can run, and reads only the parts of the context the rules
// there read. Every effect is a document whose id derives from the hook,
// its site (the triggering document or step) and the rule, so a redelivery
// writes nothing twice: notify_self at on_query_start and on_turn_start
// goes straight into the prompt being built, elsewhere into a pending,
// sealed notification (.../notifications) for the sub-agent's next step,
// or for the chat's next orchestrator decision on on_session_end, marked
// delivered once the step or reply that carried it is written; set_state
// merges into the sealed plugin state (.../plugin-state/{plugin}) with
// compare-and-swap, remembering the effects it applied; emit_event writes
// .../agent-events/{id} for triggers to route. A failed read of the
// context is retried with the delivery; a rule's own failure is recorded
// in the execution log, never fails the run.
package webhooks
