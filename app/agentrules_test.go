package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
)

// Rules of a test's rules_dir. On every user message: notify_self quoting
// the state the previous message left (once there is one), then set_state
// of this message's text, and an event for external receivers.
const (
	notifyRule = `
[rule]
id = "recall"
trigger = "on_query_start"
priority = 300

[condition]
expression = "context.state.get('last', '') != ''"

[action]
type = "notify_self"
message = "last was {{ context.state.last }}"
category = "memory"
`
	stateRule = `
[rule]
id = "remember"
trigger = "on_query_start"
priority = 200

[condition]
expression = "true"

[action]
type = "set_state"
key = "last"
value = "{{ context.event.content }}"
`
	eventRule = `
[rule]
id = "announce"
trigger = "on_query_start"
priority = 100

[condition]
expression = "true"

[action]
type = "emit_event"
event_type = "query.seen"

[action.payload]
text = "{{ context.event.content }}"
`
)

// rulesNode starts a node with the agent runtime (offline model) and the
// rules of dir as [agents] rules_dir, on dataDir ("": a fresh one).
func rulesNode(t *testing.T, dir, dataDir string) *apptest.Stack {
	t.Helper()
	return apptest.Start(t, apptest.Options{Agents: true, DataDir: dataDir, Config: func(c *config.Config) {
		c.Agents.RulesDir = dir
	}})
}

