// Package config loads Loom's configuration: defaults, then the TOML file,
// then LOOM_* environment variables, then command-line flags (later wins).
//
// Config only describes: it is plain data, and Load is the one reader of
// loom.toml and of the LOOM_* settings of loom serve and loom agents (the
// ${VAR} of triggers.json expand from the environment package app hands to
// triggers). It imports no feature package; package app turns it into each
// package's own types (tool definitions, the indexes joined with those the
// features need).
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/loomdb/loom/collections"
)

// Defaults.
const (
	DefaultAddr             = "127.0.0.1:8080"
	DefaultData             = "./data"
	DefaultConfigFile       = "./loom.toml"
	DefaultTriggersFile     = "./triggers.json"
	DefaultEngine           = "sqlite"
	DefaultMongoDatabase    = "loom"
	DefaultRulesFile        = "rules/security.toml"
	DefaultMaxDocumentBytes = 1 << 20
	DefaultMaxRequestBytes  = 10 << 20
	DefaultRetention        = 7 * 24 * time.Hour
)

// Config is the whole server configuration. The TOML keys are a contract
// (documented in the README and loom.toml): unknown keys are an error.
type Config struct {
	// Process settings: flags / LOOM_* env only.
	Addr     string `toml:"-"`
	Data     string `toml:"-"`
	File     string `toml:"-"` // the config file that was read ("" = none)
	Triggers string `toml:"-"`
	Engine   string `toml:"-"`

	Server   Server              `toml:"server"`
	Auth     Auth                `toml:"auth"`
	Security Security            `toml:"security"`
	Delivery Delivery            `toml:"delivery"`
	LLM      LLM                 `toml:"llm"`
	Agents   Agents              `toml:"agents"`
	RxDB     RxDB                `toml:"rxdb"`
	Tools    []Tool              `toml:"tool"`
	Limits   Limits              `toml:"limits"`
	Changes  Changes             `toml:"changes"`
	Metrics  Metrics             `toml:"metrics"`
	Mongo    Mongo               `toml:"mongo"`
	Compat   Compat              `toml:"compat"`
	Console  Console             `toml:"console"`
	Runtime  Runtime             `toml:"runtime"`
	Indexes  []collections.Index `toml:"index"`

	// More process settings (env or flags only), and what loading found.
	// Warnings are what the file does that still works but should change
	// (a deprecated section); the caller logs them.
	Warnings []string `toml:"-"`
	// LogLevel is LOOM_LOG_LEVEL (debug, info, warn, error; default info).
	LogLevel string `toml:"-"`
	// WebhookSecret signs the built-in triggers' deliveries and the
	// handlers verify it: LOOM_WEBHOOK_SECRET or loom agents --secret.
	// Unset, loom serve generates one into the data directory.
	WebhookSecret string `toml:"-"`
	// Remote is the Loom server `loom agents` works for.
	Remote Remote `toml:"-"`
}

// Server configures the HTTP server.
type Server struct {
	// TrustedProxies are the addresses or CIDRs of the reverse proxies in
	// front of Loom. A request from one of them is attributed to the client
	// its X-Forwarded-For (rightmost hop that is not a trusted proxy) or
	// X-Real-IP names; from any other peer those headers are ignored.
	// Default: none. List only the proxies, never client networks.
	TrustedProxies []string `toml:"trusted_proxies"`
}

