// Package webhooks is Loom's agent runtime: the built-in webhook handlers
// (orchestrator, agent-init, agent-loop, tool-runner, orchestrator-finalize,
// orchestrator-notify) that turn trigger deliveries into an orchestrator →
// sub-agent → tool → answer run whose entire state is documents (listed in
// docs/architecture.md, "The agent runtime's documents").
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
package webhooks
