package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/internal/config"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad_Defaults(t *testing.T) {
	t.Chdir(t.TempDir()) // no ./loom.toml here
	cfg, err := config.Load(config.Flags{}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:8080" || cfg.Data != "./data" || cfg.Engine != "sqlite" || cfg.File != "" {
		t.Fatalf("defaults=%+v", cfg)
	}
	if cfg.Changes.Retention.Duration != 7*24*time.Hour {
		t.Fatalf("retention=%v, want 168h", cfg.Changes.Retention)
	}
	if len(cfg.Indexes) != 0 || len(cfg.Warnings) != 0 {
		t.Fatalf("indexes=%v warnings=%v, want none (the features' own indexes are joined by package app)", cfg.Indexes, cfg.Warnings)
	}
}

func TestLoad_Precedence(t *testing.T) {
	p := writeFile(t, `
[auth]
admin_key = "from-file"
[limits]
max_document_bytes = 2048
max_request_bytes = 4096
max_body_bytes_in_flight = 8192
max_subscriptions_per_user = 7
max_subscriptions = 70
read_timeout = "5s"
idle_timeout = "30s"
[metrics]
require_key = true
[changes]
retention = "2h"
[[index]]
collection = "rooms/*/messages"
fields = ["sender", "createdAt"]
`)
	cfg, err := config.Load(config.Flags{Config: p, Addr: "127.0.0.1:9999"},
		env(map[string]string{"LOOM_ADDR": "127.0.0.1:1", "LOOM_DATA": "/tmp/x", "LOOM_ADMIN_KEY": "from-env"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9999" {
		t.Errorf("addr=%q, want the flag", cfg.Addr)
	}
	if cfg.Data != "/tmp/x" {
		t.Errorf("data=%q, want the env value", cfg.Data)
	}
	if cfg.Auth.AdminKey != "from-env" {
		t.Errorf("admin key=%q, want env over file", cfg.Auth.AdminKey)
	}
	if cfg.Limits.MaxDocumentBytes != 2048 || cfg.Changes.Retention.Duration != 2*time.Hour {
		t.Errorf("limits=%+v retention=%v", cfg.Limits, cfg.Changes.Retention)
	}
	if l := cfg.Limits; l.MaxBodyBytesInFlight != 8192 || l.ReadTimeout.Duration != 5*time.Second || l.IdleTimeout.Duration != 30*time.Second || !cfg.Metrics.RequireKey || l.MaxSubscriptionsPerUser != 7 || l.MaxSubscriptions != 70 {
		t.Errorf("limits=%+v metrics=%+v", l, cfg.Metrics)
	}
	if len(cfg.Indexes) != 1 || cfg.Indexes[0].Collection != "rooms/*/messages" {
		t.Errorf("indexes=%+v, want the configured one", cfg.Indexes)
	}
}

func TestLoad_Errors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"unknown key", "[auth]\nadmin_kee = \"x\"\n", "auth.admin_kee"},
		{"unknown table", "[nope]\nx = 1\n", "nope"},
		{"bad duration", "[changes]\nretention = \"soon\"\n", "retention"},
		{"bad index", "[[index]]\ncollection = \"a/b\"\nfields = [\"x\"]\n", "index"},
		{"doc over request", "[limits]\nmax_document_bytes = 10\nmax_request_bytes = 5\n", "max_document_bytes"},
		{"body budget below request", "[limits]\nmax_body_bytes_in_flight = 1024\n", "max_body_bytes_in_flight"},
		{"zero read timeout", "[limits]\nread_timeout = \"0s\"\n", "read_timeout"},
		{"syntax", "[auth\n", "loom.toml"},
		{"short cursor key", "[security]\ncursor_key = \"short\"\n", "cursor_key"},
		{"bad trusted proxy", "[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", "trusted_proxies"},
		{"negative hash slots", "[auth]\nmax_concurrent_hashes = -1\n", "max_concurrent_hashes"},
		{"unknown delivery key", "[delivery]\nworkerz = 3\n", "delivery.workerz"},
		{"unknown deprecated webhooks key", "[webhooks]\nworkerz = 3\n", "webhooks.workerz"},
		{"unknown tool key", "[[tool]]\nname = \"t\"\nexecution = { url = \"http://x\", verb = \"GET\" }\n", "tool.execution.verb"},
		{"delivery and webhooks", "[delivery]\nworkers = 3\n[webhooks]\nworkers = 4\n", "both [delivery] and [webhooks]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load(config.Flags{Config: writeFile(t, c.body)}, env(nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err=%v, want mention of %q", err, c.want)
			}
		})
	}
	if _, err := config.Load(config.Flags{Config: "/nonexistent/loom.toml"}, env(nil)); err == nil {
		t.Fatal("an explicit config file that does not exist must be an error")
	}
	if _, err := config.Load(config.Flags{Engine: "cassandra"}, env(nil)); err == nil {
		t.Fatal("unknown engine must be an error")
	}
}