// Auth holds credentials (secrets are never logged) and the abuse limits of
// signup and login.
type Auth struct {
	AdminKey  string `toml:"admin_key"`
	JWTSecret string `toml:"jwt_secret"`
	JWKSURL   string `toml:"jwks_url"`
	Issuer    string `toml:"issuer"`
	Audience  string `toml:"audience"`
	// SignupRate is signups per minute per client address (0 = default 5,
	// negative = off); SignupBurst is how many may come at once (default 10).
	SignupRate  float64 `toml:"signup_rate"`
	SignupBurst int     `toml:"signup_burst"`
	// MaxConcurrentHashes bounds bcrypt work running at once (0 = half the
	// CPUs, at least 1).
	MaxConcurrentHashes int `toml:"max_concurrent_hashes"`
	// Login limits within LoginWindow (default 15m): failures of one
	// username from one address (default 10; negative = no login limits),
	// from one address over all usernames (default 100; negative = off),
	// and of one username over all addresses before each address gets only
	// 3 (default 100; negative = off).
	LoginFailures        int      `toml:"login_failures"`
	LoginAddressFailures int      `toml:"login_address_failures"`
	LoginUserFailures    int      `toml:"login_user_failures"`
	LoginWindow          Duration `toml:"login_window"`
	// MinPasswordLength is the shortest password (in characters) a signup
	// accepts: 0 = the default (10), else MinPasswordLengthLow to
	// MaxPasswordLength. Login is never affected.
	MinPasswordLength int `toml:"min_password_length"`
}

// The range of [auth] min_password_length (72: bcrypt's input limit, in
// bytes, which is also the longest password accepted).
const (
	MinPasswordLengthLow = 8
	MaxPasswordLength    = 72
)

// Compat switches on wire formats of other servers for their unchanged
// clients ([compat]).
type Compat struct {
	// Syntrix answers as Syntrix does where Loom's format differs
	// (docs/syntrix.md, "The compatibility switch"); LOOM_COMPAT_SYNTRIX.
	Syntrix bool `toml:"syntrix"`
}

// Security configures security rules.
type Security struct {
	RulesFile string `toml:"rules_file"`
	// CORSOrigins are the browser origins allowed to call the API (and to
	// open WebSockets); same-origin is always allowed. Default: none.
	CORSOrigins []string `toml:"cors_origins"`
	// CursorKey seals the query cursors (nextCursor) handed to clients:
	// at least MinCursorKeyBytes. Every node serving the same data must
	// share it. Default: generated once into the data directory.
	CursorKey string `toml:"cursor_key"`
}

// MinCursorKeyBytes is the shortest accepted [security] cursor_key.
const MinCursorKeyBytes = 32

// Remote is where `loom agents` reads and writes documents: flags
// --loom-url and --api-key, or LOOM_URL and LOOM_API_KEY.
type Remote struct {
	URL    string
	APIKey string
}

// Delivery configures the triggers' outbound webhook delivery ([delivery];
// formerly [webhooks], still accepted with a warning). Deliveries never
// connect to loopback, private, link-local or other internal addresses
// unless the URL's host is in AllowHosts or the address is in AllowCIDRs
// (default: none; the shipped loom.toml allows the server's own loopback
// address).
type Delivery struct {
	AllowHosts []string `toml:"allow_hosts"`
	AllowCIDRs []string `toml:"allow_cidrs"`
	// Workers bounds concurrent webhook requests (default 64).
	Workers int `toml:"workers"`
	// DisableAfterDead disables a trigger after this many dead deliveries
	// in a row (default 20; negative = never).
	DisableAfterDead int `toml:"disable_after_dead"`
	// DisableAfterDeadOrigins: the dead deliveries of such a streak must
	// come from at least this many distinct top-level documents (e.g.
	// users/{uid}: one user's documents cannot disable a trigger for
	// everyone; default 5, 1 = any). Triggers of the built-in handlers
	// are never disabled automatically.
	DisableAfterDeadOrigins int `toml:"disable_after_dead_origins"`
	// Retention keeps delivered and dead outbox rows (default 7 days).
	Retention Duration `toml:"retention"`
}

// LLM configures the agent runtime's model endpoint: any OpenAI-compatible
// chat-completions API. Without BaseURL the offline model runs.
type LLM struct {
	BaseURL string   `toml:"base_url"`
	APIKey  string   `toml:"api_key"`
	Model   string   `toml:"model"`
	Timeout Duration `toml:"timeout"`
}

