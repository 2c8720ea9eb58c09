package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/server"
)

// The default read rule lets a user read their own collections whatever
// the documents hold, so queries and subscriptions on them skip the
// per-document rules; a rules reload must still take effect at once: for
// the next query, and within a live subscription (snapshot and events).
func TestSecurity_ReloadChangesOwnCollectionReads(t *testing.T) {
	file := filepath.Join(t.TempDir(), "security.toml")
	write := func(cond string) {
		t.Helper()
		src := fmt.Sprintf(`
[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read"]
if    = %q

[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["write"]
if    = "request.auth != null && request.auth.uid == userId"
`, cond)
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const whole = "request.auth != null && request.auth.uid == userId" // decided per collection
	const visibleOnly = whole + " && resource.data.visible == true"    // per document
	write(whole)
	env := newAuthEnv(t, server.Config{RulesFile: file})
	reload := func(cond string) {
		t.Helper()
		write(cond)
		wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	}
	reload(whole)
	alice := env.signup(t, "alice")
	notes := "users/" + alice.UID + "/notes"
	put := func(id string, visible bool) {
		t.Helper()
		wantStatus(t, "write", env.Do(t, "PUT", api+"/documents/"+notes+"/"+id, fmt.Sprintf(`{"doc":{"visible":%v}}`, visible), nil), http.StatusCreated)
	}
	count := func() int {
		t.Helper()
		r := env.Do(t, "POST", api+"/query", fmt.Sprintf(`{"collection":%q,"limit":50}`, notes), alice.h())
		wantStatus(t, "query", r, http.StatusOK)
		docs, _ := r.JSON(t)["docs"].([]any)
		return len(docs)
	}
	put("a", true)
	put("b", false)
	if n := count(); n != 2 {
		t.Fatalf("own query: %d documents, want 2", n)
	}
	reload(visibleOnly)
	if n := count(); n != 1 {
		t.Fatalf("own query after the reload: %d documents, want 1 (the visible one)", n)
	}

	// A subscription opened under the whole-collection rules, then under
	// the per-document ones, then back; and a snapshot under each.
	reload(whole)
	w := env.dialWS(t, "", alice.h())
	w.subscribe("s", map[string]any{"query": q(notes), "sendSnapshot": true})
	if docs, _ := w.expect("snapshot").Payload["documents"].([]any); len(docs) != 2 {
		t.Fatalf("snapshot under the whole-collection rules: %d documents, want 2", len(docs))
	}
	next := func() string {
		t.Helper()
		return w.expect("event").delta()["id"].(string)
	}
	put("c", false)
	if id := next(); id != "c" {
		t.Fatalf("event for %s, want c", id)
	}
	reload(visibleOnly)
	put("d", false)
	put("e", true)
	if id := next(); id != "e" {
		t.Fatalf("event for %s after the reload, want e (d is not readable)", id)
	}
	reload(whole)
	put("f", false)
	if id := next(); id != "f" {
		t.Fatalf("event for %s after the second reload, want f", id)
	}
	reload(visibleOnly)
	w2 := env.dialWS(t, "", alice.h())
	w2.subscribe("s", map[string]any{"query": q(notes), "sendSnapshot": true})
	if docs, _ := w2.expect("snapshot").Payload["documents"].([]any); len(docs) != 2 {
		t.Fatalf("snapshot under the per-document rules: %d documents, want 2 (a and e)", len(docs))
	}
	put("g", false)
	put("h", true)
	for _, c := range []*wsClient{w, w2} {
		if m := c.expect("event"); m.delta()["id"] != "h" {
			t.Fatalf("event %s, want h (g is not readable)", m)
		}
	}
}
