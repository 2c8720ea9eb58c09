package webhooks

import (
	"context"
	"errors"
	"net/http"

	"github.com/loomdb/loom/webhooks/plugins"
)

// The documents of the lifecycle rules (docs/agent-rules.md).
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

// --- written by the rules admin side (rulesadmin.go, rulelog.go) ---

// ReloadRules re-reads the rule and plugin files (Config.LoadRules) and puts
// the new set in force; on an error the set in force stays and the error
// (which names the file, the rule and the field) is returned and kept for
// the admin API's status.
func (h *Handlers) ReloadRules(ctx context.Context) error {
	return errors.New("webhooks: ReloadRules not written yet")
}

// RulesAdmin serves the admin API under /admin/v1/agents/ (the caller is
// an admin: the server checked it).
func (h *Handlers) RulesAdmin() http.Handler {
	return http.NotFoundHandler()
}

// ValidateWrite checks a write of the document at path as it would be
// stored: a user's agent settings document must name existing rules and
// plugin settings with valid values (*plugins.SettingError). Other paths
// pass.
func (h *Handlers) ValidateWrite(path string, data map[string]any) error {
	return nil
}

// switches returns the admin's switches in force (cached briefly: another
// node's switch takes effect within switchesTTL).
func (h *Handlers) switches(ctx context.Context) (plugins.Switches, error) {
	return nil, nil
}

// userRuleSettings returns the data of the user's agent settings document
// (nil when there is none).
func (h *Handlers) userRuleSettings(ctx context.Context, uid string) (map[string]any, error) {
	return nil, nil
}

// recordEvaluations writes the execution log of one hook evaluation in
// chat c (one document, its id derived from hook and site so a redelivery
// writes it once), counts it in the metrics and now and then prunes
// entries older than the retention. Failing to record is logged, never
// fails the handler.
func (h *Handlers) recordEvaluations(ctx context.Context, c chat, hook plugins.Hook, site string, evals []plugins.Evaluation) {
}