// RxDB tunes RxDB replication.
type RxDB struct {
	// MinSchemaVersion refuses clients of older schema versions with 426
	// (default 0: every version).
	MinSchemaVersion int `toml:"min_schema_version"`
}

// Agents tunes the agent runtime.
type Agents struct {
	// Enabled serves the built-in handlers under /webhooks/* (default on).
	Enabled *bool `toml:"enabled"`
	// MaxIterations bounds LLM steps per sub-agent (default 10).
	MaxIterations int `toml:"max_iterations"`
	// TokenBudget is a sub-agent's context budget in prompt tokens: above
	// it older messages are summarised, and a context still over 1.1 times
	// it fails the task (0 = the default, 8000; else MinTokenBudget to
	// MaxTokenBudget). A role's token_budget overrides it.
	TokenBudget int `toml:"token_budget"`
	// UserTokensPerDay bounds the LLM tokens (prompt + completion) one
	// user's agent runs may use per UTC day; the next LLM call is refused
	// and the user told so in the chat. 0 = the default (200000); negative
	// = no limit, which lets any signed-up user spend without bound.
	UserTokensPerDay int `toml:"user_tokens_per_day"`
	// UserConcurrentRuns bounds a user's queries in progress at once (0 =
	// the default, 3; negative = no limit).
	UserConcurrentRuns int `toml:"user_concurrent_runs"`
	// WaitTimeout is how long an ask_user or send_message(wait: true)
	// wait lasts before the run resumes with a timeout result (default
	// 10m; at least 1s, at most 24h). The model may ask for 10s..24h per
	// call (timeoutSeconds).
	WaitTimeout Duration `toml:"wait_timeout"`
	// MaxChildTasks bounds the tasks one task starts with send_message to
	// agent roles (default 4, at most 64).
	MaxChildTasks int `toml:"max_child_tasks"`
	// ToolsFile is a JSON array of tool definitions (default ./tools.json
	// when present); [[tool]] entries add to it.
	ToolsFile string `toml:"tools_file"`
	// Roles adds sub-agent roles or overrides the built-in ones
	// (researcher, general): [agents.roles.<name>].
	Roles map[string]AgentRole `toml:"roles"`
	// Orchestrator sets the model and temperature of the orchestrator's
	// decisions and of the summaries of finished tasks:
	// [agents.orchestrator].
	Orchestrator AgentModel `toml:"orchestrator"`
	// AllowHosts / AllowCIDRs open internal addresses to the tools' HTTP
	// (http_get, http tools), whose URLs the model chooses. Default none.
	AllowHosts []string `toml:"allow_hosts"`
	AllowCIDRs []string `toml:"allow_cidrs"`
	// RulesDir holds standalone lifecycle rule files (*.toml) and
	// PluginsDir one directory per plugin (<id>/manifest.toml); default
	// none (the shipped rules and plugins only). Relative paths are
	// resolved against the working directory, as tools_file is
	// (docs/agent-rules.md).
	RulesDir   string `toml:"rules_dir"`
	PluginsDir string `toml:"plugins_dir"`
	// RuleLogRetention is how long the rules' execution log is kept
	// (default 24h).
	RuleLogRetention Duration `toml:"rule_log_retention"`
	// LuaInstructions, LuaTimeout and LuaMemory bound one run of a rule's
	// Lua script (0: the defaults, 100000 instructions, 50ms, 16 MiB).
	LuaInstructions int64    `toml:"lua_instructions"`
	LuaTimeout      Duration `toml:"lua_timeout"`
	LuaMemory       int64    `toml:"lua_memory"`
	// ChatHistory is how many recent chat messages the orchestrator reads
	// verbatim; older ones are folded into the chat's summary (default 20).
	ChatHistory int `toml:"chat_history"`
	// ChatSuspendAfter suspends a chat without a user message for that long
	// (default 24h); ChatCleanupAfter deletes a suspended or closed chat's
	// documents that long after (default 720h; "0s" or negative: never).
	ChatSuspendAfter Duration       `toml:"chat_suspend_after"`
	ChatCleanupAfter SignedDuration `toml:"chat_cleanup_after"`
}

