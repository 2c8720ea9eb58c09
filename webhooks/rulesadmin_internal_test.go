package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/webhooks/plugins"
	"github.com/loomdb/loom/webhooks/tools"
)

// A standalone rule of the test's rules_dir.
const adminTestRule = `
[rule]
id = "say-hello"
name = "Say hello"
trigger = "on_query_start"

[condition]
expression = "true"

[action]
type = "notify_self"
message = "hello"
`

// A plugin that needs a tool the runtime lacks.
const adminTestPlugin = `
[plugin]
id = "vault"
name = "Vault"
version = "1.0.0"

[capabilities]
requires = ["vault_search"]

[rules]
include = ["rules/*.toml"]
`

const adminTestPluginRule = `
[rule]
id = "search-first"
trigger = "on_turn_start"

[condition]
expression = "true"

[action]
type = "log"
message = "x"
`

// rulesEnv is a runtime with rules over a real store, as the service key
// of the shipped security rules sees it.
type rulesEnv struct {
	h        *Handlers
	docs     *access.Docs
	store    collections.Store
	reg      *prometheus.Registry
	rulesDir string
	load     func() (*plugins.Set, error)
}

func newRulesEnv(t *testing.T) *rulesEnv {
	t.Helper()
	dir := t.TempDir()
	rulesDir, pluginsDir := filepath.Join(dir, "rules"), filepath.Join(dir, "plugins")
	writeTestFile(t, filepath.Join(rulesDir, "say-hello.toml"), adminTestRule)
	writeTestFile(t, filepath.Join(pluginsDir, "vault", "manifest.toml"), adminTestPlugin)
	writeTestFile(t, filepath.Join(pluginsDir, "vault", "rules", "search-first.toml"), adminTestPluginRule)
	reg, err := tools.New(nil, tools.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	opts := plugins.LoadOptions{RulesDir: rulesDir, PluginsDir: pluginsDir, Builtin: plugins.Builtin(), Capabilities: reg.Names()}
	load := func() (*plugins.Set, error) { return plugins.Load(opts) }
	set, err := load()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := plugins.NewEngine(set, plugins.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &rulesEnv{store: openTestStore(t), reg: prometheus.NewRegistry(), rulesDir: rulesDir, load: load}
	e.docs = e.serviceDocs()
	e.h = offlineHandlers(t, Config{Docs: e.docs, Rules: eng, LoadRules: load, Registerer: e.reg})
	return e
}

// serviceDocs are the store's documents as the runtime's service key sees
// them.
func (e *rulesEnv) serviceDocs() *access.Docs {
	svc, err := access.New(access.Config{Store: e.store, Rules: rules.Default()})
	if err != nil {
		panic(err)
	}
	caller := access.CallerOfIdentity(&auth.Identity{UID: "key:agents", Username: "agents", Roles: []string{"service"}, Kind: auth.KindServiceKey})
	return access.NewDocs(svc, "", func(context.Context) (*access.Caller, error) { return caller, nil })
}

func openTestStore(t *testing.T) collections.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db"), Indexes: Indexes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// call serves one admin request and decodes the JSON answer.
func (e *rulesEnv) call(t *testing.T, method, path string) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	e.h.RulesAdmin().ServeHTTP(w, httptest.NewRequest(method, path, nil))
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON", method, path, w.Code, w.Body.String())
	}
	return w.Code, body
}

// find returns the entry of list (a JSON array of objects) whose field is
// value.
func find(t *testing.T, list any, field, value string) map[string]any {
	t.Helper()
	items, _ := list.([]any)
	for _, it := range items {
		if m, _ := it.(map[string]any); m[field] == value {
			return m
		}
	}
	t.Fatalf("no %s %q in %v", field, value, list)
	return nil
}

