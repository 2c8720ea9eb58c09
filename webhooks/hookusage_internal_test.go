package webhooks

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

// getCounter is a Docs that counts the reads of each path.
type getCounter struct {
	Docs
	gets map[string]int
}

func (g *getCounter) Get(ctx context.Context, path string) (*collections.Document, error) {
	g.gets[path]++
	return g.Docs.Get(ctx, path)
}

// A step whose on_turn_start rule reads turn.token_usage reads the user's
// usage record once: the model call's budget check takes the hook's read.
// Likewise a decision with an on_query_start rule.
func TestHooks_UsageReadOncePerModelCall(t *testing.T) {
	files := hookRuleFiles("context.turn.token_usage >= 0.5", "notify_self", "half spent", "on_turn_start", "on_query_start")
	env := &rulesEnv{store: openTestStore(t)}
	docs := &getCounter{Docs: env.serviceDocs(), gets: map[string]int{}}
	h := offlineHandlers(t, Config{Docs: docs, Rules: testEngine(t, files), UserTokensPerDay: 1000})
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	usage := usagePath(c.uid, time.Now())
	if _, err := docs.Create(ctx, usage, map[string]any{"userId": c.uid, "tokens": 600}); err != nil {
		t.Fatal(err)
	}

	agent := &collections.Document{Path: c.subAgent("s1"), Data: map[string]any{"taskId": "t1", "role": "general", "iterationCount": 0}}
	msgs := []*collections.Document{
		{Data: map[string]any{"role": "system", "content": "You help.", "seq": 0}},
		{Data: map[string]any{"role": "user", "content": "hi", "seq": 1}},
	}
	docs.gets[usage] = 0
	notes, seen, err := h.turnStartHook(ctx, c, "s1", agent, msgs)
	if err != nil || len(notes) != 1 {
		t.Fatalf("turnStartHook: %d notices, err=%v; want the rule's one", len(notes), err)
	}
	if _, failure, err := h.askModel(ctx, c.uid, "general", agent, msgs, notes, seen, nil); err != nil || failure != "" {
		t.Fatalf("askModel: failure=%q err=%v", failure, err)
	}
	if n := docs.gets[usage]; n != 1 {
		t.Errorf("a step read the usage record %d times, want 1", n)
	}

	msg := &collections.Document{Path: c.path() + "/messages/m1", ID: "m1", Data: map[string]any{"role": "user", "content": "hi"}}
	docs.gets[usage] = 0
	notes, seen, err = h.queryStartHook(ctx, c, msg, nil)
	if err != nil || len(notes) != 1 {
		t.Fatalf("queryStartHook: %d notices, err=%v; want the rule's one", len(notes), err)
	}
	if _, err := h.completeSeen(ctx, c.uid, llmSummaryRequest("x", "y"), seen); err != nil {
		t.Fatal(err)
	}
	if n := docs.gets[usage]; n != 1 {
		t.Errorf("a decision read the usage record %d times, want 1", n)
	}
	if got := num(mustGet(t, docs, usage), "tokens"); got <= 600 {
		t.Errorf("tokens=%d after two calls from 600: the calls' usage was not added", got)
	}
}

// hookRuleFiles is one standalone rule file per hook (named for it, its
// id the hook's name with dashes), each with the same condition
// expression and action (type, message).
func hookRuleFiles(expression, action, message string, hooks ...string) map[string]string {
	files := map[string]string{}
	for _, hook := range hooks {
		files[hook] = `
[rule]
id = "` + strings.ReplaceAll(hook, "_", "-") + `"
trigger = "` + hook + `"

[condition]
expression = "` + expression + `"

[action]
type = "` + action + `"
message = "` + message + `"
`
	}
	return files
}