// The repository's loom.toml (what `make run` uses) loads: every key in it
// is known.
func TestShippedConfigLoads(t *testing.T) {
	// From the repository root, as make run reads it (rules_dir is relative).
	t.Chdir(filepath.Join("..", ".."))
	cfg, err := config.Load(config.Flags{Config: "loom.toml"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Delivery.AllowHosts) == 0 {
		t.Fatal("the shipped config should allow the server's own loopback address for webhooks")
	}
	if len(cfg.Warnings) != 0 {
		t.Fatalf("warnings=%v, want none", cfg.Warnings)
	}
}

const deliveryKeys = `
allow_hosts = ["127.0.0.1"]
allow_cidrs = ["127.0.0.0/8"]
workers = 8
disable_after_dead = -1
disable_after_dead_origins = 2
retention = "1h"
`

// [delivery] configures trigger delivery; [webhooks], its old name, still
// loads the same keys, with a warning naming the new section.
func TestLoad_Delivery(t *testing.T) {
	want := config.Delivery{
		AllowHosts: []string{"127.0.0.1"}, AllowCIDRs: []string{"127.0.0.0/8"},
		Workers: 8, DisableAfterDead: -1, DisableAfterDeadOrigins: 2, Retention: config.Duration{Duration: time.Hour},
	}
	for _, section := range []string{"delivery", "webhooks"} {
		t.Run(section, func(t *testing.T) {
			cfg, err := config.Load(config.Flags{Config: writeFile(t, "["+section+"]"+deliveryKeys)}, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Delivery; !reflect.DeepEqual(got, want) {
				t.Errorf("delivery=%+v, want %+v", got, want)
			}
			deprecated := section == "webhooks"
			if warned := len(cfg.Warnings) == 1 && strings.Contains(cfg.Warnings[0], "[delivery]"); warned != deprecated || len(cfg.Warnings) > 1 {
				t.Errorf("warnings=%q, want a warning naming [delivery]: %v", cfg.Warnings, deprecated)
			}
		})
	}
}

// Process settings that only the environment or flags give: the log level,
// the webhook secret and the remote server of loom agents.
func TestLoad_ProcessSettings(t *testing.T) {
	t.Chdir(t.TempDir())
	vars := env(map[string]string{
		"LOOM_LOG_LEVEL": "debug", "LOOM_WEBHOOK_SECRET": "env-secret",
		"LOOM_URL": "http://env:8080", "LOOM_API_KEY": "env-key",
	})
	cfg, err := config.Load(config.Flags{}, vars)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogLevel != "debug" || cfg.WebhookSecret != "env-secret" || cfg.Remote.URL != "http://env:8080" || cfg.Remote.APIKey != "env-key" {
		t.Errorf("from env: log level=%q secret=%q remote=%+v", cfg.LogLevel, cfg.WebhookSecret, cfg.Remote)
	}
	cfg, err = config.Load(config.Flags{LoomURL: "http://flag", APIKey: "flag-key", WebhookSecret: "flag-secret"}, vars)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WebhookSecret != "flag-secret" || cfg.Remote.URL != "http://flag" || cfg.Remote.APIKey != "flag-key" {
		t.Errorf("flags over env: secret=%q remote=%+v", cfg.WebhookSecret, cfg.Remote)
	}
	// A log level that is not one refuses to start rather than log at info.
	for level, ok := range map[string]bool{"warn": true, "ERROR": true, "warning": false, "loud": false} {
		_, err := config.Load(config.Flags{}, env(map[string]string{"LOOM_LOG_LEVEL": level}))
		if (err == nil) != ok {
			t.Errorf("LOOM_LOG_LEVEL=%s: err=%v, want ok=%v", level, err, ok)
		}
	}
}

// [[tool]] entries are plain data with the tools file's fields; the input
// schema is free-form (its nested tables are not unknown keys), the rest of
// an entry is not.
func TestLoad_Tools(t *testing.T) {
	p := writeFile(t, `
[[tool]]
name           = "weather"
description    = "Current weather for a city"
execution_type = "http"
visibility     = "visible"
input_schema   = { type = "object", properties = { city = { type = "string", enum = ["Paris"] } }, required = ["city"] }
execution      = { url = "https://wttr.in/{{input.city}}", method = "GET", headers = { Accept = "application/json" }, body = "b", timeout = 10000 }

[[tool]]
name           = "pick_file"
execution_type = "client"
client_timeout = 60000
`)
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tools) != 2 {
		t.Fatalf("tools=%+v, want two", cfg.Tools)
	}
	if c := cfg.Tools[1]; c.Name != "pick_file" || c.ExecutionType != "client" || c.ClientTimeout != 60000 || c.Execution != nil {
		t.Errorf("client tool=%+v", c)
	}
	tool := cfg.Tools[0]
	want := config.ToolExecution{URL: "https://wttr.in/{{input.city}}", Method: "GET", Headers: map[string]string{"Accept": "application/json"}, Body: "b", Timeout: 10000}
	if tool.Name != "weather" || tool.ExecutionType != "http" || tool.Visibility != "visible" || tool.InputSchema["type"] != "object" ||
		tool.Execution == nil || !reflect.DeepEqual(*tool.Execution, want) {
		t.Errorf("tool=%+v execution=%+v", tool, tool.Execution)
	}
	props, _ := tool.InputSchema["properties"].(map[string]any)
	if city, _ := props["city"].(map[string]any); city["type"] != "string" {
		t.Errorf("input_schema=%v, want properties.city.type string", tool.InputSchema)
	}
}

// The abuse limits of signup and login, and the trusted proxies, are read
// from their keys.
func TestLoad_AuthLimitsAndProxies(t *testing.T) {
	p := writeFile(t, `
[server]
trusted_proxies = ["10.0.0.0/8", "127.0.0.1", "fd00::/8"]
[auth]
signup_rate = 2.5
signup_burst = 4
max_concurrent_hashes = 3
login_window = "5m"
login_failures = 7
login_address_failures = -1
login_user_failures = 50
`)
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Auth
	if got := strings.Join(cfg.Server.TrustedProxies, ","); got != "10.0.0.0/8,127.0.0.1,fd00::/8" {
		t.Errorf("trusted_proxies=%s", got)
	}
	if a.SignupRate != 2.5 || a.SignupBurst != 4 || a.MaxConcurrentHashes != 3 || a.LoginWindow.Duration != 5*time.Minute ||
		a.LoginFailures != 7 || a.LoginAddressFailures != -1 || a.LoginUserFailures != 50 {
		t.Errorf("auth=%+v", a)
	}
}

// The per-user agent limits are loom.toml keys ([agents]).
func TestLoad_AgentUserLimits(t *testing.T) {
	p := writeFile(t, "[agents]\nuser_tokens_per_day = 5000\nuser_concurrent_runs = -1\nwait_timeout = \"2s\"\nmax_child_tasks = 2\n")
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agents.UserTokensPerDay != 5000 || cfg.Agents.UserConcurrentRuns != -1 {
		t.Fatalf("agents=%+v, want user_tokens_per_day 5000, user_concurrent_runs -1", cfg.Agents)
	}
	if cfg.Agents.WaitTimeout.Duration != 2*time.Second || cfg.Agents.MaxChildTasks != 2 {
		t.Fatalf("agents=%+v, want wait_timeout 2s, max_child_tasks 2", cfg.Agents)
	}
}

// sharedEnv sets every setting the nodes of one database must share.
var sharedEnv = map[string]string{
	"LOOM_ADMIN_KEY":      "admin-key",
	"LOOM_JWT_SECRET":     strings.Repeat("j", 32),
	"LOOM_CURSOR_KEY":     strings.Repeat("c", 32),
	"LOOM_WEBHOOK_SECRET": "whsec_shared",
}

func withEnv(base map[string]string, kv ...string) func(string) string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return env(m)
}