// Upper bounds of the Lua limits: past them one rule's script could hold a
// handler (and its delivery worker) for long or take much of the heap.
const (
	MaxLuaInstructions = 100_000_000
	MaxLuaTimeout      = 10 * time.Second
	MaxLuaMemory       = 1 << 30
)

// Tool is a [[tool]] entry: a tool offered to the agents, the same fields
// as an entry of the tools file (README, "Agent runtime").
type Tool struct {
	Name          string         `toml:"name"`
	Description   string         `toml:"description"`
	InputSchema   map[string]any `toml:"input_schema"`   // JSON schema, type object
	ExecutionType string         `toml:"execution_type"` // builtin | http | client
	Visibility    string         `toml:"visibility"`     // visible (default) | hidden | result-only
	Execution     *ToolExecution `toml:"execution"`
	// ClientTimeout is how long a client tool's call waits for the client
	// app's result, in milliseconds (client tools only; default 10 min,
	// 1000..86400000).
	ClientTimeout int64 `toml:"client_timeout"`
}

// ToolExecution is how an http tool is called.
type ToolExecution struct {
	URL     string            `toml:"url"`
	Method  string            `toml:"method"`
	Headers map[string]string `toml:"headers"`
	Body    string            `toml:"body"`
	Timeout int               `toml:"timeout"` // milliseconds
}

// AgentRole is a sub-agent role: its system prompt and the tools it is
// offered (besides ask_user).
type AgentRole struct {
	SystemPrompt string   `toml:"system_prompt"`
	Tools        []string `toml:"tools"`
	// Model and Temperature are the role's LLM model (empty: [llm] model)
	// and sampling temperature (0–2; unset: the provider's default).
	Model       string   `toml:"model"`
	Temperature *float64 `toml:"temperature"`
	// MaxIterations and TokenBudget override [agents] max_iterations and
	// token_budget for the role (0: those).
	MaxIterations int `toml:"max_iterations"`
	TokenBudget   int `toml:"token_budget"`
}

// AgentModel is the LLM model (empty: [llm] model) and sampling
// temperature (0–2; unset: the provider's default) of a part of the
// runtime.
type AgentModel struct {
	Model       string   `toml:"model"`
	Temperature *float64 `toml:"temperature"`
}

// The range of a sub-agent's context budget (seed 000), and the bounds of
// a configured model name and temperature.
const (
	MinTokenBudget = 4_000
	MaxTokenBudget = 128_000
	MaxModelName   = 200
	MaxTemperature = 2.0
)

// Limits bounds request and document sizes.
type Limits struct {
	MaxDocumentBytes int   `toml:"max_document_bytes"`
	MaxRequestBytes  int64 `toml:"max_request_bytes"`
	// RateLimit is requests/second per client (uid, or IP when anonymous);
	// 0 = the server default (20000), negative = off. The admin key is
	// never limited.
	RateLimit float64 `toml:"rate_limit"`
	RateBurst int     `toml:"rate_burst"`
	// MaxStreamsPerIP bounds open WebSocket/SSE/pullStream connections per
	// client address (0 = the server default, 1000; negative = off).
	MaxStreamsPerIP int `toml:"max_streams_per_ip"`
	// MaxSubscriptionsPerUser bounds the live realtime subscriptions of one
	// user, or of one client address when anonymous, over all connections
	// (0 = the server default, 200; negative = off). MaxSubscriptions
	// bounds those of the whole server (0 = 10000; negative = off).
	MaxSubscriptionsPerUser int `toml:"max_subscriptions_per_user"`
	MaxSubscriptions        int `toml:"max_subscriptions"`
	// MaxBodyBytesInFlight bounds the request body bytes all requests hold
	// at once; beyond it a body is refused with 503 + Retry-After (0 = the
	// server default, 64 MiB or max_request_bytes if larger; never below
	// max_request_bytes).
	MaxBodyBytesInFlight int64 `toml:"max_body_bytes_in_flight"`
	// ReadTimeout bounds how long a request's headers and body may take to
	// arrive (default 1m; a stalled body gets 400). Handlers and streams
	// are not bounded by it.
	ReadTimeout Duration `toml:"read_timeout"`
	// IdleTimeout closes idle keep-alive connections (default 2m).
	IdleTimeout Duration `toml:"idle_timeout"`
}

