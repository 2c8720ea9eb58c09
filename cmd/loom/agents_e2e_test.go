package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/llm/llmtest"
)

// Black-box tests of the agent runtime: real `loom serve` (and `loom
// agents`) processes run the shipped triggers.json against the built-in
// handlers, with the offline model or a fake LLM in this process.

// agentProc is a loom child process whose stdout and stderr are kept apart
// (stderr is where the logger writes).
type agentProc struct {
	name   string
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	exited chan struct{} // closed once the process is gone
	err    error         // its exit status, set before exited is closed
}

func (p *agentProc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *agentProc) dump() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("--- %s stdout ---\n%s--- %s stderr ---\n%s", p.name, p.stdout.String(), p.name, p.stderr.String())
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *agentProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit after SIGKILL", p.name)
	}
}

// cleanEnv is the test's environment without LOOM_* variables (so a
// developer's LOOM_URL or LOOM_LLM_BASE_URL does not leak into a process),
// plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOM_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

var agentsListenRE = regexp.MustCompile(`serving (http://[0-9.:]+)/webhooks`)

// startAgentProc runs loomBin with args in a fresh working directory and
// waits until stdout matches ready (its first group is the base URL). The
// process's output is logged if the test fails.
func startAgentProc(t *testing.T, name string, ready *regexp.Regexp, env []string, args ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(loomBin, args...)
	cmd.Dir = t.TempDir() // no ./loom.toml, ./triggers.json or ./tools.json
	cmd.Env = cleanEnv(env...)
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{name: name, cmd: cmd, exited: make(chan struct{})}
	found := make(chan string, 1)
	var wg sync.WaitGroup
	copyLines := func(r io.Reader, buf *bytes.Buffer, match bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			buf.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if match {
				if m := ready.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case found <- m[1]:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}
	wg.Add(2)
	go copyLines(outPipe, &p.stdout, true)
	go copyLines(errPipe, &p.stderr, false)
	go func() {
		wg.Wait()
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Log(p.dump())
		}
	})
	select {
	case p.url = <-found:
		return p
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, p.dump())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start listening:\n%s", name, p.dump())
	}
	return nil
}

// repoTriggers is the shipped triggers.json at the repository root.
func repoTriggers(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "triggers.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("shipped triggers file: %v", err)
	}
	return path
}

