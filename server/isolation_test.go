package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// Tenant isolation of query cursors and system collections (issue 11).

// cursorReveals reports what of secrets a client could read out of a
// cursor: the string itself and its base64 decodings.
func cursorReveals(cursor string, secrets ...string) []string {
	texts := []string{cursor}
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(cursor); err == nil {
			texts = append(texts, string(b))
		}
	}
	var out []string
	for _, s := range secrets {
		for _, t := range texts {
			if strings.Contains(t, s) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// queryPage runs one POST /query page and returns the ids and the cursor.
func queryPage(t *testing.T, env *testEnv, h map[string]string, body string) (ids []string, next string) {
	t.Helper()
	r := env.Do(t, "POST", api+"/query", body, h)
	wantStatus(t, "query "+body, r, http.StatusOK)
	m := r.JSON(t)
	docs, _ := m["docs"].([]any)
	for _, d := range docs {
		ids = append(ids, d.(map[string]any)["collection"].(string)+"/"+d.(map[string]any)["id"].(string))
	}
	next, _ = m["nextCursor"].(string)
	return ids, next
}

func withCursor(body, cursor string) string {
	return strings.TrimSuffix(body, "}") + fmt.Sprintf(`,"startAfter":%q}`, cursor)
}

// TestCursor_RevealsNothingOfUnreadableDocuments: under the default rules
// alice's group query ordered by a field of bob's documents returns none of
// them and no cursor carries anything of them (value or path); alice still
// pages through exactly her own documents, each once, with many of bob's
// between them.
func TestCursor_RevealsNothingOfUnreadableDocuments(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	// 30 of bob's notes sort before any of alice's and 30 between each
	// of hers: more than a request's refill rounds examine.
	for i := range 150 {
		u, val := bob, fmt.Sprintf("bob-profile-secret-%03d", i)
		if i%30 == 29 {
			u, val = alice, fmt.Sprintf("zz-alice-%03d", i)
		}
		doc := fmt.Sprintf(`{"doc":{"profile":{"city":%q}}}`, val)
		wantStatus(t, "seed", env.Do(t, "PUT", fmt.Sprintf("%s/documents/users/%s/notes/n%03d", api, u.UID, i), doc, u.h()), http.StatusCreated)
	}
	// Only bob has profiles: the query, ordered by the whole
	// object.
	for i := range 12 {
		doc := fmt.Sprintf(`{"doc":{"profile":{"city":"bob-profile-secret-p%02d"}}}`, i)
		wantStatus(t, "seed", env.Do(t, "PUT", fmt.Sprintf("%s/documents/users/%s/profiles/p%02d", api, bob.UID, i), doc, bob.h()), http.StatusCreated)
	}
	secrets := []string{"bob-profile-secret", bob.UID, "users/" + bob.UID}

	for _, order := range []string{"profile", "profile.city"} {
		body := `{"collection":"users/*/profiles","orderBy":[{"field":"` + order + `"}],"limit":1}`
		ids, next := queryPage(t, env, alice.h(), body)
		if len(ids) != 0 || next == "" {
			t.Fatalf("ordered by %s: ids=%v next=%q, want no document and a cursor (the page examined only bob's)", order, ids, next)
		}
		if leak := cursorReveals(next, secrets...); len(leak) > 0 {
			t.Fatalf("ordered by %s: alice's cursor %q reveals %v of bob's document", order, next, leak)
		}
	}

	for _, limit := range []int{1, 2, 7} {
		body := fmt.Sprintf(`{"collection":"users/*/notes","orderBy":[{"field":"profile.city"}],"limit":%d}`, limit)
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			if page > 200 {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			b := body
			if cursor != "" {
				b = withCursor(body, cursor)
			}
			ids, next := queryPage(t, env, alice.h(), b)
			got = append(got, ids...)
			if leak := cursorReveals(next, secrets...); len(leak) > 0 {
				t.Fatalf("limit %d page %d: cursor reveals %v", limit, page, leak)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		var want []string
		for i := 29; i < 150; i += 30 {
			want = append(want, fmt.Sprintf("users/%s/notes/n%03d", alice.UID, i))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: alice paged %v, want each of hers once: %v", limit, got, want)
		}
	}

	// Listing her own collection pages the same way.
	var got []string
	cursor := ""
	for range 20 {
		u := api + "/documents/users/" + alice.UID + "/notes?limit=2&orderBy=-profile.city"
		if cursor != "" {
			u += "&startAfter=" + url.QueryEscape(cursor)
		}
		r := env.Do(t, "GET", u, "", alice.h())
		wantStatus(t, "list", r, http.StatusOK)
		for _, d := range r.JSON(t)["docs"].([]any) {
			got = append(got, d.(map[string]any)["id"].(string))
		}
		if cursor, _ = r.JSON(t)["nextCursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(got, ",") != "n149,n119,n089,n059,n029" {
		t.Fatalf("list pages=%v", got)
	}
}

// TestCursor_RefusesForgedTamperedAndForeign: a cursor continues only the
// query and caller it was issued for; anything else is 400 INVALID_QUERY
// with a message that tells nothing.
func TestCursor_RefusesForgedTamperedAndForeign(t *testing.T) {
	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	for i := range 6 {
		for _, u := range []user{alice, bob} {
			wantStatus(t, "seed", env.Do(t, "PUT", fmt.Sprintf("%s/documents/users/%s/notes/n%d", api, u.UID, i), fmt.Sprintf(`{"doc":{"n":%d}}`, i), u.h()), http.StatusCreated)
		}
	}
	body := `{"collection":"users/*/notes","orderBy":[{"field":"n"}],"limit":2}`
	_, cursor := queryPage(t, env, alice.h(), body)
	if cursor == "" {
		t.Fatal("no cursor")
	}
	wantStatus(t, "own cursor", env.Do(t, "POST", api+"/query", withCursor(body, cursor), alice.h()), http.StatusOK)
	// The limit is not part of the query: another page size continues.
	wantStatus(t, "own cursor, other limit", env.Do(t, "POST", api+"/query", withCursor(strings.Replace(body, `"limit":2`, `"limit":5`, 1), cursor), alice.h()), http.StatusOK)
	// Normalization does not change the query: "asc" spelled out.
	wantStatus(t, "own cursor, explicit asc", env.Do(t, "POST", api+"/query", withCursor(`{"collection":"users/*/notes","orderBy":[{"field":"n","direction":"ASC"}],"limit":2}`, cursor), alice.h()), http.StatusOK)

	forged := func(path string) string {
		b, _ := json.Marshal(map[string]any{"f": []string{"n asc"}, "v": []any{map[string]any{"x": 0}}, "p": path})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(cursor)
	flip := func(i int) string {
		b := slices.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	adminCursor := func() string {
		_, c := queryPage(t, env, nil, body)
		return c
	}()
	for _, tc := range []struct {
		name   string
		h      map[string]string
		body   string
		cursor string
	}{
		{"forged engine cursor", alice.h(), body, forged("users/" + bob.UID + "/notes/n0")},
		{"forged cursor on a tombstone walk", alice.h(), `{"collection":"users/*/notes","orderBy":[{"field":"n"}],"limit":2,"showDeleted":true}`, forged("users/" + bob.UID + "/notes/n0")},
		{"garbage", alice.h(), body, "notacursor"},
		{"empty after decoding", alice.h(), body, "AA"},
		{"truncated", alice.h(), body, cursor[:len(cursor)-4]},
		{"first byte flipped", alice.h(), body, flip(0)},
		{"nonce flipped", alice.h(), body, flip(5)},
		{"ciphertext flipped", alice.h(), body, flip(len(raw) / 2)},
		{"tag flipped", alice.h(), body, flip(len(raw) - 1)},
		{"another caller", bob.h(), body, cursor},
		{"admin's cursor for a user", alice.h(), body, adminCursor},
		{"user's cursor for the admin", nil, body, cursor},
		{"another collection", alice.h(), `{"collection":"users/` + alice.UID + `/notes","orderBy":[{"field":"n"}],"limit":2}`, cursor},
		{"another orderBy", alice.h(), `{"collection":"users/*/notes","orderBy":[{"field":"n","direction":"desc"}],"limit":2}`, cursor},
		{"another filter", alice.h(), `{"collection":"users/*/notes","filters":[{"field":"n","op":">=","value":0}],"orderBy":[{"field":"n"}],"limit":2}`, cursor},
		{"showDeleted", alice.h(), `{"collection":"users/*/notes","orderBy":[{"field":"n"}],"limit":2,"showDeleted":true}`, cursor},
	} {
		r := env.Do(t, "POST", api+"/query", withCursor(tc.body, tc.cursor), tc.h)
		if r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "INVALID_QUERY" {
			t.Errorf("%s: status=%d body=%s, want 400 INVALID_QUERY", tc.name, r.Status, r.Body)
			continue
		}
		checkErrorShape(t, r)
		if msg := r.JSON(t)["message"].(string); strings.Contains(msg, bob.UID) || strings.Contains(msg, "users/") || strings.Contains(msg, "authentication") {
			t.Errorf("%s: message %q tells too much", tc.name, msg)
		}
	}
	// Anonymous callers are refused before the query is read: no rule could
	// open users/* to them.
	if r := env.Do(t, "POST", api+"/query", withCursor(body, cursor), anon); r.Status != http.StatusUnauthorized {
		t.Errorf("anonymous with a user's cursor: status=%d %s, want 401", r.Status, r.Body)
	}
	// Another database is another query.
	r := env.Do(t, "POST", "/api/v1/databases/other/query", withCursor(body, cursor), alice.h())
	if r.Status != http.StatusBadRequest {
		t.Errorf("cursor in another database: status=%d %s, want 400", r.Status, r.Body)
	}
	// The listing endpoint checks the same way.
	r = env.Do(t, "GET", api+"/documents/users/"+alice.UID+"/notes?orderBy=n&startAfter="+url.QueryEscape(cursor), "", alice.h())
	if r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "INVALID_QUERY" {
		t.Errorf("group cursor on a listing: status=%d %s, want 400 INVALID_QUERY", r.Status, r.Body)
	}
	// A subscription ignores the cursor of the query object it reuses.
	w := env.dialWS(t, "", alice.h())
	w.subscribe("s", map[string]any{"query": map[string]any{"collection": "users/*/notes", "orderBy": []any{map[string]any{"field": "n"}}, "limit": 2, "startAfter": cursor}})
}

// permissiveRules is a custom rules file that lets anyone read every
// document at every depth: system collections must stay closed anyway.
const permissiveRules = `
[[rule]]
match = "{coll}/{doc}"
allow = ["read"]
if    = "true"

[[rule]]
match = "{coll}/{doc}/{rest=**}"
allow = ["read"]
if    = "true"

[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["write"]
if    = "request.auth != null && request.auth.uid == userId"
`

// systemEnv is a server with permissiveRules, loaded from a file, two users
// (so _users, _usernames and _refresh_tokens hold documents) and documents
// in the other system collections, one nested.
func systemEnv(t *testing.T) (*testEnv, user, user) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "security.toml")
	if err := os.WriteFile(path, []byte(permissiveRules), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set, RulesFile: path})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	storeCommit(t, env.Store,
		putW("_api_keys/k1", map[string]any{"hash": "sha256:secret"}),
		putW("_triggers/t1", map[string]any{"secret": "whsec_x"}),
		putW("_outbox/o1", map[string]any{"url": "http://127.0.0.1/hook"}),
		putW("_outbox/o1/notes/x", map[string]any{"n": json.Number("1")}),
		putW("_users/"+bob.UID+"/notes/x", map[string]any{"n": json.Number("1")}),
	)
	wantStatus(t, "own doc", env.Do(t, "PUT", api+"/documents/users/"+alice.UID+"/notes/a", `{"doc":{"n":1}}`, alice.h()), http.StatusCreated)
	wantStatus(t, "top-level doc", env.Do(t, "PUT", api+"/documents/pub/p1", `{"doc":{"n":1}}`, nil), http.StatusCreated)
	return env, alice, bob
}

// wantNoSystem fails when any document of a system collection is among docs
// (decoded envelopes).
func wantNoSystem(t *testing.T, what string, docs []any) {
	t.Helper()
	for _, d := range docs {
		if c, _ := d.(map[string]any)["collection"].(string); collections.IsSystemPath(c) {
			t.Fatalf("%s returned a document of %s: %v", what, c, d)
		}
	}
}

// TestSystemCollections_NotReachableThroughPatterns: with rules that allow
// reading everything, no query pattern reaches _users, _usernames,
// _refresh_tokens, _api_keys, _triggers or _outbox — not for users, not for
// the admin; naming them stays admin-only.
func TestSystemCollections_NotReachableThroughPatterns(t *testing.T) {
	env, alice, _ := systemEnv(t)
	for _, who := range []struct {
		name string
		h    map[string]string
	}{{"alice", alice.h()}, {"anonymous", anon}, {"admin", nil}} {
		for _, body := range []string{
			`{"collection":"*"}`,
			`{"collection":"*","showDeleted":true,"limit":1000}`,
			`{"collection":"*","orderBy":[{"field":"hash","direction":"desc"}]}`,
			`{"collection":"*","filters":[{"field":"secret","op":"!=","value":"x"}],"limit":1}`,
			`{"collection":"*/*/notes"}`,
			`{"collection":"*/*/*/*/notes"}`,
		} {
			var all []any
			cursor := ""
			for page := 0; page < 50; page++ {
				b := body
				if cursor != "" {
					b = withCursor(body, cursor)
				}
				r := env.Do(t, "POST", api+"/query", b, who.h)
				wantStatus(t, who.name+" "+b, r, http.StatusOK)
				docs, _ := r.JSON(t)["docs"].([]any)
				all = append(all, docs...)
				if cursor, _ = r.JSON(t)["nextCursor"].(string); cursor == "" {
					break
				}
			}
			wantNoSystem(t, who.name+" query "+body, all)
			if body == `{"collection":"*"}` && len(all) != 1 {
				t.Errorf("%s query *: %d documents, want pub/p1 only", who.name, len(all))
			}
		}
	}
	for _, coll := range []string{"_users", "_usernames", "_refresh_tokens", "_api_keys", "_triggers", "_outbox", "_outbox/o1/notes"} {
		wantStatus(t, "alice names "+coll, env.Do(t, "POST", api+"/query", `{"collection":"`+coll+`"}`, alice.h()), http.StatusForbidden)
		wantStatus(t, "alice lists "+coll, env.Do(t, "GET", api+"/documents/"+coll, "", alice.h()), http.StatusForbidden)
	}
}

// TestSystemCollections_NotInRealtime: WebSocket snapshots and events and
// SSE events of a "*" subscription never carry a system document.
func TestSystemCollections_NotInRealtime(t *testing.T) {
	env, alice, _ := systemEnv(t)
	w := env.dialWS(t, "", alice.h())
	for id, pattern := range map[string]string{"all": "*", "notes": "*/*/notes"} {
		w.subscribe(id, map[string]any{"query": q(pattern), "sendSnapshot": true})
		m := w.expect("snapshot")
		docs, _ := m.Payload["documents"].([]any)
		wantNoSystem(t, "snapshot of "+pattern, docs)
		if len(docs) != 1 {
			t.Fatalf("snapshot of %s=%s, want one document", pattern, m)
		}
	}
	sse := env.openSSE(t, "collection=*", alice.h())
	// Signing up writes _users, _usernames and _refresh_tokens; then one
	// ordinary document: it must be the first and only event.
	env.signup(t, "carol")
	storeCommit(t, env.Store, putW("_outbox/o2", nil), putW("_triggers/t2", nil))
	wantStatus(t, "write", env.Do(t, "PUT", api+"/documents/pub/p2", `{"doc":{}}`, nil), http.StatusCreated)
	m := w.expect("event")
	if m.str("subId") != "all" || m.delta()["path"] != "pub/p2" {
		t.Fatalf("first event=%s, want pub/p2 on all", m)
	}
	if ev := sse.event(); !strings.Contains(ev.data, `"path":"pub/p2"`) {
		t.Fatalf("first SSE event=%s, want pub/p2", ev.data)
	}
}

// TestSystemCollections_NotReplicated: RxDB refuses system collections,
// for the admin too.
func TestSystemCollections_NotReplicated(t *testing.T) {
	env, alice, _ := systemEnv(t)
	for _, coll := range []string{"_users", "_refresh_tokens", "_outbox/o1/notes"} {
		for _, h := range []map[string]string{alice.h(), nil} {
			wantRx(t, "pull "+coll, env.Do(t, "GET", rxBase(coll)+"/pull?lwt=0&id=&limit=10", "", h), http.StatusForbidden)
			wantRx(t, "push "+coll, env.Do(t, "POST", rxBase(coll)+"/push", `[{"newDocumentState":{"id":"x","_deleted":false}}]`, h), http.StatusForbidden)
			wantRx(t, "pullStream "+coll, env.Do(t, "GET", rxBase(coll)+"/pullStream", "", h), http.StatusForbidden)
		}
	}
}

// TestRxDB_CheckpointNamesNoUnreadableDocument: a pull's checkpoint moves
// past documents the rules hide, but never names one of them.
func TestRxDB_CheckpointNamesNoUnreadableDocument(t *testing.T) {
	set, err := rules.Parse([]byte(rxSharedRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	mustPush(t, env, alice.h(), "shared", fmt.Sprintf(`[{"newDocumentState":{"id":"a1","owner":%q,"_deleted":false}}]`, alice.UID))
	for i := range 5 {
		mustPush(t, env, bob.h(), "shared", fmt.Sprintf(`[{"newDocumentState":{"id":"bob-secret-%d","owner":%q,"_deleted":false}}]`, i, bob.UID))
	}
	lwt, id := int64(0), ""
	for range 10 {
		b := env.mustPull(t, alice.h(), "shared", lwt, id, 2)
		if strings.Contains(b.Checkpoint.ID, "bob") {
			t.Fatalf("alice's checkpoint names bob's document: %+v", b.Checkpoint)
		}
		for _, d := range b.Documents {
			if d["id"] != "a1" {
				t.Fatalf("alice pulled %v", d)
			}
		}
		if b.Checkpoint.LWT == lwt && b.Checkpoint.ID == id {
			break
		}
		lwt, id = b.Checkpoint.LWT, b.Checkpoint.ID
	}
	// The checkpoint moved past bob's documents: a later document of
	// alice's is the next thing she pulls.
	mustPush(t, env, alice.h(), "shared", fmt.Sprintf(`[{"newDocumentState":{"id":"a2","owner":%q,"_deleted":false}}]`, alice.UID))
	b := env.mustPull(t, alice.h(), "shared", lwt, id, 10)
	if len(b.Documents) != 1 || b.Documents[0]["id"] != "a2" || b.Checkpoint.ID != "a2" {
		t.Fatalf("pull after the checkpoint=%+v, want a2 alone", b)
	}
}

// TestSystemCollections_NotAnOracleForRules: a rule condition's get() and
// exists() see system documents as absent, so a rule built from a capture
// cannot be turned into a username (or key, or token) oracle.
func TestSystemCollections_NotAnOracleForRules(t *testing.T) {
	set, err := rules.Parse([]byte(`
[[rule]]
match = "probe/{name}"
allow = ["get"]
if    = "exists('_usernames/' + name) || get('_users/' + name) != null"
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{RateLimit: -1, Rules: set})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	for _, name := range []string{"bob", bob.UID, "nobody"} {
		wantStatus(t, "probe "+name, env.Do(t, "GET", api+"/documents/probe/"+name, "", alice.h()), http.StatusForbidden)
	}
}