// Metrics configures GET /metrics.
type Metrics struct {
	// RequireKey makes /metrics require the admin key or a service key
	// with the "metrics" role (default false: public, as Prometheus
	// scrapes usually are; the labels come from fixed sets either way).
	RequireKey bool `toml:"require_key"`
}

// Mongo configures the MongoDB engine (--engine mongo), on which several
// nodes serve the same data.
type Mongo struct {
	// URI is the connection string (mongodb:// or mongodb+srv://) of a
	// replica set or sharded cluster; --mongo-uri or LOOM_MONGO_URI.
	// Required with --engine mongo. It may hold credentials: errors and
	// logs show it redacted.
	URI string `toml:"uri"`
	// Database holds Loom's collections (default "loom"; LOOM_MONGO_DATABASE).
	Database string `toml:"database"`
}

// Engines are the storage engines --engine names.
var Engines = []string{"sqlite", "mongo"}

// Changes configures the change log.
type Changes struct {
	Retention Duration `toml:"retention"`
}

// Duration is a time.Duration written as a Go duration string ("168h").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("duration must be positive, got %q", b)
	}
	d.Duration = v
	return nil
}

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Addr:     DefaultAddr,
		Data:     DefaultData,
		Engine:   DefaultEngine,
		Security: Security{RulesFile: DefaultRulesFile},
		LLM:      LLM{Model: "gpt-4o-mini"},
		Limits:   Limits{MaxDocumentBytes: DefaultMaxDocumentBytes, MaxRequestBytes: DefaultMaxRequestBytes},
		Changes:  Changes{Retention: Duration{DefaultRetention}},
		Mongo:    Mongo{Database: DefaultMongoDatabase},
		Console:  Console{Enabled: true},
	}
}

// Flags are command-line values; an empty string means "not given".
type Flags struct {
	Addr, Data, Config, Triggers, Engine, MongoURI string
	// loom agents only.
	LoomURL, APIKey, WebhookSecret string
}