// testEngine is an engine over standalone rule files (name → TOML).
func testEngine(t *testing.T, files map[string]string) *plugins.Engine {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		writeTestFile(t, filepath.Join(dir, name+".toml"), src)
	}
	set, err := plugins.Load(plugins.LoadOptions{RulesDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := plugins.NewEngine(set, plugins.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func mustGet(t *testing.T, d Docs, path string) *collections.Document {
	t.Helper()
	doc, err := d.Get(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// A tool run whose on_tool_call and on_tool_complete rules can run reads
// the sub-agent once (the hooks take the document the role check read),
// and the user's agent settings once.
func TestHooks_ToolRunReadsSubAgentOnce(t *testing.T) {
	files := hookRuleFiles("context.turn.iteration_count >= 0", "log", "tool", "on_tool_call", "on_tool_complete")
	env := &rulesEnv{store: openTestStore(t)}
	docs := &getCounter{Docs: env.serviceDocs(), gets: map[string]int{}}
	h := offlineHandlers(t, Config{Docs: docs, Rules: testEngine(t, files)})
	h.cfg.Roles = map[string]Role{"general": {Tools: []string{"calculator"}}}
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	agentPath := c.subAgent("s1")
	if _, err := docs.Create(ctx, agentPath, h.seals.seal(agentPath, map[string]any{
		"userId": c.uid, "taskId": "t1", "role": "general", "iterationCount": 1,
	}, subAgentSeal)); err != nil {
		t.Fatal(err)
	}
	tcPath := c.toolCalls("s1") + "/tc1"
	if _, err := docs.Create(ctx, tcPath, h.seals.seal(tcPath, map[string]any{
		"userId": c.uid, "subAgentId": "s1", "toolName": "calculator", "argsJson": `{"expression":"6*7"}`,
		"callId": "call1", "assistantSeq": 2, "index": 0, "status": "pending", "visibility": "hidden",
	}, toolCallSeal)); err != nil {
		t.Fatal(err)
	}
	taskPath := c.tasks() + "/t1" // the sub-agent's task, running
	if _, err := docs.Create(ctx, taskPath, h.seals.seal(taskPath, map[string]any{
		"userId": c.uid, "type": "agent", "name": "agent:general", "instruction": "x", "status": "running",
	}, taskSeal)); err != nil {
		t.Fatal(err)
	}
	settings := userRuleSettingsPath(c.uid)
	docs.gets[agentPath], docs.gets[settings] = 0, 0
	if err := h.routes["tool-runner"](ctx, &Event{Path: tcPath, ID: "tc1", Type: "create"}); err != nil {
		t.Fatal(err)
	}
	if got := str(mustGet(t, docs, tcPath), "status"); got != "success" {
		t.Fatalf("tool call status %q, want success", got)
	}
	if n := docs.gets[agentPath]; n != 1 {
		t.Errorf("a tool run read the sub-agent %d times, want 1", n)
	}
	if n := docs.gets[settings]; n != 1 {
		t.Errorf("a tool run read the user's agent settings %d times, want 1", n)
	}
}

// queryCounter is a Docs that counts the queries of each collection.
type queryCounter struct {
	Docs
	queries map[string]int
}

func (q *queryCounter) Query(ctx context.Context, qq collections.Query) ([]*collections.Document, error) {
	q.queries[qq.Collection]++
	return q.Docs.Query(ctx, qq)
}

// A task that ends with an on_session_end rule reading the history queries
// the sub-agent's messages once: the hook takes those the agent loop read.
func TestHooks_SessionEndTakesTheLoopsMessages(t *testing.T) {
	rule := `
[rule]
id = "ended"
trigger = "on_session_end"

[condition]
expression = "size(context.history.messages) == 3"

[action]
type = "emit_event"
event_type = "ended"
`
	env := &rulesEnv{store: openTestStore(t)}
	docs := &queryCounter{Docs: env.serviceDocs(), queries: map[string]int{}}
	h := offlineHandlers(t, Config{Docs: docs, Rules: testEngine(t, map[string]string{"ended": rule})})
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	create := func(path string, data map[string]any, seal []string) *collections.Document {
		t.Helper()
		d, err := docs.Create(ctx, path, h.seals.seal(path, data, seal))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	task := create(c.tasks()+"/t1", map[string]any{"userId": c.uid, "type": "delegate", "name": "n",
		"instruction": "do", "triggerMessageId": "m1", "status": "running"}, taskSeal)
	create(c.subAgent("s1"), map[string]any{"userId": c.uid, "taskId": "t1", "role": "general",
		"status": "active", "iterationCount": 1}, subAgentSeal)
	create(c.subMessages("s1")+"/"+msgID(0), map[string]any{"userId": c.uid, "role": "system", "content": "You help.", "seq": 0}, subMessageSeal)
	user := create(c.subMessages("s1")+"/"+msgID(1), map[string]any{"userId": c.uid, "role": "user", "content": "hi", "seq": 1}, subMessageSeal)
	create(c.subMessages("s1")+"/"+msgID(2), map[string]any{"userId": c.uid, "role": "assistant", "content": "done",
		"seq": 2, "inReplyTo": user.ID}, subMessageSeal)

	docs.queries = map[string]int{}
	if err := h.agentLoop(ctx, &Event{Path: user.Path, ID: user.ID, Type: "create", Doc: user}); err != nil {
		t.Fatal(err)
	}
	if got := str(mustGet(t, docs, task.Path), "status"); got != "success" {
		t.Fatalf("task status %q, want success", got)
	}
	events, err := docs.Query(ctx, collections.Query{Collection: c.events(), Limit: 10})
	if err != nil || len(events) != 1 {
		t.Fatalf("%d events (err=%v), want the rule's one: it saw the history", len(events), err)
	}
	if n := docs.queries[c.subMessages("s1")]; n != 1 {
		t.Errorf("the agent loop queried the sub-agent's messages %d times, want 1", n)
	}
}

// failLogOnce is a Docs whose first write of an execution-log document
// fails as a store outage does.
type failLogOnce struct {
	Docs
	failed bool
}

func (f *failLogOnce) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	if strings.HasPrefix(path, ruleLogCollection+"/") && !f.failed {
		f.failed = true
		return nil, errors.New("store unavailable")
	}
	return f.Docs.Create(ctx, path, data)
}

// A hook whose execution log could not be written for now fails, so the
// delivery retries and the log is written then (every evaluation that ran
// a rule writes its document), rather than losing it to a log line.
func TestHooks_TransientLogFailureRetries(t *testing.T) {
	rule := `
[rule]
id = "greet"
trigger = "on_query_start"

[condition]
expression = "true"

[action]
type = "notify_self"
message = "hello"
`
	env := &rulesEnv{store: openTestStore(t)}
	docs := &failLogOnce{Docs: env.serviceDocs()}
	h := offlineHandlers(t, Config{Docs: docs, Rules: testEngine(t, map[string]string{"greet": rule})})
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	msg := &collections.Document{Path: c.messages() + "/m1", ID: "m1", Data: map[string]any{"role": "user", "content": "hi"}}
	if _, _, err := h.queryStartHook(ctx, c, msg, nil); err == nil {
		t.Fatal("the hook succeeded without its execution log: the delivery would not retry")
	}
	notes, _, err := h.queryStartHook(ctx, c, msg, nil)
	if err != nil || len(notes) != 1 {
		t.Fatalf("retry: %d notices, err=%v; want the rule's one", len(notes), err)
	}
	if _, err := docs.Get(ctx, ruleLogCollection+"/"+ruleLogID(plugins.OnQueryStart, c.uid, msg.Path)); err != nil {
		t.Errorf("the retry did not write the execution log: %v", err)
	}
}
