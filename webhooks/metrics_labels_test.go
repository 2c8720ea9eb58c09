package webhooks_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var toolLabelRE = regexp.MustCompile(`loom_agent_tool_runs_total\{outcome="[a-z]+",tool="([^"]*)"\}`)

// TestMetrics_ToolLabelsFromRegistry: under a rules file that lets users
// write tool calls, a user writes tool calls naming tools that do not
// exist: /metrics counts them under tool="unknown", never under the name
// they chose (the runtime refuses to run them: it did not create them).
func TestMetrics_ToolLabelsFromRegistry(t *testing.T) {
	s := startStack(t, stackOpts{rules: permissiveRules})
	calls := s.chat("c1") + "/sub-agents/sa1/tool-calls"
	for _, id := range []string{"t1", "t2", "t3"} {
		body, _ := json.Marshal(map[string]any{"doc": map[string]any{
			"status": "pending", "toolName": id + strings.Repeat("x", 4<<10), "argsJson": "{}",
			"userId": s.user, "chatId": "c1", "subAgentId": "sa1", "callId": id,
		}})
		if code, m := s.do("PUT", "/api/v1/databases/default/documents/"+calls+"/"+id, s.token, string(body)); code != http.StatusCreated {
			t.Fatalf("write tool call: %d %v", code, m)
		}
	}
	var labels []string
	s.waitFor("three counted tool runs", 30*time.Second, func() bool {
		res, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		labels = labels[:0]
		for _, m := range toolLabelRE.FindAllStringSubmatch(string(b), -1) {
			labels = append(labels, m[1])
		}
		return strings.Contains(string(b), `loom_agent_tool_runs_total{outcome="refused",tool="unknown"} 3`) ||
			len(labels) > 0 && labels[0] != "unknown"
	})
	for _, l := range labels {
		if l != "unknown" {
			t.Fatalf("tool label %.40q... comes from a user's document", l)
		}
	}
}
