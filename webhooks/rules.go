package webhooks

// The documents of the lifecycle rules (docs/agent-rules.md). The rules
// themselves live in webhooks/plugins; the runtime's side is split by what
// it does: rulesadmin.go (reload, switches, the admin API), rulelog.go (the
// execution log) and rulesettings.go (the users' settings documents).
const (
	// userRuleSettingsPath (with the uid) is the user's agent settings
	// document: disabledRules and plugin setting overrides. The user owns
	// it; writes are checked against the plugins (ValidateWrite).
	userRuleSettingsDoc = "agent-settings/rules" // below users/{uid}/
	// switchesCollection holds the admin's enable/disable switches.
	switchesCollection = "agent-rules"
	// ruleLogCollection holds the execution log: one document per hook
	// evaluation that ran at least one rule.
	ruleLogCollection = "agent-rule-log"
)