func writeRule(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// say writes a user message as u and returns the orchestrator's reply once
// it is there.
func say(t *testing.T, s *apptest.Stack, u apptest.User, chat, id, text string) string {
	t.Helper()
	path := "users/" + u.UID + "/orch-chats/" + chat + "/messages/"
	body, _ := json.Marshal(map[string]any{"doc": map[string]any{"role": "user", "content": text}})
	if r := s.Do(t, "PUT", "/api/v1/databases/default/documents/"+path+id, string(body), u.Header()); r.Status != http.StatusCreated {
		t.Fatalf("say %s: %d %s", id, r.Status, r.Body)
	}
	var reply string
	defer func() {
		if t.Failed() {
			dumpNode(t, s)
		}
	}()
	apptest.WaitFor(t, "the reply to "+id, func() bool {
		r := s.Do(t, "GET", "/api/v1/databases/default/documents/"+path+id+"-reply", "", u.Header())
		if r.Status != http.StatusOK {
			return false
		}
		reply, _ = r.JSON(t)["content"].(string)
		return reply != ""
	})
	return reply
}

// The lifecycle rules end to end, through loom serve's composition root:
// notify_self reaches the model (the offline model shows it), set_state
// persists across a restart, emit_event reaches an external receiver
// through a trigger registered with the admin API, an admin switch
// silences a rule, a bad reload keeps the rules in force, and the admin
// API shows the executions.
func TestAgentRules_EndToEnd(t *testing.T) {
	dir := t.TempDir()
	writeRule(t, dir, "recall.toml", notifyRule)
	writeRule(t, dir, "remember.toml", stateRule)
	writeRule(t, dir, "announce.toml", eventRule)
	s := rulesNode(t, dir, "")
	alice := s.SignUp(t, "alice")

	rc := apptest.NewReceiver(t, nil)
	def := fmt.Sprintf(`{"triggerId":"agent-events","collection":"users/{userId}/orch-chats/{chatId}/agent-events","events":["create"],"url":%q}`, rc.URL)
	s.MustDo(t, http.StatusCreated, "POST", "/admin/v1/triggers", def)

	if reply := say(t, s, alice, "c1", "m1", "alpha"); strings.Contains(reply, "notified") {
		t.Fatalf("first reply %q: notified with no state yet", reply)
	}
	got := rc.WaitFor(t, "the query.seen event", apptest.AtLeast(1))
	doc, _ := got[0].Event()["document"].(map[string]any)
	data, _ := doc["data"].(map[string]any)
	payload, _ := data["payload"].(map[string]any)
	if data["type"] != "query.seen" || payload["text"] != "alpha" || got[0].Param("userId") != alice.UID {
		t.Errorf("event %v, want query.seen with text alpha for alice", got[0].Event())
	}

	// The state outlives the node.
	dataDir := s.DataDir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s = rulesNode(t, dir, dataDir)
	if reply := say(t, s, alice, "c1", "m2", "beta"); !strings.Contains(reply, "(notified: last was alpha)") {
		t.Fatalf("reply after the restart %q, want the notification of the state set before it", reply)
	}

	// The admin API lists the rules and the executions.
	r := s.MustDo(t, http.StatusOK, "GET", "/admin/v1/agents/rules", "")
	var list struct {
		Rules []struct {
			Key       string `json:"key"`
			Effective bool   `json:"effective"`
		} `json:"rules"`
		RecentExecutions []struct {
			UserID      string `json:"userId"`
			Hook        string `json:"hook"`
			Evaluations []struct {
				Rule     string `json:"rule"`
				Matched  bool   `json:"matched"`
				Executed bool   `json:"executed"`
			} `json:"evaluations"`
		} `json:"recentExecutions"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, rl := range list.Rules {
		keys[rl.Key] = rl.Effective
	}
	if !keys["recall"] || !keys["remember"] || !keys["announce"] || !keys["tool-failure-loop"] {
		t.Errorf("rules %v, want the three of rules_dir and the core rule, effective", keys)
	}
	if len(list.RecentExecutions) < 2 || list.RecentExecutions[0].UserID != alice.UID || list.RecentExecutions[0].Hook != "on_query_start" {
		t.Fatalf("recent executions %s", r.Body)
	}
	ran := map[string]bool{}
	for _, ev := range list.RecentExecutions[0].Evaluations {
		ran[ev.Rule] = ev.Matched && ev.Executed
	}
	if !ran["recall"] || !ran["remember"] || !ran["announce"] {
		t.Errorf("newest execution %+v, want the three rules matched and executed", list.RecentExecutions[0])
	}
	r = s.MustDo(t, http.StatusOK, "GET", "/admin/v1/agents/executions?rule=recall&user="+alice.UID+"&limit=10", "")
	if n := strings.Count(string(r.Body), `"hook":"on_query_start"`); n != 2 {
		t.Errorf("executions of recall: %d, want 2\n%s", n, r.Body)
	}

	// An admin switch silences a rule at once.
	s.MustDo(t, http.StatusOK, "POST", "/admin/v1/agents/rules/recall/disable", "")
	if reply := say(t, s, alice, "c1", "m3", "gamma"); strings.Contains(reply, "notified") {
		t.Errorf("reply %q after the rule was disabled, want no notification", reply)
	}

	// A bad file: the reload fails naming it, and the rules in force stay.
	s.MustDo(t, http.StatusOK, "POST", "/admin/v1/agents/rules/recall/enable", "")
	writeRule(t, dir, "broken.toml", strings.Replace(notifyRule, `trigger = "on_query_start"`, `trigger = "on_lunch"`, 1))
	r = s.Do(t, "POST", "/admin/v1/agents/reload", "", nil)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "broken.toml") {
		t.Fatalf("reload with a bad file: %d %s, want 400 naming broken.toml", r.Status, r.Body)
	}
	apptest.CheckErrorShape(t, r)
	if reply := say(t, s, alice, "c1", "m4", "delta"); !strings.Contains(reply, "(notified: last was gamma)") {
		t.Errorf("reply %q after the failed reload, want the rules in force still running", reply)
	}
	r = s.MustDo(t, http.StatusOK, "GET", "/admin/v1/agents/rules", "")
	if !strings.Contains(string(r.Body), "broken.toml") {
		t.Errorf("GET rules does not show the reload error: %s", r.Body)
	}
	if err := os.Remove(filepath.Join(dir, "broken.toml")); err != nil {
		t.Fatal(err)
	}
	s.MustDo(t, http.StatusOK, "POST", "/admin/v1/agents/reload", "")
}

// Only the admin reaches /admin/v1/agents/*.
func TestAgentRules_AdminOnly(t *testing.T) {
	s := rulesNode(t, t.TempDir(), "")
	bob := s.SignUp(t, "bob")
	for _, rq := range []struct{ method, path string }{
		{"GET", "/admin/v1/agents/rules"},
		{"GET", "/admin/v1/agents/executions"},
		{"POST", "/admin/v1/agents/reload"},
		{"POST", "/admin/v1/agents/rules/tool-failure-loop/disable"},
		{"POST", "/admin/v1/agents/plugins/token-budget/enable"},
	} {
		if r := s.Do(t, rq.method, rq.path, "", apptest.Anonymous); r.Status != http.StatusUnauthorized {
			t.Errorf("anonymous %s %s: %d, want 401", rq.method, rq.path, r.Status)
		}
		r := s.Do(t, rq.method, rq.path, "", bob.Header())
		if r.Status != http.StatusForbidden {
			t.Errorf("user %s %s: %d, want 403", rq.method, rq.path, r.Status)
		}
		apptest.CheckErrorShape(t, r)
	}
	r := s.MustDo(t, http.StatusOK, "GET", "/admin/v1/agents/rules", "")
	if !strings.Contains(string(r.Body), `"key":"tool-failure-loop"`) {
		t.Errorf("admin GET rules: %s", r.Body)
	}
	// No switch was set by bob's attempts (a disable and an enable).
	if strings.Contains(string(r.Body), `"switch":false`) || strings.Contains(string(r.Body), `"switch":true`) {
		t.Errorf("a user's refused request set a switch: %s", r.Body)
	}
}

// A user's agent settings document is checked against the plugins'
// typed settings on every write path; a bad value is a 400 naming the
// setting, and nothing is written.
func TestAgentRules_UserSettingsChecked(t *testing.T) {
	s := rulesNode(t, t.TempDir(), "")
	u := s.SignUp(t, "carol")
	doc := "/api/v1/databases/default/documents/users/" + u.UID + "/agent-settings/rules"
	if r := s.Do(t, "PUT", doc, `{"doc":{"plugins":{"research-assistant":{"max_sources":20}}}}`, u.Header()); r.Status != http.StatusCreated {
		t.Fatalf("valid PUT: %d %s", r.Status, r.Body)
	}
	for _, tt := range []struct {
		name, method, path, body, setting string
	}{
		{"patch out of range", "PATCH", doc, `{"doc":{"plugins":{"research-assistant":{"max_sources":60}}}}`, "plugins.research-assistant.max_sources"},
		{"core rule disabled", "PATCH", doc, `{"doc":{"disabledRules":["tool-failure-loop"]}}`, "disabledRules[0]"},
		{"unknown setting", "PUT", doc, `{"doc":{"plugins":{"research-assistant":{"colour":"red"}}}}`, "plugins.research-assistant.colour"},
		{"batch", "POST", "/api/v1/databases/default/batch",
			`{"writes":[{"type":"update","path":"users/` + u.UID + `/agent-settings/rules","data":{"plugins":{"research-assistant":{"max_sources":0}}}}]}`,
			"plugins.research-assistant.max_sources"},
		{"rxdb push", "POST", "/replication/rxdb/default/users/" + u.UID + "/agent-settings/0/push",
			`[{"newDocumentState":{"id":"rules","plugins":{"research-assistant":{"max_sources":99}},"_deleted":false},` +
				`"assumedMasterState":{"id":"rules","plugins":{"research-assistant":{"max_sources":20}},"_deleted":false}}]`,
			"plugins.research-assistant.max_sources"},
	} {
		r := s.Do(t, tt.method, tt.path, tt.body, u.Header())
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), tt.setting) {
			t.Errorf("%s: %d %s, want 400 naming %s", tt.name, r.Status, r.Body, tt.setting)
			continue
		}
		if !strings.HasPrefix(tt.path, "/replication/") { // RxDB's errors carry "error": true
			apptest.CheckErrorShape(t, r)
		}
		if details, _ := r.JSON(t)["details"].(map[string]any); details["field"] != tt.setting {
			t.Errorf("%s: details %v, want field %s", tt.name, details, tt.setting)
		}
	}
	r := s.Do(t, "GET", doc, "", u.Header())
	if !strings.Contains(string(r.Body), `"max_sources":20`) || strings.Contains(string(r.Body), "disabledRules") {
		t.Errorf("stored %s, want the valid document untouched", r.Body)
	}
	if r := s.Do(t, "PATCH", doc, `{"doc":{"disabledRules":["research-assistant/enough-sources"],"plugins":{"research-assistant":{"max_sources":50}}}}`, u.Header()); r.Status != http.StatusOK {
		t.Errorf("valid PATCH: %d %s", r.Status, r.Body)
	}
}

// dumpNode logs the agent and rule documents and the deliveries, for a
// failure message.
func dumpNode(t *testing.T, s *apptest.Stack) {
	for _, coll := range []string{"users/*/orch-chats/*/messages", "users/*/orch-chats/*/plugin-state", "users/*/orch-chats/*/agent-events", "agent-rule-log"} {
		q := collections.Query{Collection: coll, Limit: 100}
		_ = q.Normalize()
		res, err := s.Store.Query(context.Background(), "default", q)
		if err != nil {
			t.Log(err)
			continue
		}
		for _, d := range res.Docs {
			j, _ := json.Marshal(d.Data)
			t.Logf("%s %s", d.Path, j)
		}
	}
	ds, _, _ := s.Triggers.Deliveries(context.Background(), triggers.DeliveryQuery{Limit: 50})
	for _, d := range ds {
		last := ""
		if n := len(d.Attempts); n > 0 {
			last = fmt.Sprintf("%d %s %s", d.Attempts[n-1].Status, d.Attempts[n-1].Error, d.Attempts[n-1].Response)
		}
		t.Logf("delivery %s %s %s %s", d.TriggerID, d.ID, d.Status, last)
	}
}

// A node that leaves the runtime to loom agents ([agents] enabled = false)
// checks users' settings with its own copy of the rules when its config
// names the rule files, and not at all when it names none.
func TestAgentRules_SettingsCheckedWithoutTheRuntime(t *testing.T) {
	bad := `{"doc":{"plugins":{"research-assistant":{"max_sources":60}}}}`
	for _, tt := range []struct {
		name     string
		rulesDir string
		want     int
	}{
		{"rules_dir named", t.TempDir(), http.StatusBadRequest},
		{"no rule files", "", http.StatusCreated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.Agents.RulesDir = tt.rulesDir }})
			if s.Agents != nil {
				t.Fatal("the runtime runs")
			}
			u := s.SignUp(t, "dave")
			r := s.Do(t, "PUT", "/api/v1/databases/default/documents/users/"+u.UID+"/agent-settings/rules", bad, u.Header())
			if r.Status != tt.want {
				t.Fatalf("PUT: %d %s, want %d", r.Status, r.Body, tt.want)
			}
			if tt.want == http.StatusBadRequest && !strings.Contains(string(r.Body), "plugins.research-assistant.max_sources") {
				t.Errorf("400 %s does not name the setting", r.Body)
			}
		})
	}
}
