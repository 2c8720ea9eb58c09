package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/plugins"
	"github.com/loomdb/loom/webhooks/tools"
)

const (
	agentsKeyName    = "loom-agents"
	defaultToolsFile = "./tools.json"
)

// agentsEnabled reports whether a node serves the built-in handlers.
func agentsEnabled(cfg config.Config) bool {
	return cfg.Agents.Enabled == nil || *cfg.Agents.Enabled
}

// AgentOptions are what the agent handlers take beyond the configuration
// and their documents.
type AgentOptions struct {
	// Secret is the Standard Webhooks secret the triggers sign with.
	Secret string
	// Model replaces the model [llm] configures (nil: that one).
	Model      llm.Model
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// openAgents builds the built-in agent handlers when [agents] enables them
// (nil otherwise). They read and write documents in process, through the
// same access protocol as the REST API, as a fresh service key.
func openAgents(ctx context.Context, cfg config.Config, authSvc *auth.Service, acc *access.Service, opts AgentOptions) (*webhooks.Handlers, error) {
	if !agentsEnabled(cfg) {
		return nil, nil
	}
	key, err := agentsKey(ctx, authSvc)
	if err != nil {
		return nil, err
	}
	return NewAgents(cfg, agentDocs(acc, authSvc, key), opts)
}

// agentDocs is how the built-in handlers read and write documents: in
// process, as the caller their service key authenticates. The key is
// checked on every call, as it would be over HTTP, so revoking it stops
// the handlers. (loom agents, a separate process, uses loomclient.)
func agentDocs(acc *access.Service, authSvc *auth.Service, key string) webhooks.Docs {
	return access.NewDocs(acc, access.DefaultDatabase, func(ctx context.Context) (*access.Caller, error) {
		id, err := authSvc.Authenticate(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("agents service key: %w", err)
		}
		return access.CallerOfIdentity(id), nil
	})
}

// NewAgents builds the agent runtime's handlers over docs, for loom serve
// (its own API) and loom agents (a remote Loom's). The tools' HTTP goes
// through its own SSRF guard ([agents] allow_hosts / allow_cidrs, default
// none): the model chooses those URLs, so the loopback that [delivery]
// allows for the built-in handlers must not be open to it.
func NewAgents(cfg config.Config, docs webhooks.Docs, opts AgentOptions) (*webhooks.Handlers, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	guard, err := ssrf.New(cfg.Agents.AllowHosts, cfg.Agents.AllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("config [agents]: %w", err)
	}
	transport := guard.Transport()
	model := opts.Model
	if model == nil {
		if model, err = llm.New(llm.Config{
			BaseURL: cfg.LLM.BaseURL,
			APIKey:  cfg.LLM.APIKey,
			Model:   cfg.LLM.Model,
			Timeout: cfg.LLM.Timeout.Duration,
		}); err != nil {
			return nil, fmt.Errorf("config [llm]: %w", err)
		}
	}
	defs, err := loadTools(cfg)
	if err != nil {
		return nil, err
	}
	reg, err := tools.New(defs, tools.Deps{Query: docs.Query, Transport: transport})
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	if model.Name() == "offline" {
		logger.Warn("no [llm] base_url configured: the agent runtime uses the offline model (deterministic, labelled \"[offline model]\")")
	}
	roles, err := agentRoles(cfg)
	if err != nil {
		return nil, err
	}
	engine, loadRules, err := agentRules(cfg, reg, logger, opts.Registerer)
	if err != nil {
		return nil, err
	}
	return webhooks.New(webhooks.Config{
		Rules:              engine,
		LoadRules:          loadRules,
		RuleLogRetention:   cfg.Agents.RuleLogRetention.Duration,
		Docs:               docs,
		Model:              model,
		Tools:              reg,
		Roles:              roles,
		Secret:             opts.Secret,
		Registerer:         opts.Registerer,
		MaxIterations:      cfg.Agents.MaxIterations,
		TokenBudget:        cfg.Agents.TokenBudget,
		UserTokensPerDay:   cfg.Agents.UserTokensPerDay,
		UserConcurrentRuns: cfg.Agents.UserConcurrentRuns,
		History:            cfg.Agents.ChatHistory,
		ChatSuspendAfter:   cfg.Agents.ChatSuspendAfter.Duration,
		ChatCleanupAfter:   chatCleanupAfter(cfg.Agents.ChatCleanupAfter),
		WaitTimeout:        cfg.Agents.WaitTimeout.Duration,
		MaxChildTasks:      cfg.Agents.MaxChildTasks,
		// The orchestrator's decisions and finalize's summaries.
		OrchestratorModel:       cfg.Agents.Orchestrator.Model,
		OrchestratorTemperature: cfg.Agents.Orchestrator.Temperature,
		// A delivery carries an outbox row's event: a document, its previous
		// state and the changed field names of both — what the engine lets
		// a system document hold, so no event the evaluator could store is
		// refused by its handler on every attempt.
		MaxBody: sqlite.SystemDocumentFactor*int64(cfg.Limits.MaxDocumentBytes) + sqlite.SystemDocumentSlack,
		Logger:  logger,
	})
}

// agentRules loads the lifecycle rules and plugins (the shipped ones, then
// [agents] rules_dir and plugins_dir) into an engine, and returns the
// loader a reload runs again. A bad file refuses to start: the error names
// the file, the rule and the field. The plugins may require the tools of
// reg.
func agentRules(cfg config.Config, reg *tools.Registry, logger *slog.Logger, metrics prometheus.Registerer) (*plugins.Engine, func() (*plugins.Set, error), error) {
	opts := ruleLoadOptions(cfg, reg.Names())
	load := func() (*plugins.Set, error) { return plugins.Load(opts) }
	set, err := load()
	if err != nil {
		return nil, nil, fmt.Errorf("agent rules: %w", err)
	}
	engine, err := plugins.NewEngine(set, plugins.EngineOptions{Logger: logger, Registerer: metrics})
	if err != nil {
		return nil, nil, fmt.Errorf("agent rules: %w", err)
	}
	logger.Info("agent rules loaded", "rules", len(set.Rules), "plugins", len(set.Plugins),
		"rules_dir", cfg.Agents.RulesDir, "plugins_dir", cfg.Agents.PluginsDir)
	return engine, load, nil
}

// ruleLoadOptions are where the rules come from per the configuration;
// capabilities are the runtime's tool names.
func ruleLoadOptions(cfg config.Config, capabilities []string) plugins.LoadOptions {
	return plugins.LoadOptions{
		RulesDir:     cfg.Agents.RulesDir,
		PluginsDir:   cfg.Agents.PluginsDir,
		Builtin:      plugins.Builtin(),
		Capabilities: capabilities,
		Lua: plugins.LuaLimits{
			Instructions: cfg.Agents.LuaInstructions,
			Timeout:      cfg.Agents.LuaTimeout.Duration,
			MemoryBytes:  cfg.Agents.LuaMemory,
		},
	}
}

// agentRoles are the built-in sub-agent roles with [agents.roles.*]
// applied: an override keeps what it does not set; a new role needs a
// system prompt.
func agentRoles(cfg config.Config) (map[string]webhooks.Role, error) {
	roles := webhooks.DefaultRoles()
	for name, r := range cfg.Agents.Roles {
		role := roles[name]
		if r.SystemPrompt != "" {
			role.SystemPrompt = r.SystemPrompt
		}
		if r.Tools != nil {
			role.Tools = r.Tools
		}
		if r.Model != "" {
			role.Model = r.Model
		}
		if r.Temperature != nil {
			role.Temperature = r.Temperature
		}
		if r.MaxIterations != 0 {
			role.MaxIterations = r.MaxIterations
		}
		if r.TokenBudget != 0 {
			role.TokenBudget = r.TokenBudget
		}
		if role.SystemPrompt == "" {
			return nil, fmt.Errorf("config [agents.roles.%s]: system_prompt is required for a new role", name)
		}
		roles[name] = role
	}
	return roles, nil
}

// loadTools reads the tools file (configured, or ./tools.json when present)
// and appends the [[tool]] entries of the config.
func loadTools(cfg config.Config) ([]tools.Def, error) {
	file, explicit := cfg.Agents.ToolsFile, true
	if file == "" {
		file, explicit = defaultToolsFile, false
	}
	defs, err := tools.LoadFile(file)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			defs = nil
		} else {
			return nil, err
		}
	}
	return append(defs, toolDefs(cfg.Tools)...), nil
}

