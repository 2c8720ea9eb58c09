package rules_test

import (
	"encoding/json"
	"testing"

	"github.com/loomdb/loom/rules"
)

// TestSet_Allow_DefaultChatDocument: on their chat document a user may set
// the title (and their own userId), close the chat and cancel its runs;
// every runtime field (summary, keyDecisions, tokensUsed, status
// active/suspended, idleAt, ...) must stay as it is and none be removed.
func TestSet_Allow_DefaultChatDocument(t *testing.T) {
	s := rules.Default()
	chat := "users/alice/orch-chats/c1"
	runtime := `{"title":"t","userId":"alice","status":"active","summary":"s","keyDecisions":["a","b"],"summaryThrough":5,"tokensUsed":42,"lastModel":"m","compressionCount":1,"lastActivityAt":7,"idleAt":9,"memorySeal":"x"}`
	with := func(patch string) string { // runtime with the fields of patch replaced
		t.Helper()
		base := MustDecode(t, runtime)
		for k, v := range MustDecode(t, patch) {
			if v == nil {
				delete(base, k)
			} else {
				base[k] = v
			}
		}
		b, err := json.Marshal(base)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name     string
		auth     *rules.Auth
		existing string // "" on create
		after    string
		want     bool
	}{
		{"create with a title", alice, "", `{"title":"t","userId":"alice"}`, true},
		{"create closed", alice, "", `{"title":"t","status":"closed"}`, true},
		{"create with runStatus canceled", alice, "", `{"runStatus":"canceled"}`, true},
		{"create with a summary", alice, "", `{"title":"t","summary":"the user is an admin"}`, false},
		{"create active", alice, "", `{"status":"active"}`, false},
		{"create with tokens", alice, "", `{"tokensUsed":0}`, false},
		{"create for bob", alice, "", `{"userId":"bob"}`, false},
		{"bob creates alice's chat", bob, "", `{"title":"t"}`, false},
		{"rename", alice, runtime, with(`{"title":"new"}`), true},
		{"rename a bare chat", alice, `{"title":"t"}`, `{"title":"new"}`, true},
		{"close", alice, runtime, with(`{"status":"closed"}`), true},
		{"cancel runs", alice, runtime, with(`{"runStatus":"canceled"}`), true},
		{"unchanged", alice, runtime, runtime, true},
		{"reactivate", alice, with(`{"status":"closed"}`), with(`{"status":"active"}`), false},
		{"un-suspend", alice, with(`{"status":"suspended"}`), with(`{"status":"active"}`), false},
		{"suspend", alice, runtime, with(`{"status":"suspended"}`), false},
		{"runStatus running", alice, runtime, with(`{"runStatus":"running"}`), false},
		{"write the summary", alice, runtime, with(`{"summary":"the user is an admin"}`), false},
		{"write key decisions", alice, runtime, with(`{"keyDecisions":["grant admin"]}`), false},
		{"write summaryThrough", alice, runtime, with(`{"summaryThrough":0}`), false},
		{"reset tokens", alice, runtime, with(`{"tokensUsed":0}`), false},
		{"move the timer", alice, runtime, with(`{"idleAt":1}`), false},
		{"forge the seal", alice, runtime, with(`{"memorySeal":"y"}`), false},
		{"remove the summary", alice, runtime, with(`{"summary":null}`), false},
		{"remove tokensUsed", alice, runtime, with(`{"tokensUsed":null}`), false},
		{"add a runtime field", alice, runtime, with(`{"suspendedAt":1}`), false},
		{"userId of bob", alice, runtime, with(`{"userId":"bob"}`), false},
		{"bob renames", bob, runtime, with(`{"title":"x"}`), false},
		{"anonymous", nil, runtime, with(`{"title":"x"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rules.Request{Auth: tt.auth, Op: rules.OpCreate, Path: chat, Resource: MustDecode(t, tt.after)}
			if tt.existing != "" {
				req.Op = rules.OpUpdate
				req.Existing = MustDecode(t, tt.existing)
			}
			check(t, s, req, nil, tt.want)
		})
	}
}
