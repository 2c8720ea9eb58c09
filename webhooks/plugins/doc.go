// Package plugins is the agent runtime's lifecycle rules and plugins (seed
// 001): rules in TOML files that run at the runtime's hook points
// (on_query_start, on_turn_start, on_turn_end, on_tool_call,
// on_tool_complete, on_tool_failure, on_session_end), whose condition is a
// CEL expression or a sandboxed Lua script over the rule context, and whose
// action (notify_self, log, set_state, emit_event) is rendered from Jinja
// templates. Plugins package rules with typed, per-user settings.
//
// The package loads and validates the files (Load), compiles conditions and
// templates once, and evaluates the rules of a hook in priority order
// (Engine.Evaluate). It decides and renders; it writes nothing. Carrying
// out an action (a document, a log line) is the runtime's (package
// webhooks), which keeps every effect idempotent and in documents.
package plugins