// Load builds the configuration: defaults < config file < LOOM_* env <
// flags. getenv is os.Getenv outside tests.
func Load(flags Flags, getenv func(string) string) (Config, error) {
	cfg := Default()
	pick := func(flag, env string) string {
		if flag != "" {
			return flag
		}
		return getenv(env)
	}

	file, explicit := pick(flags.Config, "LOOM_CONFIG"), true
	if file == "" {
		file, explicit = DefaultConfigFile, false
	}
	if err := cfg.readFile(file); err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			file = ""
		} else {
			return Config{}, err
		}
	}
	cfg.File = file

	set := func(dst *string, flag, env string) {
		if v := pick(flag, env); v != "" {
			*dst = v
		}
	}
	set(&cfg.Addr, flags.Addr, "LOOM_ADDR")
	set(&cfg.Data, flags.Data, "LOOM_DATA")
	set(&cfg.Triggers, flags.Triggers, "LOOM_TRIGGERS")
	set(&cfg.Engine, flags.Engine, "LOOM_ENGINE")
	set(&cfg.Mongo.URI, flags.MongoURI, "LOOM_MONGO_URI")
	set(&cfg.Mongo.Database, "", "LOOM_MONGO_DATABASE")
	set(&cfg.Auth.AdminKey, "", "LOOM_ADMIN_KEY")
	set(&cfg.Auth.JWTSecret, "", "LOOM_JWT_SECRET")
	set(&cfg.Security.CursorKey, "", "LOOM_CURSOR_KEY")
	set(&cfg.LLM.BaseURL, "", "LOOM_LLM_BASE_URL")
	set(&cfg.LLM.APIKey, "", "LOOM_LLM_API_KEY")
	set(&cfg.LLM.Model, "", "LOOM_LLM_MODEL")
	set(&cfg.LogLevel, "", "LOOM_LOG_LEVEL")
	set(&cfg.WebhookSecret, flags.WebhookSecret, "LOOM_WEBHOOK_SECRET")
	set(&cfg.Remote.URL, flags.LoomURL, "LOOM_URL")
	set(&cfg.Remote.APIKey, flags.APIKey, "LOOM_API_KEY")
	if v := getenv("LOOM_COMPAT_SYNTRIX"); v != "" {
		b, err := parseEnvBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("config: LOOM_COMPAT_SYNTRIX %q: use 1, true, 0 or false", v)
		}
		cfg.Compat.Syntrix = b
	}
	if v := getenv("LOOM_CONSOLE"); v != "" {
		b, err := parseEnvBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("config: LOOM_CONSOLE %q: use 1, true, 0 or false", v)
		}
		cfg.Console.Enabled = b
	}
	if cfg.Mongo.URI != "" && cfg.Engine != "mongo" {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("a MongoDB URI is set but the engine is %s: it is ignored (use --engine mongo or LOOM_ENGINE=mongo)", cfg.Engine))
	}
	if cfg.Triggers == "" {
		if _, err := os.Stat(DefaultTriggersFile); err == nil {
			cfg.Triggers = DefaultTriggersFile
		}
	}
	return cfg, cfg.Validate()
}

// parseEnvBool reads an on/off environment setting: 1/true/yes/on or
// 0/false/no/off, any case.
func parseEnvBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// fileConfig is what loom.toml decodes into: the configuration and the
// sections still accepted under an old name.
type fileConfig struct {
	Config
	// Webhooks is the old name of [delivery], which configures trigger
	// delivery: webhooks/ is the agent runtime's handlers, so the name
	// misled.
	Webhooks *Delivery `toml:"webhooks"`
}

func (c *Config) readFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	f := fileConfig{Config: *c}
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	var unknown []string
	for _, k := range md.Undecoded() {
		// A tool's input_schema is free-form JSON schema: the decoder
		// reports the keys of its nested tables as undecoded, but they all
		// land in the map.
		if len(k) > 2 && k[0] == "tool" && k[1] == "input_schema" {
			continue
		}
		unknown = append(unknown, k.String())
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config %s: unknown key(s) %s", path, strings.Join(unknown, ", "))
	}
	if md.IsDefined("webhooks") {
		if md.IsDefined("delivery") {
			return fmt.Errorf("config %s: both [delivery] and [webhooks] are set; [webhooks] is the old name of [delivery], keep only [delivery]", path)
		}
		if f.Webhooks != nil {
			f.Delivery = *f.Webhooks
		}
		f.Warnings = append(f.Warnings, fmt.Sprintf("config %s: [webhooks] is deprecated, rename it to [delivery] (same keys)", path))
	}
	*c = f.Config
	return nil
}