func TestRulesAdmin_ListAndSwitch(t *testing.T) {
	e := newRulesEnv(t)
	const base = RulesAdminPrefix

	code, body := e.call(t, http.MethodGet, base+"/rules")
	if code != http.StatusOK {
		t.Fatalf("GET rules: %d %v", code, body)
	}
	core := find(t, body["rules"], "key", "tool-failure-loop")
	if core["core"] != true || core["effective"] != true || core["switch"] != nil {
		t.Errorf("core rule %v, want core, effective, no switch", core)
	}
	warn := find(t, body["rules"], "key", "token-budget/token-budget-warning")
	if warn["fileEnabled"] != true || warn["effective"] != false || warn["plugin"] != "token-budget" {
		t.Errorf("token budget rule %v, want enabled by its file but not effective (its plugin is off)", warn)
	}
	vault := find(t, body["plugins"], "id", "vault")
	if vault["available"] != false || vault["effective"] != false || !strings.Contains(jsonOf(vault["missing"]), "vault_search") {
		t.Errorf("vault plugin %v, want unavailable, missing vault_search", vault)
	}
	if hello := find(t, body["rules"], "key", "say-hello"); hello["effective"] != true || hello["source"] == "" {
		t.Errorf("standalone rule %v, want effective with its source", hello)
	}

	// Enabling the plugin makes its rule effective, at once here.
	if code, body := e.call(t, http.MethodPost, base+"/plugins/token-budget/enable"); code != http.StatusOK || body["effective"] != true {
		t.Fatalf("enable token-budget: %d %v", code, body)
	}
	_, body = e.call(t, http.MethodGet, base+"/rules")
	if warn := find(t, body["rules"], "key", "token-budget/token-budget-warning"); warn["effective"] != true {
		t.Errorf("after enabling its plugin: %v, want effective", warn)
	}
	// A rule key holds a "/": the path carries it.
	if code, body := e.call(t, http.MethodPost, base+"/rules/token-budget/token-budget-warning/disable"); code != http.StatusOK || body["effective"] != false || body["key"] != "token-budget/token-budget-warning" {
		t.Fatalf("disable the rule: %d %v", code, body)
	}
	sw, err := e.h.switches(context.Background())
	if err != nil || sw["plugin:token-budget"] != true || sw["token-budget/token-budget-warning"] != false {
		t.Fatalf("switches %v %v", sw, err)
	}
	// An admin may switch a core rule off (users may not).
	if code, body := e.call(t, http.MethodPost, base+"/rules/tool-failure-loop/disable"); code != http.StatusOK || body["effective"] != false {
		t.Errorf("disable the core rule: %d %v", code, body)
	}

	// The switches are documents: another node reads them (after its cache).
	other := offlineHandlers(t, Config{Docs: e.serviceDocs(), Rules: e.h.cfg.Rules})
	if sw, err := other.switches(context.Background()); err != nil || len(sw) != 3 || sw["tool-failure-loop"] != false {
		t.Errorf("another node's switches: %v %v, want the 3 set here", sw, err)
	}
	now := time.Now()
	other.rules.now = func() time.Time { return now }
	if _, err := other.switches(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.call(t, http.MethodPost, base+"/rules/tool-failure-loop/enable")
	if sw, _ := other.switches(context.Background()); sw["tool-failure-loop"] != false {
		t.Error("another node's cache refreshed before its TTL")
	}
	now = now.Add(switchesTTL)
	if sw, _ := other.switches(context.Background()); sw["tool-failure-loop"] != true {
		t.Error("another node did not see the switch after the TTL")
	}

	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodPost, base + "/plugins/vault/enable", http.StatusConflict, "CONFLICT"},
		{http.MethodPost, base + "/rules/vault/search-first/enable", http.StatusConflict, "CONFLICT"},
		{http.MethodPost, base + "/rules/nope/enable", http.StatusNotFound, "NOT_FOUND"},
		{http.MethodPost, base + "/plugins/nope/disable", http.StatusNotFound, "NOT_FOUND"},
		{http.MethodPost, base + "/rules/say-hello/toggle", http.StatusNotFound, "NOT_FOUND"},
		{http.MethodPost, base + "/plugins/enable", http.StatusNotFound, "NOT_FOUND"},
		{http.MethodGet, base + "/rules/say-hello/enable", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"},
		{http.MethodPost, base + "/rules", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"},
		{http.MethodGet, base + "/nothing", http.StatusNotFound, "NOT_FOUND"},
	} {
		code, body := e.call(t, tt.method, tt.path)
		if code != tt.status || body["code"] != tt.code || body["message"] == "" {
			t.Errorf("%s %s: %d %v, want %d %s", tt.method, tt.path, code, body, tt.status, tt.code)
		}
	}
	if _, body := e.call(t, http.MethodPost, base+"/plugins/vault/enable"); !strings.Contains(body["message"].(string), "vault_search") {
		t.Errorf("409 message %q does not say what is missing", body["message"])
	}
	// Disabling what cannot run is fine.
	if code, _ := e.call(t, http.MethodPost, base+"/plugins/vault/disable"); code != http.StatusOK {
		t.Errorf("disable vault: %d", code)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A reload with a bad file keeps the set in force and reports the file;
// a good one puts the new set in force.
func TestRulesAdmin_Reload(t *testing.T) {
	e := newRulesEnv(t)
	base := RulesAdminPrefix
	before := e.h.cfg.Rules.Set()
	bad := filepath.Join(e.rulesDir, "bad.toml")
	writeTestFile(t, bad, strings.Replace(adminTestRule, `"say-hello"`, `"Bad_ID"`, 1))
	code, body := e.call(t, http.MethodPost, base+"/reload")
	if code != http.StatusBadRequest || !strings.Contains(body["message"].(string), "bad.toml") {
		t.Fatalf("reload with a bad file: %d %v, want 400 naming bad.toml", code, body)
	}
	if e.h.cfg.Rules.Set() != before {
		t.Error("a failed reload replaced the set in force")
	}
	_, body = e.call(t, http.MethodGet, base+"/rules")
	last, _ := body["lastReload"].(map[string]any)
	if last["ok"] != false || !strings.Contains(jsonOf(last["error"]), "bad.toml") {
		t.Errorf("lastReload %v, want the failure naming bad.toml", last)
	}
	if n := counterValue(t, e.h.rules.reloads.WithLabelValues("error")); n != 1 {
		t.Errorf("reload errors counted %v, want 1", n)
	}

	writeTestFile(t, bad, strings.Replace(adminTestRule, `"say-hello"`, `"say-bye"`, 1))
	if code, body := e.call(t, http.MethodPost, base+"/reload"); code != http.StatusOK {
		t.Fatalf("reload: %d %v", code, body)
	}
	if e.h.cfg.Rules.Set().Rule("say-bye") == nil {
		t.Error("the reloaded set is not in force")
	}
	_, body = e.call(t, http.MethodGet, base+"/rules")
	if last, _ := body["lastReload"].(map[string]any); last["ok"] != true || last["error"] != nil {
		t.Errorf("lastReload %v, want ok", last)
	}
	// A runtime without rule files has nothing to reload.
	plain := offlineHandlers(t, Config{Docs: e.docs, Rules: e.h.cfg.Rules})
	if err := plain.ReloadRules(context.Background()); err == nil {
		t.Error("ReloadRules without a loader succeeded")
	}
	none := offlineHandlers(t, Config{Docs: e.docs})
	w := httptest.NewRecorder()
	none.RulesAdmin().ServeHTTP(w, httptest.NewRequest(http.MethodGet, base+"/rules", nil))
	if w.Code != http.StatusNotFound {
		t.Errorf("admin API without rules: %d, want 404", w.Code)
	}
}

// The execution log: one document per hook evaluation (a redelivery
// writes it once), listed newest first with filters, pruned past the
// retention.
func TestRuleLog_RecordListPrune(t *testing.T) {
	e := newRulesEnv(t)
	ctx := context.Background()
	now := time.Now()
	e.h.rules.now = func() time.Time { return now }
	e.h.rules.lastPrune.Store(now.UnixNano()) // no background pruning here
	evals := []plugins.Evaluation{
		{Rule: "say-hello", Hook: plugins.OnQueryStart, Matched: true, Executed: true, Duration: 1500 * time.Microsecond},
		{Rule: "token-budget/token-budget-warning", PluginID: "token-budget", Hook: plugins.OnQueryStart, Err: strings.Repeat("é", 1000)},
	}
	alice, bob := chat{uid: "alice", id: "c1"}, chat{uid: "bob", id: "c9"}
	e.h.recordEvaluations(ctx, alice, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m1", evals)
	e.h.recordEvaluations(ctx, alice, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m1", evals) // redelivery
	now = now.Add(time.Second)
	e.h.recordEvaluations(ctx, bob, plugins.OnQueryStart, "users/bob/orch-chats/c9/messages/m1", evals[:1])
	e.h.recordEvaluations(ctx, bob, plugins.OnTurnEnd, "users/bob/orch-chats/c9/sub-agents/s1/messages/x", nil) // nothing ran
	if ok, dup := counterValue(t, e.h.rules.logWrites.WithLabelValues("ok")), counterValue(t, e.h.rules.logWrites.WithLabelValues("duplicate")); ok != 2 || dup != 1 {
		t.Errorf("log writes ok=%v duplicate=%v, want 2 and 1", ok, dup)
	}

	code, body := e.call(t, http.MethodGet, RulesAdminPrefix+"/executions")
	list, _ := body["executions"].([]any)
	if code != http.StatusOK || len(list) != 2 {
		t.Fatalf("executions: %d %v, want 2", code, body)
	}
	newest := list[0].(map[string]any)
	if newest["userId"] != "bob" || newest["hook"] != "on_query_start" || newest["chatId"] != "c9" || newest["rules"] != nil {
		t.Errorf("newest %v, want bob's first, without the filter field", newest)
	}
	first := list[1].(map[string]any)["evaluations"].([]any)[0].(map[string]any)
	if first["rule"] != "say-hello" || first["matched"] != true || first["executed"] != true || first["durationUs"] != float64(1500) {
		t.Errorf("evaluation %v", first)
	}
	if e2 := list[1].(map[string]any)["evaluations"].([]any)[1].(map[string]any); len(e2["error"].(string)) > maxLoggedError+len("…") {
		t.Errorf("a long error was logged whole (%d bytes)", len(e2["error"].(string)))
	}
	for _, tt := range []struct {
		query string
		n     int
	}{
		{"?user=alice", 1},
		{"?rule=token-budget/token-budget-warning", 1},
		{"?rule=say-hello&user=bob", 1},
		{"?rule=say-hello&limit=1", 1},
		{"?user=carol", 0},
	} {
		_, body := e.call(t, http.MethodGet, RulesAdminPrefix+"/executions"+tt.query)
		if list, _ := body["executions"].([]any); len(list) != tt.n {
			t.Errorf("executions%s: %v, want %d", tt.query, body, tt.n)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x"} {
		if code, body := e.call(t, http.MethodGet, RulesAdminPrefix+"/executions"+q); code != http.StatusBadRequest || body["code"] != "BAD_REQUEST" {
			t.Errorf("executions%s: %d %v, want 400", q, code, body)
		}
	}
	_, body = e.call(t, http.MethodGet, RulesAdminPrefix+"/rules")
	if recent, _ := body["recentExecutions"].([]any); len(recent) != 2 {
		t.Errorf("recentExecutions %v, want 2", body["recentExecutions"])
	}

	// Pruning deletes what is older than the cutoff, nothing newer.
	n, err := e.h.pruneRuleLog(ctx, now.Add(-500*time.Millisecond))
	if err != nil || n != 1 {
		t.Fatalf("prune: %d %v, want alice's entry deleted", n, err)
	}
	_, body = e.call(t, http.MethodGet, RulesAdminPrefix+"/executions")
	if list, _ := body["executions"].([]any); len(list) != 1 || list[0].(map[string]any)["userId"] != "bob" {
		t.Errorf("after pruning: %v, want bob's entry only", body)
	}
	// recordEvaluations prunes in the background once pruneEvery passed.
	e.h.cfg.RuleLogRetention = time.Millisecond
	now = now.Add(pruneEvery)
	e.h.recordEvaluations(ctx, alice, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m2", evals[:1])
	deadline := time.Now().Add(5 * time.Second)
	for counterValue(t, e.h.rules.logPruned) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := counterValue(t, e.h.rules.logPruned); got != 2 {
		t.Errorf("pruned %v in all, want bob's entry pruned in the background too", got)
	}
}

// ValidateWrite checks users' agent settings documents only, against the
// plugins' typed settings; userRuleSettings reads the document back.
func TestValidateWrite_UserRuleSettings(t *testing.T) {
	e := newRulesEnv(t)
	path := userRuleSettingsPath("alice")
	for _, tt := range []struct {
		path, doc, setting string
	}{
		{path, `{"plugins":{"research-assistant":{"max_sources":60}}}`, "plugins.research-assistant.max_sources"},
		{path, `{"plugins":{"research-assistant":{"max_sources":"many"}}}`, "plugins.research-assistant.max_sources"},
		{path, `{"disabledRules":["tool-failure-loop"]}`, "disabledRules[0]"},
		{path, `{"disabledRules":["nope"]}`, "disabledRules[0]"},
		{path, `{"plugins":{"research-assistant":{"max_sources":20}},"disabledRules":["research-assistant/enough-sources"],"mine":1}`, ""},
		{"users/alice/notes/n1", `{"plugins":{"research-assistant":{"max_sources":60}}}`, ""},
		{"users/alice/agent-settings/other", `{"disabledRules":["nope"]}`, ""},
		// More names than there are: refused before the per-name check.
		{path, `{"plugins":{` + manyKeys("p", 100, `{}`) + `}}`, "plugins"},
		{path, `{"plugins":{"research-assistant":{` + manyKeys("s", 100, `1`) + `}}}`, "plugins.research-assistant"},
	} {
		data, err := collections.DecodeObject([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		err = e.h.ValidateWrite(tt.path, data)
		var se *plugins.SettingError
		switch {
		case tt.setting == "" && err != nil:
			t.Errorf("%s %s: %v, want valid", tt.path, tt.doc, err)
		case tt.setting != "" && (!errorsAs(err, &se) || se.Setting != tt.setting):
			t.Errorf("%s %s: %v, want a SettingError naming %s", tt.path, tt.doc, err, tt.setting)
		}
	}
	ctx := context.Background()
	if doc, err := e.h.userRuleSettings(ctx, "alice"); doc != nil || err != nil {
		t.Errorf("no settings document: %v %v, want nil", doc, err)
	}
	if _, err := e.docs.Create(ctx, path, map[string]any{"disabledRules": []any{"say-hello"}}); err != nil {
		t.Fatal(err)
	}
	if doc, err := e.h.userRuleSettings(ctx, "alice"); err != nil || jsonOf(doc["disabledRules"]) != `["say-hello"]` {
		t.Errorf("settings document: %v %v", doc, err)
	}
}

// manyKeys is n JSON members "<prefix><i>": value.
func manyKeys(prefix string, n int, value string) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf("%q:%s", fmt.Sprint(prefix, i), value)
	}
	return strings.Join(members, ",")
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// counterValue reads a counter (one child of a vector).
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Security rules written before the rules' collections existed (no grant
// of agent-rules and agent-rule-log to the service role) must not stop the
// runtime: the switches read as none, the log is skipped, and the admin API
// says what to grant.
func TestRules_UngrantedCollections(t *testing.T) {
	e := newRulesEnv(t)
	old, err := rules.Parse([]byte(`
[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read", "write"]
if    = "request.auth != null && 'service' in request.auth.roles"
`), "old.toml")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := access.New(access.Config{Store: e.store, Rules: old})
	if err != nil {
		t.Fatal(err)
	}
	caller := access.CallerOfIdentity(&auth.Identity{UID: "key:agents", Username: "agents", Roles: []string{"service"}, Kind: auth.KindServiceKey})
	docs := access.NewDocs(svc, "", func(context.Context) (*access.Caller, error) { return caller, nil })
	h := offlineHandlers(t, Config{Docs: docs, Rules: e.h.cfg.Rules, LoadRules: e.load})
	ctx := context.Background()
	if sw, err := h.switches(ctx); err != nil || len(sw) != 0 {
		t.Fatalf("switches: %v %v, want none and no error", sw, err)
	}
	h.rules.lastPrune.Store(h.rules.now().UnixNano())
	h.recordEvaluations(ctx, chat{uid: "alice", id: "c1"}, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m1",
		[]plugins.Evaluation{{Rule: "say-hello", Matched: true}})
	if n := counterValue(t, h.rules.logWrites.WithLabelValues("error")); n != 1 {
		t.Errorf("log write errors %v, want 1", n)
	}
	w := httptest.NewRecorder()
	h.RulesAdmin().ServeHTTP(w, httptest.NewRequest(http.MethodGet, RulesAdminPrefix+"/rules", nil))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"recentExecutionsError"`) || !strings.Contains(w.Body.String(), `"key":"say-hello"`) {
		t.Errorf("GET rules without the grant: %d %s, want the rules and why there is no log", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	h.RulesAdmin().ServeHTTP(w, httptest.NewRequest(http.MethodPost, RulesAdminPrefix+"/rules/say-hello/disable", nil))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "agent-rules/{id}") {
		t.Errorf("switch without the grant: %d %s, want 500 saying what to grant", w.Code, w.Body)
	}
}

// A log that expires faster than one pruning deletes is not left to grow:
// a pruning that deleted its whole quota lets the next recorded
// evaluation start the next one instead of waiting pruneEvery.
func TestRuleLog_PruningKeepsUp(t *testing.T) {
	e := newRulesEnv(t)
	ctx := context.Background()
	now := time.Now()
	e.h.rules.now = func() time.Time { return now }
	old := now.Add(-2 * DefaultRuleLogRetention).UnixMilli()
	const expired = pruneBatches*pruneBatch + 10
	writes := make([]collections.Write, expired)
	for i := range writes {
		writes[i] = collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("%s/old-%04d", ruleLogCollection, i),
			Data: map[string]any{"userId": "alice", "hook": "on_query_start", "at": old}}
	}
	if _, err := e.store.Commit(ctx, access.DefaultDatabase, writes, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	evals := []plugins.Evaluation{{Rule: "say-hello", Hook: plugins.OnQueryStart, Matched: true, Executed: true}}
	alice := chat{uid: "alice", id: "c1"}
	waitPruned := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for (counterValue(t, e.h.rules.logPruned) < want || e.h.rules.pruning.Load()) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := counterValue(t, e.h.rules.logPruned); got != want {
			t.Fatalf("pruned %v, want %v", got, want)
		}
	}
	e.h.recordEvaluations(ctx, alice, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m1", evals)
	waitPruned(pruneBatches * pruneBatch)
	// Still within pruneEvery of the first run: the rest goes now.
	e.h.recordEvaluations(ctx, alice, plugins.OnQueryStart, "users/alice/orch-chats/c1/messages/m2", evals)
	waitPruned(expired)
}

// A switch set on a node that has not read the switches yet (just
// started) does not hide the others: a rule an admin disabled earlier
// stays off there.
func TestSetSwitch_BeforeFirstRead(t *testing.T) {
	e := newRulesEnv(t)
	ctx := context.Background()
	if err := e.h.setSwitch(ctx, "say-hello", false); err != nil {
		t.Fatal(err)
	}
	fresh := offlineHandlers(t, Config{Docs: e.serviceDocs(), Rules: e.h.cfg.Rules})
	if err := fresh.setSwitch(ctx, pluginSwitch("token-budget"), true); err != nil {
		t.Fatal(err)
	}
	sw, err := fresh.switches(ctx)
	if err != nil || sw["say-hello"] != false || sw[pluginSwitch("token-budget")] != true || len(sw) != 2 {
		t.Errorf("switches %v %v, want say-hello off (set before) and token-budget on", sw, err)
	}
}