// The MongoDB engine: [mongo] in the file, LOOM_MONGO_* over it, the
// --mongo-uri flag over both; the database defaults to "loom".
func TestLoad_Mongo(t *testing.T) {
	t.Chdir(t.TempDir())
	p := writeFile(t, "[mongo]\nuri = \"mongodb://file:27017/?replicaSet=rs0\"\ndatabase = \"fromfile\"\n")
	cfg, err := config.Load(config.Flags{Config: p, Engine: "mongo"}, withEnv(sharedEnv))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine != "mongo" || cfg.Mongo.URI != "mongodb://file:27017/?replicaSet=rs0" || cfg.Mongo.Database != "fromfile" {
		t.Errorf("from file: engine=%q mongo=%+v", cfg.Engine, cfg.Mongo)
	}
	cfg, err = config.Load(config.Flags{Config: p}, withEnv(sharedEnv,
		"LOOM_ENGINE", "mongo", "LOOM_MONGO_URI", "mongodb+srv://env.example", "LOOM_MONGO_DATABASE", "fromenv"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != "mongodb+srv://env.example" || cfg.Mongo.Database != "fromenv" {
		t.Errorf("env over file: mongo=%+v", cfg.Mongo)
	}
	cfg, err = config.Load(config.Flags{Engine: "mongo", MongoURI: "mongodb://flag:27017"}, withEnv(sharedEnv, "LOOM_MONGO_URI", "mongodb://env:27017"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != "mongodb://flag:27017" || cfg.Mongo.Database != "loom" {
		t.Errorf("flag over env, default database: mongo=%+v", cfg.Mongo)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings=%q, want none", cfg.Warnings)
	}
}

// A URI with the embedded engine loads, with a warning that it is unused.
func TestLoad_MongoURIWithSQLiteWarns(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg, err := config.Load(config.Flags{MongoURI: "mongodb://x:27017"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "--engine mongo") {
		t.Errorf("warnings=%q, want one naming --engine mongo", cfg.Warnings)
	}
}

func TestLoad_MongoErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	cases := []struct {
		name  string
		flags config.Flags
		env   func(string) string
		want  []string
	}{
		{"no uri", config.Flags{Engine: "mongo"}, withEnv(sharedEnv), []string{"engine mongo needs a MongoDB URI", "--mongo-uri", "LOOM_MONGO_URI"}},
		{"not a mongodb uri", config.Flags{Engine: "mongo", MongoURI: "http://db:27017"}, withEnv(sharedEnv), []string{"mongodb://"}},
		{"no shared secrets", config.Flags{Engine: "mongo", MongoURI: "mongodb://db"}, env(nil),
			[]string{"LOOM_ADMIN_KEY", "LOOM_JWT_SECRET", "LOOM_CURSOR_KEY", "LOOM_WEBHOOK_SECRET"}},
		{"one shared secret missing", config.Flags{Engine: "mongo", MongoURI: "mongodb://db"}, withEnv(sharedEnv, "LOOM_CURSOR_KEY", ""),
			[]string{"LOOM_CURSOR_KEY"}},
		{"unknown engine", config.Flags{Engine: "cassandra"}, env(nil), []string{`"cassandra"`, "sqlite, mongo"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load(c.flags, c.env)
			if err == nil {
				t.Fatalf("loaded, want an error naming %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err=%v, want mention of %q", err, w)
				}
			}
			if c.name == "one shared secret missing" && strings.Contains(err.Error(), "LOOM_JWT_SECRET") {
				t.Errorf("err=%v names a setting that is set", err)
			}
		})
	}
	if _, err := config.Load(config.Flags{Config: writeFile(t, "[mongo]\ndatabase = \"\"\n"), Engine: "mongo", MongoURI: "mongodb://db"}, withEnv(sharedEnv)); err == nil || !strings.Contains(err.Error(), "database") {
		t.Errorf("empty [mongo] database: err=%v, want one naming it", err)
	}
}

// [agents] of the lifecycle rules: the directories and the limits load;
// a missing directory, a file named as a directory and out-of-range
// limits are refused with the key named.
func TestLoad_AgentRules(t *testing.T) {
	dir := t.TempDir()
	rules, plugins := filepath.Join(dir, "rules"), filepath.Join(dir, "plugins")
	for _, d := range []string{rules, plugins} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := writeFile(t, "[agents]\nrules_dir = \""+rules+"\"\nplugins_dir = \""+plugins+"\"\nrule_log_retention = \"2h\"\n"+
		"lua_instructions = 5000\nlua_timeout = \"20ms\"\nlua_memory = 1048576\n")
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Agents
	if a.RulesDir != rules || a.PluginsDir != plugins || a.RuleLogRetention.Duration != 2*time.Hour ||
		a.LuaInstructions != 5000 || a.LuaTimeout.Duration != 20*time.Millisecond || a.LuaMemory != 1<<20 {
		t.Fatalf("agents=%+v", a)
	}

	file := filepath.Join(dir, "file.toml")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ body, want string }{
		{"rules_dir = \"" + filepath.Join(dir, "none") + "\"", "rules_dir"},
		{"plugins_dir = \"" + file + "\"", "plugins_dir: " + file + " is not a directory"},
		{"lua_instructions = -1", "lua_instructions"},
		{"lua_instructions = 1000000000", "lua_instructions"},
		{"lua_timeout = \"1m\"", "lua_timeout"},
		{"lua_memory = 4294967296", "lua_memory"},
		{"rule_log_retention = \"-1h\"", "rule_log_retention"},
		{"wait_timeout = \"500ms\"", "wait_timeout"},
		{"wait_timeout = \"25h\"", "wait_timeout"},
		{"max_child_tasks = -1", "max_child_tasks"},
		{"max_child_tasks = 65", "max_child_tasks"},
	} {
		_, err := config.Load(config.Flags{Config: writeFile(t, "[agents]\n"+tt.body+"\n")}, env(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err=%v, want one naming %q", tt.body, err, tt.want)
		}
	}
}

// Budgets, iteration limits, models and temperatures of [agents], the
// orchestrator and each role; a value out of range is an error naming
// the key.
func TestLoad_AgentModels(t *testing.T) {
	p := writeFile(t, `[agents]
token_budget = 16000
[agents.orchestrator]
model = "big-model"
temperature = 0.2
[agents.roles.researcher]
model = "small-model"
temperature = 0
max_iterations = 4
token_budget = 4000
`)
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Agents
	r := a.Roles["researcher"]
	if a.TokenBudget != 16000 || a.Orchestrator.Model != "big-model" || a.Orchestrator.Temperature == nil || *a.Orchestrator.Temperature != 0.2 ||
		r.Model != "small-model" || r.Temperature == nil || *r.Temperature != 0 || r.MaxIterations != 4 || r.TokenBudget != 4000 {
		t.Fatalf("agents=%+v role=%+v", a, r)
	}
	if a.Roles["researcher"].Temperature == nil {
		t.Fatal("an explicit temperature 0 must be kept (unset is nil)")
	}
	for _, tt := range []struct{ body, want string }{
		{"[agents]\ntoken_budget = 3999", "[agents] token_budget must be between 4000 and 128000"},
		{"[agents]\ntoken_budget = 128001", "[agents] token_budget"},
		{"[agents]\nmax_iterations = -1", "[agents] max_iterations"},
		{"[agents.orchestrator]\ntemperature = 2.5", "[agents.orchestrator] temperature"},
		{"[agents.orchestrator]\ntemperature = -0.1", "[agents.orchestrator] temperature"},
		{"[agents.orchestrator]\nmodel = \" x\"", "[agents.orchestrator] model"},
		{"[agents.roles.r]\ntoken_budget = 100", "[agents.roles.r] token_budget"},
		{"[agents.roles.r]\nmax_iterations = -3", "[agents.roles.r] max_iterations"},
		{"[agents.roles.r]\ntemperature = 3", "[agents.roles.r] temperature"},
		{"[agents.roles.r]\nmodel = \"" + strings.Repeat("m", 201) + "\"", "[agents.roles.r] model"},
		{"[agents.roles.r]\ntop_p = 1", "top_p"},
		{"[agents.orchestrator]\nmax_iterations = 1", "max_iterations"},
	} {
		_, err := config.Load(config.Flags{Config: writeFile(t, tt.body+"\n")}, env(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err=%v, want one naming %q", tt.body, err, tt.want)
		}
	}
}

// [compat] syntrix and [auth] min_password_length (docs/syntrix.md): the
// switch comes from the file or LOOM_COMPAT_SYNTRIX (which wins), and a
// password minimum outside 8..72 refuses to start, naming the key.
func TestLoad_CompatAndPasswordLength(t *testing.T) {
	p := writeFile(t, "[compat]\nsyntrix = true\n[auth]\nmin_password_length = 8\n")
	cfg, err := config.Load(config.Flags{Config: p}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Compat.Syntrix || cfg.Auth.MinPasswordLength != 8 {
		t.Fatalf("compat=%+v min_password_length=%d", cfg.Compat, cfg.Auth.MinPasswordLength)
	}
	for v, want := range map[string]bool{"1": true, "true": true, "TRUE": true, "on": true, "0": false, "false": false, "off": false} {
		cfg, err := config.Load(config.Flags{Config: p}, env(map[string]string{"LOOM_COMPAT_SYNTRIX": v}))
		if err != nil || cfg.Compat.Syntrix != want {
			t.Errorf("LOOM_COMPAT_SYNTRIX=%s: syntrix=%v err=%v, want %v", v, cfg.Compat.Syntrix, err, want)
		}
	}
	if _, err := config.Load(config.Flags{Config: p}, env(map[string]string{"LOOM_COMPAT_SYNTRIX": "maybe"})); err == nil || !strings.Contains(err.Error(), "LOOM_COMPAT_SYNTRIX") {
		t.Errorf("LOOM_COMPAT_SYNTRIX=maybe: err=%v, want an error naming it", err)
	}
	t.Chdir(t.TempDir())
	def, err := config.Load(config.Flags{}, env(nil))
	if err != nil || def.Compat.Syntrix || def.Auth.MinPasswordLength != 0 {
		t.Errorf("defaults: compat=%+v min=%d err=%v, want off and 0", def.Compat, def.Auth.MinPasswordLength, err)
	}
	for _, n := range []string{"7", "73", "-1", "1"} {
		_, err := config.Load(config.Flags{Config: writeFile(t, "[auth]\nmin_password_length = "+n+"\n")}, env(nil))
		if err == nil || !strings.Contains(err.Error(), "[auth] min_password_length") {
			t.Errorf("min_password_length = %s: err=%v, want an error naming the key", n, err)
		}
	}
	for _, n := range []string{"0", "8", "72"} {
		if _, err := config.Load(config.Flags{Config: writeFile(t, "[auth]\nmin_password_length = "+n+"\n")}, env(nil)); err != nil {
			t.Errorf("min_password_length = %s: %v", n, err)
		}
	}
	if _, err := config.Load(config.Flags{Config: writeFile(t, "[compat]\nsyntrx = true\n")}, env(nil)); err == nil || !strings.Contains(err.Error(), "compat.syntrx") {
		t.Errorf("unknown [compat] key: err=%v", err)
	}
}
