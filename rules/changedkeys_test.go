package rules_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/loomdb/loom/rules"
)

// changedKeys in a rule: the keys added, removed or changed, null as an
// empty map, CEL equality for the values.
func TestSet_Allow_ChangedKeys(t *testing.T) {
	tests := []struct {
		expr          string
		before, after string
		want          bool
	}{
		{"changedKeys(resource.data, request.resource.data) == []", `{"a":1,"b":{"c":[1,2]}}`, `{"a":1,"b":{"c":[1,2]}}`, true},
		{"changedKeys(resource.data, request.resource.data) == ['a']", `{"a":1,"b":2}`, `{"a":3,"b":2}`, true},
		{"changedKeys(resource.data, request.resource.data) == ['a', 'c']", `{"a":1,"b":2}`, `{"b":2,"c":1}`, true},
		{"changedKeys(resource.data, request.resource.data) == ['b']", `{"a":1,"b":{"c":1}}`, `{"a":1,"b":{"c":2}}`, true},
		{"changedKeys(resource.data, request.resource.data) == []", `{"a":1}`, `{"a":1.0}`, true},
		{"changedKeys(resource.data, request.resource.data) == []", `{"a":null}`, `{}`, false},
		{"changedKeys(null, request.resource.data) == ['a', 'b']", `{}`, `{"b":1,"a":2}`, true},
	}
	for _, tt := range tests {
		src := fmt.Sprintf("[[rule]]\nmatch = \"d/{id}\"\nallow = [\"update\"]\nif = %q\n", tt.expr)
		s, err := rules.Parse([]byte(src), "test.toml")
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		req := rules.Request{Op: rules.OpUpdate, Path: "d/x", Existing: MustDecode(t, tt.before), Resource: MustDecode(t, tt.after)}
		t.Run(tt.expr+" "+tt.before+" → "+tt.after, func(t *testing.T) { check(t, s, req, nil, tt.want) })
	}
}

// The owner's writes the default rules grant (cancel a task, answer a
// client tool's call) must not depend on how long the document's other
// fields are: a task whose instruction is a long text the user pasted, a
// call whose arguments carry a long list. Comparing each field in the
// rule cost about one CEL unit per ten bytes, and such writes failed the
// cost limit (denied).
func TestSet_Allow_DefaultOwnerWritesOfLargeDocuments(t *testing.T) {
	s := rules.Default()
	alice := &rules.Auth{UID: "alice"}
	for _, size := range []int{100 << 10, 900 << 10} {
		task := map[string]any{"type": "agent", "name": "agent:general", "instruction": strings.Repeat("x", size),
			"status": "running", "userId": "alice", "runtimeSeal": "s", "triggerMessageId": "m"}
		canceled := maps.Clone(task)
		canceled["status"] = "canceled"
		req := rules.Request{Auth: alice, Op: rules.OpUpdate, Path: "users/alice/orch-chats/c1/tasks/t1", Existing: task, Resource: canceled}
		t.Run(fmt.Sprintf("cancel a task, instruction %d KiB", size>>10), func(t *testing.T) { check(t, s, req, nil, true) })
		edited := maps.Clone(canceled)
		edited["instruction"] = "y"
		req = rules.Request{Auth: alice, Op: rules.OpUpdate, Path: "users/alice/orch-chats/c1/tasks/t1", Existing: task, Resource: edited}
		t.Run(fmt.Sprintf("cancel and edit a task, instruction %d KiB", size>>10), func(t *testing.T) { check(t, s, req, nil, false) })
	}
	for _, size := range []int{100 << 10, 900 << 10} {
		chat := map[string]any{"title": "t", "userId": "alice", "summary": strings.Repeat("s", size), "status": "suspended",
			"runStatus": "running", "tokensUsed": 10, "memorySeal": "s"}
		path := "users/alice/orch-chats/c1"
		for _, w := range []struct {
			name  string
			field string
			value any
			allow bool
		}{
			{"cancel the run", "runStatus", "canceled", true},
			{"close", "status", "closed", true},
			{"rename", "title", "u", true},
			{"rewrite the summary", "summary", "forged", false},
			{"reactivate", "status", "active", false},
		} {
			next := maps.Clone(chat)
			next[w.field] = w.value
			req := rules.Request{Auth: alice, Op: rules.OpUpdate, Path: path, Existing: chat, Resource: next}
			t.Run(fmt.Sprintf("chat: %s, summary %d KiB", w.name, size>>10), func(t *testing.T) { check(t, s, req, nil, w.allow) })
		}
	}
	for _, n := range []int{3000, 15000} {
		rows := make([]any, n)
		for i := range rows {
			rows[i] = map[string]any{"name": fmt.Sprint("row", i), "v": i}
		}
		args := map[string]any{"rows": rows}
		aj, _ := json.Marshal(args)
		call := map[string]any{"toolName": "show_rows", "argsJson": string(aj), "args": args, "callId": "c", "status": "pending",
			"executionType": "client", "runtimeSeal": "s", "userId": "alice", "assistantSeq": 2, "index": 0, "waitUntil": 5}
		path := "users/alice/orch-chats/c1/sub-agents/s1/tool-calls/c"
		done := maps.Clone(call)
		done["status"], done["result"] = "success", map[string]any{"shown": true}
		req := rules.Request{Auth: alice, Op: rules.OpUpdate, Path: path, Existing: call, Resource: done}
		t.Run(fmt.Sprintf("answer a client call, arguments %d KiB", len(aj)>>10), func(t *testing.T) { check(t, s, req, nil, true) })
		forged := maps.Clone(done)
		forged["args"] = map[string]any{"rows": []any{}}
		req = rules.Request{Auth: alice, Op: rules.OpUpdate, Path: path, Existing: call, Resource: forged}
		t.Run(fmt.Sprintf("answer and change the arguments, %d KiB", len(aj)>>10), func(t *testing.T) { check(t, s, req, nil, false) })
		bob := rules.Request{Auth: &rules.Auth{UID: "bob"}, Op: rules.OpUpdate, Path: path, Existing: call, Resource: done}
		t.Run(fmt.Sprintf("bob answers, %d KiB", len(aj)>>10), func(t *testing.T) { check(t, s, bob, nil, false) })
	}
}
