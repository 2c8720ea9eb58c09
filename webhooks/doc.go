// Package webhooks is Loom's agent runtime: the built-in webhook handlers
// (orchestrator, agent-init, agent-loop, tool-runner, orchestrator-finalize,
// orchestrator-notify) that turn trigger deliveries into an orchestrator →
// sub-agent → tool → answer run whose entire state is documents (spec 05,
// seed 002).
//
// Handlers are real webhook consumers: they verify the Standard Webhooks
// signature and read and write documents through Loom's HTTP API with a
// service key (Docs), so they run inside `loom serve` or alone (`loom
// agents`) the same way. Every handler is idempotent: document ids derive
// from the triggering document, creates must not overwrite, and a
// redelivered event finds its work done and writes nothing twice.
package webhooks
