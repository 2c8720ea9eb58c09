package webhooks

import "github.com/loomdb/loom/collections"

// Indexes are the engine indexes the agent runtime's queries need (its
// collections are listed in docs/architecture.md, "The agent runtime's
// documents"); the server declares them with its own, whether or not it
// serves the handlers, since `loom agents` may serve them from elsewhere.
// Each is a partial index on its collection group, so other collections
// pay nothing for them.
var Indexes = []collections.Index{
	{Collection: "users/*/orch-chats/*/messages", Fields: []string{"createdAt"}},
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"chatId"}},
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"userId"}},
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"triggerMessageId"}},
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"status"}},
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"userId", "status"}},       // checkRuns, routeToWaiting
	{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"userId", "parentTaskId"}}, // a canceled task's children
	{Collection: "users/*/orch-chats/*/sub-agents", Fields: []string{"taskId"}},
	{Collection: "users/*/orch-chats/*/sub-agents", Fields: []string{"userId"}},
	{Collection: "users/*/orch-chats/*/sub-agents/*/messages", Fields: []string{"subAgentId", "createdAt"}},
	{Collection: "users/*/orch-chats/*/sub-agents/*/messages", Fields: []string{"subAgentId", "seq"}},
	{Collection: "users/*/orch-chats/*/sub-agents/*/tool-calls", Fields: []string{"subAgentId"}},
	{Collection: "users/*/orch-chats/*/sub-agents/*/tool-calls", Fields: []string{"status"}},
	// pendingNotices: a prompt's pending notifications of the rules.
	{Collection: "users/*/orch-chats/*/notifications", Fields: []string{"target", "status"}},
	// The rules' execution log: pruning (at) and the admin's listing,
	// newest first, of everyone or of one user.
	{Collection: ruleLogCollection, Fields: []string{"at"}},
	{Collection: ruleLogCollection, Fields: []string{"userId", "at"}},
}