// Validate checks values that would otherwise fail late or silently.
func (c *Config) Validate() error {
	switch c.Engine {
	case "sqlite":
	case "mongo":
		if err := c.validateMongo(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("config: unknown engine %q (available: %s)", c.Engine, strings.Join(Engines, ", "))
	}
	if c.LogLevel != "" {
		// A typo would otherwise log at info without a word.
		var l slog.Level
		if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return fmt.Errorf("config: LOOM_LOG_LEVEL %q: use debug, info, warn or error", c.LogLevel)
		}
	}
	if c.Limits.MaxDocumentBytes <= 0 || c.Limits.MaxRequestBytes <= 0 {
		return fmt.Errorf("config: [limits] values must be positive")
	}
	if k := c.Security.CursorKey; k != "" && len(k) < MinCursorKeyBytes {
		return fmt.Errorf("config: [security] cursor_key holds %d bytes, need at least %d", len(k), MinCursorKeyBytes)
	}
	if n := c.Limits.MaxBodyBytesInFlight; n < 0 || n > 0 && n < c.Limits.MaxRequestBytes {
		return fmt.Errorf("config: [limits] max_body_bytes_in_flight (%d) must be at least max_request_bytes (%d)", n, c.Limits.MaxRequestBytes)
	}
	if int64(c.Limits.MaxDocumentBytes) > c.Limits.MaxRequestBytes {
		return fmt.Errorf("config: [limits] max_document_bytes (%d) exceeds max_request_bytes (%d)", c.Limits.MaxDocumentBytes, c.Limits.MaxRequestBytes)
	}
	for _, p := range c.Server.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				return fmt.Errorf("config: [server] trusted_proxies: %q is neither an address nor a CIDR", p)
			}
		}
	}
	if c.Auth.MaxConcurrentHashes < 0 || c.Auth.SignupBurst < 0 {
		return fmt.Errorf("config: [auth] max_concurrent_hashes and signup_burst must not be negative")
	}
	if n := c.Auth.MinPasswordLength; n != 0 && (n < MinPasswordLengthLow || n > MaxPasswordLength) {
		return fmt.Errorf("config: [auth] min_password_length must be between %d and %d (0: the default, 10), got %d", MinPasswordLengthLow, MaxPasswordLength, n)
	}
	if err := c.Console.validate(); err != nil {
		return err
	}
	if err := c.Runtime.validate(); err != nil {
		return err
	}
	if err := c.Agents.validateRules(); err != nil {
		return err
	}
	if err := c.Agents.validateChat(); err != nil {
		return err
	}
	if err := c.Agents.validateModels(); err != nil {
		return err
	}
	for _, ix := range c.Indexes {
		if err := ix.Validate(); err != nil {
			return fmt.Errorf("config: [[index]]: %w", err)
		}
	}
	return nil
}

// validateMongo checks what the MongoDB engine needs: a connection string,
// and every setting the nodes sharing the database must agree on. With the
// embedded engine a node generates the missing ones into its data
// directory; on MongoDB another node would generate different ones (tokens,
// cursors, the built-in handlers' signatures and the admin key would work
// on one node only), so a missing one refuses to start rather than half
// work.
func (c *Config) validateMongo() error {
	u := c.Mongo.URI
	if u == "" {
		return errors.New("config: engine mongo needs a MongoDB URI: --mongo-uri, LOOM_MONGO_URI or [mongo] uri (mongodb://host1,host2,host3/?replicaSet=rs0)")
	}
	if !strings.HasPrefix(u, "mongodb://") && !strings.HasPrefix(u, "mongodb+srv://") {
		return errors.New("config: the MongoDB URI must start with mongodb:// or mongodb+srv://")
	}
	if c.Mongo.Database == "" {
		return errors.New("config: [mongo] database must not be empty")
	}
	if missing := c.MissingSharedSettings(); len(missing) > 0 {
		return fmt.Errorf("config: engine mongo: every node serving the database must share these settings, which are not set: %s. "+
			"Unset, a node would generate its own into its data directory and the other nodes would refuse what it issues; "+
			"set each to the same value on every node (32+ random bytes, e.g. `openssl rand -base64 32`; the webhook secret as whsec_<base64>)",
			strings.Join(missing, ", "))
	}
	return nil
}

// MissingSharedSettings names the settings that nodes on one database must
// share and that this configuration leaves unset (each is then generated
// into the data directory, which is right for one node only): the admin
// key, the token signing secret, the cursor key and the webhook secret.
func (c *Config) MissingSharedSettings() []string {
	var missing []string
	for _, s := range []struct{ value, name string }{
		{c.Auth.AdminKey, "the admin key (LOOM_ADMIN_KEY or [auth] admin_key)"},
		{c.Auth.JWTSecret, "the token signing secret (LOOM_JWT_SECRET or [auth] jwt_secret)"},
		{c.Security.CursorKey, "the cursor key (LOOM_CURSOR_KEY or [security] cursor_key)"},
		{c.WebhookSecret, "the webhook secret (LOOM_WEBHOOK_SECRET, whsec_<base64>)"},
	} {
		if s.value == "" {
			missing = append(missing, s.name)
		}
	}
	return missing
}