// agentConfig writes a loom.toml allowing loopback deliveries plus extra.
func agentConfig(t *testing.T, extra string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(cfg, []byte(allowLoopback+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startAgentServe runs `loom serve` with the shipped triggers and cfg.
func startAgentServe(t *testing.T, name, data, cfg string, env ...string) *agentProc {
	t.Helper()
	return startAgentProc(t, name, listenRE, append([]string{"LOOM_ADMIN_KEY=k"}, env...),
		"serve", "--addr", "127.0.0.1:0", "--data", data, "--config", cfg, "--triggers", repoTriggers(t))
}

// chatUser signs up a user and returns its token and uid.
func chatUser(t *testing.T, base string) (token, uid string) {
	t.Helper()
	code, tok := request(t, "POST", base+"/auth/v1/signup", "", map[string]any{"username": "alice", "password": "correct horse battery"})
	if code != 200 {
		t.Fatalf("signup: status=%d %v", code, tok)
	}
	token, _ = tok["access_token"].(string)
	code, me := request(t, "GET", base+"/auth/v1/me", token, nil)
	if code != 200 {
		t.Fatalf("me: status=%d %v", code, me)
	}
	uid, _ = me["uid"].(string)
	if token == "" || uid == "" {
		t.Fatalf("signup gave token=%q uid=%q", token, uid)
	}
	return token, uid
}

// sayInChat writes the user message m1 into chat c1 as the user.
func sayInChat(t *testing.T, base, token, uid, text string) {
	t.Helper()
	path := base + "/api/v1/databases/default/documents/users/" + uid + "/orch-chats/c1/messages/m1"
	if code, out := request(t, "PUT", path, token, map[string]any{"doc": map[string]any{"role": "user", "content": text}}); code != 201 {
		t.Fatalf("PUT user message: status=%d %v", code, out)
	}
}

// listColl returns the documents of a collection, read with key (a user
// token or the admin key), sorted by id.
func listColl(t *testing.T, base, key, coll string) []map[string]any {
	t.Helper()
	code, out := request(t, "POST", base+"/api/v1/databases/default/query", key, map[string]any{"collection": coll, "limit": 1000})
	if code != 200 {
		t.Fatalf("query %s: status=%d %v", coll, code, out)
	}
	raw, _ := out["docs"].([]any)
	docs := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		if d, ok := r.(map[string]any); ok {
			docs = append(docs, d)
		}
	}
	sort.Slice(docs, func(i, j int) bool { return fmt.Sprint(docs[i]["id"]) < fmt.Sprint(docs[j]["id"]) })
	return docs
}

// waitResult polls the chat as the user until the finalize handler's
// <taskId>-result message is there, and returns it.
func waitResult(t *testing.T, base, token, uid string, timeout time.Duration, procs ...*agentProc) map[string]any {
	t.Helper()
	coll := "users/" + uid + "/orch-chats/c1/messages"
	deadline := time.Now().Add(timeout)
	var last []map[string]any
	for {
		last = listColl(t, base, token, coll)
		for _, d := range last {
			if id, _ := d["id"].(string); strings.HasSuffix(id, "-result") {
				return d
			}
		}
		if time.Now().After(deadline) {
			break
		}
		for _, p := range procs {
			select {
			case <-p.exited:
				t.Fatalf("%s exited while the run was in progress: %v", p.name, p.err)
			default:
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("no result message in the chat within %v; chat:\n%s", timeout, b)
	return nil
}

// checkChat checks the chat after one run: the user's message, the
// orchestrator's reply, the calculator call mirrored into the chat (a
// visible tool) and the result, each exactly once.
func checkChat(t *testing.T, msgs []map[string]any) {
	t.Helper()
	var ids []string
	for _, m := range msgs {
		id := fmt.Sprint(m["id"])
		if m["kind"] == "tool" && strings.HasPrefix(id, "tool-") && m["toolName"] == "calculator" {
			id = "tool-<call>"
		}
		ids = append(ids, id)
	}
	if strings.Join(ids, ",") != "m1,m1-reply,m1-t0-result,tool-<call>" {
		b, _ := json.MarshalIndent(msgs, "", "  ")
		t.Errorf("chat messages %v, want m1, m1-reply, m1-t0-result and one calculator mirror tool-<call>:\n%s", ids, b)
	}
}

func noErrorLogs(t *testing.T, p *agentProc) {
	t.Helper()
	for _, line := range strings.Split(p.errors(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("%s logged an error: %s", p.name, line)
		}
	}
}

func wantNoDeadDeliveries(t *testing.T, base string) {
	t.Helper()
	if dead := listDeliveries(t, base, "dead"); len(dead) > 0 {
		b, _ := json.MarshalIndent(dead, "", "  ")
		t.Errorf("dead deliveries:\n%s", b)
	}
}

// checkOfflineAnswer checks the finalize handler's message of the offline
// demo.
func checkOfflineAnswer(t *testing.T, res map[string]any) {
	t.Helper()
	content, _ := res["content"].(string)
	if res["role"] != "assistant" || !strings.Contains(content, "42") || res["id"] != "m1-t0-result" || res["status"] != "success" {
		t.Fatalf("result message %v, want the assistant's m1-t0-result (success) containing 42", res)
	}
}

// TestServe_AgentDemoOffline is the README's demo: with no LLM configured,
// one user message runs orchestrator → sub-agent → calculator → answer
// through the shipped triggers, and the chat gets the answer.
func TestServe_AgentDemoOffline(t *testing.T) {
	t.Parallel()
	p := startAgentServe(t, "serve", t.TempDir(), agentConfig(t, ""))
	token, uid := chatUser(t, p.url)
	sayInChat(t, p.url, token, uid, "What is 6*7?")
	res := waitResult(t, p.url, token, uid, 20*time.Second, p)
	checkOfflineAnswer(t, res)

	chat := "users/" + uid + "/orch-chats/c1"
	checkChat(t, listColl(t, p.url, token, chat+"/messages"))
	if tasks := listColl(t, p.url, token, chat+"/tasks"); len(tasks) != 1 || tasks[0]["status"] != "success" {
		t.Errorf("tasks %v, want one, success", tasks)
	}
	wantNoDeadDeliveries(t, p.url)
	noErrorLogs(t, p)
	if !strings.Contains(p.errors(), "offline model") {
		t.Errorf("serve did not say it uses the offline model:\n%s", p.errors())
	}
	// The runtime's metrics are on /metrics.
	res2, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res2.Body)
	res2.Body.Close()
	for _, want := range []string{
		`loom_agent_handler_duration_seconds_count{handler="orchestrator",outcome="ok"}`,
		`loom_agent_tool_runs_total{outcome="success",tool="calculator"} 1`,
		`loom_agent_llm_request_duration_seconds_count{outcome="ok"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// toolNames returns the function names of a chat-completions request's
// tools.
func toolNames(req map[string]any) []string {
	var names []string
	tools, _ := req["tools"].([]any)
	for _, tl := range tools {
		m, _ := tl.(map[string]any)
		fn, _ := m["function"].(map[string]any)
		if n, ok := fn["name"].(string); ok {
			names = append(names, n)
		}
	}
	return names
}

func lastRole(req map[string]any) string {
	msgs, _ := req["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	r, _ := m["role"].(string)
	return r
}

// TestServe_AgentRunSurvivesSIGKILL kills `loom serve` while the
// sub-agent's final LLM step is in flight, restarts it on the same data
// directory, and checks that the run completes exactly once.
func TestServe_AgentRunSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	finalStep := make(chan struct{}, 16)
	var mu sync.Mutex
	var kinds []string
	fake := llmtest.NewServer(t)
	// Stateless: every answer depends on the request alone, so retried
	// requests (after the kill) get the same answer.
	fake.Match(func(req map[string]any) llmtest.Step {
		names := toolNames(req)
		var kind string
		var step llmtest.Step
		switch {
		case len(names) == 0: // finalize's summary
			kind, step = "summary", llmtest.Step{Content: "The answer is 42."}
		case contains(names, "delegate_task"):
			kind, step = "orchestrator", llmtest.Step{Content: "Let me delegate that.", ToolCalls: []llm.ToolCall{{
				ID: "call_delegate", Name: "delegate_task",
				Arguments: `{"agent":"researcher","instruction":"Compute 6*7 with the calculator."}`,
			}}}
		case lastRole(req) == "tool":
			kind, step = "final", llmtest.Step{Content: "6*7 = 42", Delay: 1500 * time.Millisecond}
			select {
			case finalStep <- struct{}{}:
			default:
			}
		default:
			kind, step = "calculator", llmtest.Step{ToolCalls: []llm.ToolCall{{
				ID: "call_calc", Name: "calculator", Arguments: `{"expression":"6*7"}`,
			}}}
		}
		mu.Lock()
		kinds = append(kinds, kind)
		mu.Unlock()
		return step
	})

	data, cfg := t.TempDir(), agentConfig(t, "")
	env := []string{"LOOM_LLM_BASE_URL=" + fake.URL + "/v1"}
	p := startAgentServe(t, "serve#1", data, cfg, env...)
	token, uid := chatUser(t, p.url)
	sayInChat(t, p.url, token, uid, "What is 6*7?")
	select {
	case <-finalStep:
	case <-time.After(15 * time.Second):
		t.Fatalf("the sub-agent's final step never reached the LLM")
	}
	time.Sleep(200 * time.Millisecond) // well inside the 1.5 s delay
	p.kill(t)
	chat := "users/" + uid + "/orch-chats/c1"

	p2 := startAgentServe(t, "serve#2", data, cfg, env...)
	res := waitResult(t, p2.url, token, uid, 20*time.Second, p2)
	if res["role"] != "assistant" || res["content"] != "The answer is 42." || res["id"] != "m1-t0-result" {
		t.Fatalf("result message %v, want the summary as m1-t0-result", res)
	}
	// Let stray redeliveries land before counting.
	time.Sleep(500 * time.Millisecond)

	checkChat(t, listColl(t, p2.url, "k", chat+"/messages"))
	tasks := listColl(t, p2.url, "k", chat+"/tasks")
	if len(tasks) != 1 || tasks[0]["status"] != "success" || tasks[0]["result"] != "6*7 = 42" {
		t.Errorf("tasks %v, want one, success with the sub-agent's answer", tasks)
	}
	subs := listColl(t, p2.url, "k", chat+"/sub-agents")
	if len(subs) != 1 || subs[0]["status"] != "completed" {
		t.Fatalf("sub-agents %v, want one, completed", subs)
	}
	sa := fmt.Sprint(subs[0]["id"])
	var roles []string
	for _, m := range listColl(t, p2.url, "k", chat+"/sub-agents/"+sa+"/messages") {
		roles = append(roles, fmt.Sprint(m["role"]))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,assistant" {
		t.Errorf("sub-agent messages %v, want system,user,assistant,tool,assistant", roles)
	}
	if calls := listColl(t, p2.url, "k", chat+"/sub-agents/"+sa+"/tool-calls"); len(calls) != 1 || calls[0]["status"] != "success" {
		t.Errorf("tool calls %v, want one, success", calls)
	}
	wantNoDeadDeliveries(t, p2.url)
	noErrorLogs(t, p2)

	mu.Lock()
	defer mu.Unlock()
	finals := 0
	for _, k := range kinds {
		if k == "final" {
			finals++
		}
	}
	if finals < 2 {
		t.Errorf("LLM requests %v: the final step was not retried after the kill", kinds)
	}
	t.Logf("LLM requests: %v", kinds)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestAgents_StandaloneProcess runs the handlers as `loom agents` next to a
// `loom serve` with [agents] disabled whose triggers point at it: the
// offline demo completes through the standalone process.
func TestAgents_StandaloneProcess(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	agentsURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	serve := startAgentServe(t, "serve", t.TempDir(), agentConfig(t, "[agents]\nenabled = false\n"),
		"LOOM_URL="+agentsURL, "LOOM_WEBHOOK_SECRET="+e2eSecret)
	if code, _ := request(t, "POST", serve.url+"/webhooks/orchestrator", "", map[string]any{}); code != 404 {
		t.Errorf("POST /webhooks/orchestrator on serve with [agents] disabled: status=%d, want 404", code)
	}
	code, key := request(t, "POST", serve.url+"/admin/v1/keys", "k", map[string]any{"name": "agents", "roles": []string{"service"}})
	if code != 201 {
		t.Fatalf("create service key: status=%d %v", code, key)
	}
	apiKey, _ := key["key"].(string)
	agents := startAgentProc(t, "agents", agentsListenRE, []string{"LOOM_WEBHOOK_SECRET=" + e2eSecret},
		"agents", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--loom-url", serve.url, "--api-key", apiKey, "--secret", e2eSecret)
	if agents.url != agentsURL {
		t.Fatalf("agents listens on %s, want %s", agents.url, agentsURL)
	}

	token, uid := chatUser(t, serve.url)
	sayInChat(t, serve.url, token, uid, "What is 6*7?")
	checkOfflineAnswer(t, waitResult(t, serve.url, token, uid, 20*time.Second, serve, agents))

	// The rules admin API of loom agents admits the remote Loom's admins
	// only, and its switches are documents of the remote Loom.
	rulesURL := agents.url + "/admin/v1/agents/rules"
	for _, c := range []struct {
		key  string
		want int
	}{{"", 401}, {"nope", 401}, {token, 403}, {apiKey, 403}, {"k", 200}} {
		if code, body := request(t, "GET", rulesURL, c.key, nil); code != c.want {
			t.Errorf("GET %s with %q: status=%d %v, want %d", rulesURL, c.key, code, body, c.want)
		}
	}
	if code, body := request(t, "POST", agents.url+"/admin/v1/agents/plugins/token-budget/enable", "k", nil); code != 200 || body["effective"] != true {
		t.Errorf("enable token-budget through loom agents: status=%d %v", code, body)
	}
	if sw := listColl(t, serve.url, "k", "agent-rules"); len(sw) != 1 || sw[0]["key"] != "plugin:token-budget" {
		t.Errorf("switch documents on the Loom server: %v, want the token-budget plugin's", sw)
	}
	wantNoDeadDeliveries(t, serve.url)
	noErrorLogs(t, serve)
	noErrorLogs(t, agents)
}

// TestServe_AgentUserTokenBudget: [agents] user_tokens_per_day reaches the
// runtime. With a budget of 1 token no query can be answered: the user is
// told so in the chat, and no task starts.
func TestServe_AgentUserTokenBudget(t *testing.T) {
	t.Parallel()
	p := startAgentServe(t, "serve", t.TempDir(), agentConfig(t, "[agents]\nuser_tokens_per_day = 1\n"))
	token, uid := chatUser(t, p.url)
	sayInChat(t, p.url, token, uid, "What is 6*7?")
	chat := "users/" + uid + "/orch-chats/c1"
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, reply := request(t, "GET", p.url+"/api/v1/databases/default/documents/"+chat+"/messages/m1-reply", token, nil)
		if code == 200 {
			if c, _ := reply["content"].(string); reply["status"] != "failed" || !strings.Contains(c, "the daily token budget of 1 tokens") {
				t.Fatalf("reply %v, want the budget's message", reply)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reply: %d %v\n%s", code, reply, p.dump())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tasks := listColl(t, p.url, token, chat+"/tasks"); len(tasks) != 0 {
		t.Errorf("tasks %v started over the budget", tasks)
	}
	wantNoDeadDeliveries(t, p.url)
	noErrorLogs(t, p)
}
