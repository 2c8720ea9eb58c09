package rules_test

import (
	"fmt"
	"testing"

	"github.com/loomdb/loom/rules"
)

// TestSet_Allow_DefaultCancel: the owner of a chat may cancel its run
// (runStatus "canceled") and cancel one of its unfinished tasks (status
// "canceled"), changing nothing else; docs/agent-runs.md, "Cancel".
func TestSet_Allow_DefaultCancel(t *testing.T) {
	s := rules.Default()
	chat := "users/alice/orch-chats/c1"
	task := chat + "/tasks/t1"
	alice := &rules.Auth{UID: "alice"}
	bob := &rules.Auth{UID: "bob"}
	taskDoc := `{"type":"agent","name":"agent:general","instruction":"x","status":"%s","runtimeSeal":"s","userId":"alice"}`
	chatDoc := `{"title":"t","userId":"alice","runStatus":"running","summary":"s","canceledThrough":5}`
	tests := []struct {
		name          string
		auth          *rules.Auth
		path          string
		before, after string
		want          bool
	}{
		{"cancel a running task", alice, task, fmt.Sprintf(taskDoc, "running"), fmt.Sprintf(taskDoc, "canceled"), true},
		{"cancel a pending task", alice, task, fmt.Sprintf(taskDoc, "pending"), fmt.Sprintf(taskDoc, "canceled"), true},
		{"cancel a waiting task", alice, task, fmt.Sprintf(taskDoc, "waiting"), fmt.Sprintf(taskDoc, "canceled"), true},
		{"cancel a task waiting for a tool", alice, task, fmt.Sprintf(taskDoc, "waiting_tool"), fmt.Sprintf(taskDoc, "canceled"), true},
		{"cancel a finished task", alice, task, fmt.Sprintf(taskDoc, "success"), fmt.Sprintf(taskDoc, "canceled"), false},
		{"cancel a failed task", alice, task, fmt.Sprintf(taskDoc, "failed"), fmt.Sprintf(taskDoc, "canceled"), false},
		{"bob cancels alice's task", bob, task, fmt.Sprintf(taskDoc, "running"), fmt.Sprintf(taskDoc, "canceled"), false},
		{"another status", alice, task, fmt.Sprintf(taskDoc, "running"), fmt.Sprintf(taskDoc, "success"), false},
		{"cancel and change the instruction", alice, task, fmt.Sprintf(taskDoc, "running"),
			`{"type":"agent","name":"agent:general","instruction":"y","status":"canceled","runtimeSeal":"s","userId":"alice"}`, false},
		{"cancel and add a field", alice, task, fmt.Sprintf(taskDoc, "running"),
			`{"type":"agent","name":"agent:general","instruction":"x","status":"canceled","runtimeSeal":"s","userId":"alice","canceledBy":"chat"}`, false},
		{"cancel and remove a field", alice, task, fmt.Sprintf(taskDoc, "running"),
			`{"type":"agent","name":"agent:general","instruction":"x","status":"canceled","userId":"alice"}`, false},
		{"cancel the chat run", alice, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"canceled","summary":"s","canceledThrough":5}`, true},
		{"close the chat", alice, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"running","status":"closed","summary":"s","canceledThrough":5}`, true},
		{"chat runStatus running", alice, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"idle","summary":"s","canceledThrough":5}`, false},
		{"chat canceledThrough", alice, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"canceled","summary":"s","canceledThrough":9}`, false},
		{"chat summary removed", alice, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"canceled","canceledThrough":5}`, false},
		{"bob cancels alice's chat", bob, chat, chatDoc,
			`{"title":"t","userId":"alice","runStatus":"canceled","summary":"s","canceledThrough":5}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rules.Request{Auth: tt.auth, Op: rules.OpUpdate, Path: tt.path,
				Existing: MustDecode(t, tt.before), Resource: MustDecode(t, tt.after)}
			check(t, s, req, nil, tt.want)
		})
	}
}