// validateRules checks the [agents] keys of the lifecycle rules: the
// directories, when named, must be directories (a typo would otherwise
// load no rule without a word), and the Lua limits must be in range.
func (a *Agents) validateRules() error {
	for _, d := range []struct{ key, dir string }{{"rules_dir", a.RulesDir}, {"plugins_dir", a.PluginsDir}} {
		if d.dir == "" {
			continue
		}
		fi, err := os.Stat(d.dir)
		if err != nil {
			return fmt.Errorf("config: [agents] %s: %w", d.key, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("config: [agents] %s: %s is not a directory", d.key, d.dir)
		}
	}
	if d := a.WaitTimeout.Duration; d != 0 && (d < time.Second || d > 24*time.Hour) {
		return fmt.Errorf("config: [agents] wait_timeout must be between 1s and 24h, got %s", d)
	}
	if n := a.MaxChildTasks; n < 0 || n > 64 {
		return fmt.Errorf("config: [agents] max_child_tasks must be between 0 (the default, 4) and 64, got %d", n)
	}
	if n := a.LuaInstructions; n < 0 || n > MaxLuaInstructions {
		return fmt.Errorf("config: [agents] lua_instructions must be between 0 (the default) and %d, got %d", MaxLuaInstructions, n)
	}
	if d := a.LuaTimeout.Duration; d > MaxLuaTimeout {
		return fmt.Errorf("config: [agents] lua_timeout must be at most %s, got %s", MaxLuaTimeout, d)
	}
	if n := a.LuaMemory; n < 0 || n > MaxLuaMemory {
		return fmt.Errorf("config: [agents] lua_memory must be between 0 (the default) and %d bytes, got %d", MaxLuaMemory, n)
	}
	return nil
}

// validateModels checks the budgets, iteration limits, models and
// temperatures of [agents], [agents.orchestrator] and each
// [agents.roles.<name>]; the error names the key.
func (a *Agents) validateModels() error {
	budget := func(key string, n int) error {
		if n != 0 && (n < MinTokenBudget || n > MaxTokenBudget) {
			return fmt.Errorf("config: %s must be between %d and %d (0: the default), got %d", key, MinTokenBudget, MaxTokenBudget, n)
		}
		return nil
	}
	model := func(section string, m AgentModel) error {
		if len(m.Model) > MaxModelName || strings.TrimSpace(m.Model) != m.Model {
			return fmt.Errorf("config: %s model must be a model name of at most %d bytes without surrounding spaces, got %q", section, MaxModelName, m.Model)
		}
		if t := m.Temperature; t != nil && !(*t >= 0 && *t <= MaxTemperature) {
			return fmt.Errorf("config: %s temperature must be between 0 and %g, got %g", section, MaxTemperature, *t)
		}
		return nil
	}
	if err := budget("[agents] token_budget", a.TokenBudget); err != nil {
		return err
	}
	if a.MaxIterations < 0 {
		return fmt.Errorf("config: [agents] max_iterations must not be negative, got %d", a.MaxIterations)
	}
	if err := model("[agents.orchestrator]", a.Orchestrator); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(a.Roles)) {
		r := a.Roles[name]
		section := "[agents.roles." + name + "]"
		if err := budget(section+" token_budget", r.TokenBudget); err != nil {
			return err
		}
		if r.MaxIterations < 0 {
			return fmt.Errorf("config: %s max_iterations must not be negative, got %d", section, r.MaxIterations)
		}
		if err := model(section, AgentModel{Model: r.Model, Temperature: r.Temperature}); err != nil {
			return err
		}
	}
	return nil
}
