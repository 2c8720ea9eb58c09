package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// A whole-collection decision is the caller's as the token states it: a
// role granted or taken away takes effect with the next token exactly as
// the per-document rules would, decisions remembered for the same uid with
// other roles included; a rule granting get decides no list, nor one
// granting list a get; a collection group decides nothing for a rule that
// reads the owner's segment.
func TestSecurity_WholeCollectionDecisionsFollowRolesAndOps(t *testing.T) {
	file := filepath.Join(t.TempDir(), "security.toml")
	const src = `
[[rule]]
match = "rooms/{r}"
allow = ["read"]
if    = "request.auth != null && 'reader' in request.auth.roles"

[[rule]]
match = "rooms/{r}"
allow = ["read"]
if    = "request.auth != null && resource.data.public == true"

[[rule]]
match = "notes/{n}"
allow = ["get"]
if    = "request.auth != null"

[[rule]]
match = "inbox/{i}"
allow = ["list"]
if    = "request.auth != null"

[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read"]
if    = "request.auth != null && request.auth.uid == userId"
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RulesFile: file})
	// The file is read on reload (the app reads it at start).
	wantStatus(t, "reload", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	alice := env.signup(t, "alice")
	bob := env.signup(t, "bob")
	for _, w := range []struct{ path, body string }{
		{"rooms/open", `{"doc":{"public":true}}`},
		{"rooms/closed", `{"doc":{"public":false}}`},
		{"notes/n1", `{"doc":{"n":1}}`},
		{"inbox/m1", `{"doc":{"n":1}}`},
		{"users/" + alice.UID + "/items/a", `{"doc":{"n":1}}`},
		{"users/" + bob.UID + "/items/b", `{"doc":{"n":2}}`},
	} {
		wantStatus(t, "write "+w.path, env.Do(t, "PUT", api+"/documents/"+w.path, w.body, nil), http.StatusCreated)
	}
	ids := func(h map[string]string, coll string) []string {
		t.Helper()
		r := env.Do(t, "POST", api+"/query", fmt.Sprintf(`{"collection":%q,"limit":50}`, coll), h)
		wantStatus(t, "query "+coll, r, http.StatusOK)
		docs, _ := r.JSON(t)["docs"].([]any)
		var out []string
		for _, d := range docs {
			out = append(out, d.(map[string]any)["id"].(string))
		}
		return out
	}
	login := func() map[string]string {
		t.Helper()
		r := env.Do(t, "POST", "/auth/v1/login", `{"username":"alice","password":"correct horse battery"}`, anon)
		wantStatus(t, "login", r, http.StatusOK)
		return map[string]string{"Authorization": "Bearer " + r.JSON(t)["access_token"].(string)}
	}
	setRoles := func(roles string) {
		t.Helper()
		wantStatus(t, "roles", env.Do(t, "PUT", "/admin/v1/users/"+alice.UID+"/roles", `{"roles":`+roles+`}`, nil), http.StatusOK)
	}
	readable := func(what string, h map[string]string, wantIDs string, wantClosed int) {
		t.Helper()
		if got := fmt.Sprint(ids(h, "rooms")); got != wantIDs {
			t.Fatalf("%s: query rooms = %s, want %s", what, got, wantIDs)
		}
		wantStatus(t, what+": get rooms/closed", env.Do(t, "GET", api+"/documents/rooms/closed", "", h), wantClosed)
	}

	// The role first, so that a decision to read all is what the same uid
	// would find remembered.
	setRoles(`["user","reader"]`)
	readable("with the role", login(), "[closed open]", http.StatusOK)
	setRoles(`["user"]`)
	readable("the role taken away", login(), "[open]", http.StatusForbidden)
	readable("the token from before the role", alice.h(), "[open]", http.StatusForbidden)
	setRoles(`["reader","user"]`)
	readable("granted again, other order", login(), "[closed open]", http.StatusOK)

	// get-only and list-only rules.
	wantStatus(t, "get notes/n1", env.Do(t, "GET", api+"/documents/notes/n1", "", alice.h()), http.StatusOK)
	wantStatus(t, "query notes", env.Do(t, "POST", api+"/query", `{"collection":"notes"}`, alice.h()), http.StatusForbidden)
	if got := fmt.Sprint(ids(alice.h(), "inbox")); got != "[m1]" {
		t.Fatalf("query inbox = %s, want [m1]", got)
	}
	wantStatus(t, "get inbox/m1", env.Do(t, "GET", api+"/documents/inbox/m1", "", alice.h()), http.StatusForbidden)

	// A group query decides per document: only alice's own items, though
	// her own collection is decided whole.
	if got := fmt.Sprint(ids(alice.h(), "users/"+alice.UID+"/items")); got != "[a]" {
		t.Fatalf("own items = %s, want [a]", got)
	}
	if got := fmt.Sprint(ids(alice.h(), "users/*/items")); got != "[a]" {
		t.Fatalf("group items = %s, want [a]", got)
	}
	wantStatus(t, "bob's items for alice", env.Do(t, "POST", api+"/query", fmt.Sprintf(`{"collection":"users/%s/items"}`, bob.UID), alice.h()), http.StatusForbidden)
}

// Decided whole, a pattern query or subscription of a user's own
// collections is filtered by the engine alone: it must return exactly the
// pattern's documents, page after page — not a deeper subcollection, not
// another user's, not a user whose uid starts with the caller's.
func TestSecurity_OwnPatternReadsStayInThePattern(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	bob := env.signup(t, "bob")
	own := "users/" + alice.UID
	w := env.dialWS(t, "", alice.h())
	w.subscribe("s", map[string]any{"query": q(own + "/*")})
	for _, p := range []string{
		own + "/items/a",
		own + "/items/a/sub/s",
		"users/" + bob.UID + "/items/b",
		"users/" + alice.UID + "x/items/x",
		own + "/notes/n",
	} {
		wantStatus(t, "write "+p, env.Do(t, "PUT", api+"/documents/"+p, `{"doc":{"n":1}}`, nil), http.StatusCreated)
	}
	for _, want := range []string{"a", "n"} {
		if m := w.expect("event"); m.delta()["id"] != want {
			t.Fatalf("event %s, want %s", m, want)
		}
	}
	w.send("p", "ping", nil)
	if m := w.read(); m.Type != "pong" {
		t.Fatalf("got %s, want nothing but the pattern's documents", m)
	}

	for _, tc := range []struct{ coll, want string }{
		{own + "/*", "[a n]"},
		{own + "/items", "[a]"},
		{own + "/*/*/sub", "[s]"},
		{own + "/items/*/sub", "[s]"},
	} {
		for _, order := range []string{``, `,"orderBy":[{"field":"n"}]`} {
			var got []string
			cursor := ""
			for page := 0; page < 5; page++ {
				body := fmt.Sprintf(`{"collection":%q,"limit":1%s%s}`, tc.coll, order, cursor)
				r := env.Do(t, "POST", api+"/query", body, alice.h())
				wantStatus(t, "query "+body, r, http.StatusOK)
				res := r.JSON(t)
				docs, _ := res["docs"].([]any)
				for _, d := range docs {
					got = append(got, d.(map[string]any)["id"].(string))
				}
				next, _ := res["nextCursor"].(string)
				if next == "" {
					break
				}
				cursor = fmt.Sprintf(`,"startAfter":%q`, next)
			}
			slices.Sort(got)
			if fmt.Sprint(got) != tc.want {
				t.Fatalf("%s%s: pages hold %v, want %s", tc.coll, order, got, tc.want)
			}
		}
	}
}