// toolDefs converts the [[tool]] entries to the tool registry's definitions.
func toolDefs(entries []config.Tool) []tools.Def {
	defs := make([]tools.Def, len(entries))
	for i, e := range entries {
		defs[i] = tools.Def{
			Name:          e.Name,
			Description:   e.Description,
			InputSchema:   e.InputSchema,
			ExecutionType: e.ExecutionType,
			Visibility:    e.Visibility,
			ClientTimeout: e.ClientTimeout,
		}
		if x := e.Execution; x != nil {
			defs[i].Execution = &tools.HTTPExecution{
				URL: x.URL, Method: x.Method, Headers: x.Headers, Body: x.Body, Timeout: x.Timeout,
			}
		}
	}
	return defs
}

// agentsKey issues a fresh service key for the built-in handlers (the
// previous one is revoked): only its hash is stored, so each start makes a
// new one.
func agentsKey(ctx context.Context, a *auth.Service) (string, error) {
	key, err := a.CreateServiceKey(ctx, agentsKeyName, []string{"service"})
	if errors.Is(err, auth.ErrServiceKeyExists) {
		if err := a.RevokeServiceKey(ctx, agentsKeyName); err != nil {
			return "", err
		}
		key, err = a.CreateServiceKey(ctx, agentsKeyName, []string{"service"})
	}
	if err != nil {
		return "", fmt.Errorf("agents service key: %w", err)
	}
	return key, nil
}

// chatCleanupAfter maps [agents] chat_cleanup_after to the runtime's
// setting: absent → 0 (the default), "0s" or negative → -1 (never).
func chatCleanupAfter(d config.SignedDuration) time.Duration {
	if d.Set && d.Duration <= 0 {
		return -1
	}
	return d.Duration
}
