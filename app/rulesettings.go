package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/plugins"
)

// settingsRules check users' agent settings documents on a node that does
// not run the agent runtime ([agents] enabled = false: loom agents runs it
// elsewhere) but names rule files in its own [agents] rules_dir or
// plugins_dir — the same ones as loom agents — so a bad setting is refused
// where it is written. A node naming none does not check (it could not
// know loom agents' plugins); the runtime re-checks when it reads.
type settingsRules struct {
	opts plugins.LoadOptions
	set  atomic.Pointer[plugins.Set]
	log  *slog.Logger
}

// openSettingsRules loads the rules for the check, or returns nil when
// this node has nothing to check with.
func openSettingsRules(cfg config.Config, logger *slog.Logger) (*settingsRules, error) {
	if agentsEnabled(cfg) || (cfg.Agents.RulesDir == "" && cfg.Agents.PluginsDir == "") {
		return nil, nil
	}
	// Capabilities only decide whether a plugin may run, which the check
	// does not ask: none are needed here.
	s := &settingsRules{opts: ruleLoadOptions(cfg, nil), log: logger}
	set, err := plugins.Load(s.opts)
	if err != nil {
		return nil, fmt.Errorf("agent rules: %w", err)
	}
	s.set.Store(set)
	logger.Info("agent rules loaded to check users' agent settings", "rules", len(set.Rules), "plugins", len(set.Plugins))
	return s, nil
}

// reload re-reads the files; a bad one keeps the set in force.
func (s *settingsRules) reload() error {
	set, err := plugins.Load(s.opts)
	if err != nil {
		s.log.Error("agent rules reload failed; the previous rules stay in force", "err", err)
		return fmt.Errorf("rules reload: %w", err)
	}
	s.set.Store(set)
	return nil
}

// checkWrite is the access layer's check of users' writes: a user's agent
// settings document against the plugins' settings, by the runtime's rules
// or this node's copy of them. a.Agents is set once, before the server
// serves.
func (a *App) checkWrite(path string, data map[string]any) error {
	var err error
	switch {
	case a.Agents != nil:
		err = a.Agents.ValidateWrite(path, data)
	case a.settings != nil:
		err = webhooks.ValidateUserRuleSettings(a.settings.set.Load(), path, data)
	}
	var se *plugins.SettingError
	if errors.As(err, &se) {
		return &access.InvalidWrite{Field: se.Setting, Msg: se.Msg}
	}
	return err
}

// ReloadAgentRules re-reads the agent rule and plugin files (SIGHUP): the
// runtime's, or the copy this node checks users' settings with. A bad file
// keeps the rules in force; the error says why.
func (a *App) ReloadAgentRules(ctx context.Context) error {
	switch {
	case a.Agents != nil:
		return a.Agents.ReloadRules(ctx)
	case a.settings != nil:
		return a.settings.reload()
	}
	return nil
}
