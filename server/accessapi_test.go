package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// listedUser is one entry of GET /admin/v1/users.
type listedUser struct {
	UID       string   `json:"uid"`
	Username  string   `json:"username"`
	Roles     []string `json:"roles"`
	CreatedAt int64    `json:"createdAt"`
}

type userPage struct {
	Users      []listedUser `json:"users"`
	NextCursor *string      `json:"nextCursor"`
}

// listUsers fetches one page with the admin key; query is the raw query
// string.
func (e *testEnv) listUsers(t *testing.T, query string) userPage {
	t.Helper()
	r := e.MustDo(t, http.StatusOK, "GET", "/admin/v1/users?"+query, "")
	for _, secret := range []string{"passwordHash", "$2a$", "correct horse"} {
		if strings.Contains(string(r.Body), secret) {
			t.Fatalf("the user list shows %q: %s", secret, r.Body)
		}
	}
	var p userPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("user page %s: %v", r.Body, err)
	}
	if p.Users == nil {
		t.Fatalf("users is not a list: %s", r.Body)
	}
	return p
}

func usernames(p userPage) []string {
	var out []string
	for _, u := range p.Users {
		out = append(out, u.Username)
	}
	return out
}

func (e *testEnv) refreshStatus(t *testing.T, refresh string) int {
	t.Helper()
	return e.Do(t, "POST", "/auth/v1/refresh", fmt.Sprintf(`{"refresh_token":%q}`, refresh), anon).Status
}

func TestAccessAPI_ListUsers(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "Bob")
	env.signup(t, "carol")

	all := env.listUsers(t, "")
	if got := usernames(all); !slices.Equal(got, []string{"alice", "Bob", "carol"}) || all.NextCursor != nil {
		t.Fatalf("users=%v next=%v, want alice Bob carol and a null cursor", got, all.NextCursor)
	}
	if u := all.Users[0]; u.UID != alice.UID || !slices.Equal(u.Roles, []string{"user"}) || u.CreatedAt <= 0 {
		t.Errorf("alice listed as %+v", u)
	}

	first := env.listUsers(t, "limit=2")
	if got := usernames(first); !slices.Equal(got, []string{"alice", "Bob"}) || first.NextCursor == nil {
		t.Fatalf("page 1=%v next=%v", got, first.NextCursor)
	}
	second := env.listUsers(t, "limit=2&after="+url.QueryEscape(*first.NextCursor))
	if got := usernames(second); !slices.Equal(got, []string{"carol"}) || second.NextCursor != nil {
		t.Fatalf("page 2=%v next=%v", got, second.NextCursor)
	}
	if got := usernames(env.listUsers(t, "prefix=b")); !slices.Equal(got, []string{"Bob"}) {
		t.Errorf("prefix b: %v", got)
	}
	if got := usernames(env.listUsers(t, "limit=5000")); len(got) != 3 {
		t.Errorf("limit above the maximum is capped, not refused: %v", got)
	}

	head := env.Head(t)
	for _, c := range []struct {
		what    string
		query   string
		headers map[string]string
		want    int
	}{
		{"anonymous", "", anon, http.StatusUnauthorized},
		{"a user", "", alice.h(), http.StatusForbidden},
		{"limit 0", "limit=0", nil, http.StatusBadRequest},
		{"negative limit", "limit=-1", nil, http.StatusBadRequest},
		{"limit not a number", "limit=ten", nil, http.StatusBadRequest},
		{"unknown parameter", "limt=10", nil, http.StatusBadRequest},
	} {
		r := env.Do(t, "GET", "/admin/v1/users?"+c.query, "", c.headers)
		wantStatus(t, c.what, r, c.want)
		if strings.Contains(string(r.Body), "bob") || strings.Contains(string(r.Body), bob.UID) {
			t.Errorf("%s: the refusal names a user: %s", c.what, r.Body)
		}
	}
	if got := env.Head(t); got != head {
		t.Errorf("refused listings wrote %d changes", got-head)
	}
}

func TestAccessAPI_ListUsersWithoutAuth(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	wantStatus(t, "users without auth", env.Do(t, "GET", "/admin/v1/users", "", nil), http.StatusNotFound)
	wantStatus(t, "keys without auth", env.Do(t, "GET", "/admin/v1/keys", "", nil), http.StatusNotFound)
}

func TestAccessAPI_SetUserRoles(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice, bob, carol := env.signup(t, "alice"), env.signup(t, "bob"), env.signup(t, "carol")
	roles := "/admin/v1/users/" + alice.UID + "/roles"

	// Refusals change nothing: no write, alice keeps her roles and her
	// session.
	head := env.Head(t)
	for _, c := range []struct {
		what, url, body string
		headers         map[string]string
		want            int
	}{
		{"anonymous", roles, `{"roles":["admin"]}`, anon, http.StatusUnauthorized},
		{"the user herself", roles, `{"roles":["admin"]}`, alice.h(), http.StatusForbidden},
		{"another user", roles, `{"roles":["admin"]}`, bob.h(), http.StatusForbidden},
		{"unknown uid", "/admin/v1/users/nobody/roles", `{"roles":["admin"]}`, nil, http.StatusNotFound},
		{"roles missing", roles, `{}`, nil, http.StatusBadRequest},
		{"roles not a list", roles, `{"roles":"admin"}`, nil, http.StatusBadRequest},
		{"a role not a string", roles, `{"roles":["admin",1]}`, nil, http.StatusBadRequest},
		{"a role with a space", roles, `{"roles":["ad min"]}`, nil, http.StatusBadRequest},
		{"an empty role", roles, `{"roles":[""]}`, nil, http.StatusBadRequest},
		{"unknown field", roles, `{"roles":["admin"],"uid":"x"}`, nil, http.StatusBadRequest},
		{"not JSON", roles, `{"roles":`, nil, http.StatusBadRequest},
	} {
		wantStatus(t, c.what, env.Do(t, "PUT", c.url, c.body, c.headers), c.want)
	}
	if got := env.Head(t); got != head {
		t.Fatalf("refused role changes wrote %d changes", got-head)
	}
	if u := env.listUsers(t, "prefix=alice").Users; len(u) != 1 || !slices.Equal(u[0].Roles, []string{"user"}) {
		t.Fatalf("after the refusals alice is %+v, want roles [user]", u)
	}

	r := env.Do(t, "PUT", roles, `{"roles":["admin","editor"]}`, nil)
	wantStatus(t, "promote alice", r, http.StatusOK)
	var got listedUser
	if err := json.Unmarshal(r.Body, &got); err != nil || got.UID != alice.UID || got.Username != "alice" ||
		!slices.Equal(got.Roles, []string{"admin", "editor"}) || got.CreatedAt <= 0 || strings.Contains(string(r.Body), "passwordHash") {
		t.Fatalf("promote alice: %s (%v)", r.Body, err)
	}
	if u := env.listUsers(t, "prefix=alice").Users; !slices.Equal(u[0].Roles, []string{"admin", "editor"}) {
		t.Fatalf("listed after the change: %+v", u)
	}

	// Her refresh token is revoked; her access token keeps its old roles
	// until it expires, so it is still not an admin's.
	if s := env.refreshStatus(t, alice.Refresh); s != http.StatusUnauthorized {
		t.Errorf("refresh after the role change: %d, want 401", s)
	}
	wantStatus(t, "old access token", env.Do(t, "GET", "/admin/v1/users", "", alice.h()), http.StatusForbidden)

	// Signed in again she is an admin-role user: she may use the admin API.
	login := env.Do(t, "POST", "/auth/v1/login", `{"username":"alice","password":"correct horse battery"}`, anon)
	wantStatus(t, "login", login, http.StatusOK)
	admin := map[string]string{"Authorization": "Bearer " + login.JSON(t)["access_token"].(string)}
	wantStatus(t, "admin-role user lists users", env.Do(t, "GET", "/admin/v1/users", "", admin), http.StatusOK)
	wantStatus(t, "admin-role user lists keys", env.Do(t, "GET", "/admin/v1/keys", "", admin), http.StatusOK)
	wantStatus(t, "admin-role user reads the rules", env.Do(t, "GET", "/admin/v1/rules", "", admin), http.StatusOK)

	// She demotes bob to no roles: his session ends, carol's does not.
	r = env.Do(t, "PUT", "/admin/v1/users/"+bob.UID+"/roles", `{"roles":[]}`, admin)
	wantStatus(t, "demote bob", r, http.StatusOK)
	if roles, ok := r.JSON(t)["roles"].([]any); !ok || len(roles) != 0 {
		t.Errorf("demote bob: %s, want roles []", r.Body)
	}
	if s := env.refreshStatus(t, bob.Refresh); s != http.StatusUnauthorized {
		t.Errorf("bob's refresh after the demotion: %d, want 401", s)
	}
	if s := env.refreshStatus(t, carol.Refresh); s != http.StatusOK {
		t.Errorf("carol's refresh: %d, want 200", s)
	}
}

func TestAccessAPI_ListKeys(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	empty := env.MustDo(t, http.StatusOK, "GET", "/admin/v1/keys", "")
	if got := compact(empty.Body); got != `{"keys":[],"truncated":false}` {
		t.Errorf("no keys: %s", got)
	}
	var secrets []string
	for _, body := range []string{`{"name":"hooks"}`, `{"name":"agents","roles":["service","admin"]}`, `{"name":"scraper","roles":["metrics"]}`} {
		r := env.MustDo(t, http.StatusCreated, "POST", "/admin/v1/keys", body)
		secrets = append(secrets, r.JSON(t)["key"].(string))
	}
	env.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/keys/scraper", "")

	r := env.MustDo(t, http.StatusOK, "GET", "/admin/v1/keys", "")
	var l struct {
		Keys []struct {
			Name      string   `json:"name"`
			Roles     []string `json:"roles"`
			CreatedAt int64    `json:"createdAt"`
		} `json:"keys"`
		Truncated bool `json:"truncated"`
	}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Keys) != 2 || l.Truncated ||
		l.Keys[0].Name != "agents" || !slices.Equal(l.Keys[0].Roles, []string{"service", "admin"}) || l.Keys[0].CreatedAt <= 0 ||
		l.Keys[1].Name != "hooks" || !slices.Equal(l.Keys[1].Roles, []string{"service"}) {
		t.Fatalf("keys=%s, want agents and hooks (scraper revoked)", r.Body)
	}
	for _, k := range secrets {
		if strings.Contains(string(r.Body), k) || strings.Contains(string(r.Body), k[3:]) {
			t.Fatalf("the key list shows a key: %s", r.Body)
		}
	}
	if strings.Contains(string(r.Body), "hash") {
		t.Fatalf("the key list shows a hash: %s", r.Body)
	}

	head := env.Head(t)
	wantStatus(t, "anonymous", env.Do(t, "GET", "/admin/v1/keys", "", anon), http.StatusUnauthorized)
	wantStatus(t, "a user", env.Do(t, "GET", "/admin/v1/keys", "", alice.h()), http.StatusForbidden)
	wantStatus(t, "a service key", env.Do(t, "GET", "/admin/v1/keys", "", map[string]string{"Authorization": "", "X-API-Key": secrets[0]}), http.StatusForbidden)
	if got := env.Head(t); got != head {
		t.Errorf("refused listings wrote %d changes", got-head)
	}
	// A service key with the admin role is an admin.
	wantStatus(t, "an admin-role service key", env.Do(t, "GET", "/admin/v1/keys", "", map[string]string{"Authorization": "", "X-API-Key": secrets[1]}), http.StatusOK)
}

type rulesView struct {
	File       *string `json:"file"`
	Builtin    bool    `json:"builtin"`
	Rules      int     `json:"rules"`
	Source     *string `json:"source"`
	Truncated  bool    `json:"truncated"`
	LastReload *struct {
		At    int64   `json:"at"`
		OK    bool    `json:"ok"`
		Error *string `json:"error"`
	} `json:"lastReload"`
	SourceError *string `json:"sourceError"`
	FileAbsent  bool    `json:"fileAbsent"`
}

func (e *testEnv) rules(t *testing.T) rulesView {
	t.Helper()
	r := e.MustDo(t, http.StatusOK, "GET", "/admin/v1/rules", "")
	var v rulesView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("rules %s: %v", r.Body, err)
	}
	return v
}

const oneRule = "# one rule\n[[rule]]\nmatch = \"rooms/{r}\"\nallow = [\"read\"]\nif = \"true\"\n"

func TestAccessAPI_RulesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "security.toml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(oneRule)
	set, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	env := newAuthEnv(t, server.Config{Rules: set, RulesFile: file})
	alice := env.signup(t, "alice")

	v := env.rules(t)
	if v.File == nil || *v.File != file || v.Builtin || v.Rules != 1 || v.Source == nil || *v.Source != oneRule || v.Truncated || v.LastReload != nil {
		t.Fatalf("rules before any reload: %+v", v)
	}

	// A bad file: the reload fails, the old rule stays, the source shown is
	// the file as it is now and the failure is remembered.
	write("[[rule]]\nmatch = \n")
	wantError(t, "reload a bad file", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusBadRequest, "BAD_REQUEST")
	v = env.rules(t)
	if v.Rules != 1 || v.Source == nil || *v.Source != "[[rule]]\nmatch = \n" || v.LastReload == nil || v.LastReload.OK || v.LastReload.Error == nil || *v.LastReload.Error == "" || v.LastReload.At <= 0 {
		t.Fatalf("rules after a failed reload: %+v", v)
	}

	write(oneRule + strings.Replace(oneRule, "rooms", "halls", 1))
	wantStatus(t, "reload a good file", env.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	v = env.rules(t)
	if v.Rules != 2 || v.LastReload == nil || !v.LastReload.OK || v.LastReload.Error != nil {
		t.Fatalf("rules after a good reload: %+v", v)
	}

	// Longer than 1 MiB: cut there and flagged.
	write(oneRule + "#" + strings.Repeat("x", 1<<20) + "\n")
	if v = env.rules(t); v.Source == nil || len(*v.Source) != 1<<20 || !v.Truncated || !strings.HasPrefix(*v.Source, oneRule) {
		t.Fatalf("a long file: truncated=%v len=%d", v.Truncated, len(*v.Source))
	}

	// A multi-byte character across the limit is left out whole, whichever
	// byte the limit falls on.
	for _, pad := range []string{"#", "##"} {
		write(oneRule + pad + strings.Repeat("é", 1<<19) + "\n")
		v = env.rules(t)
		if v.Source == nil || !v.Truncated || len(*v.Source) > 1<<20 || len(*v.Source) < 1<<20-1 || !utf8.ValidString(*v.Source) || strings.ContainsRune(*v.Source, utf8.RuneError) {
			t.Fatalf("a long file of é (pad %q): truncated=%v len=%d", pad, v.Truncated, len(*v.Source))
		}
	}

	// The file is gone: no source, the reason instead.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if v = env.rules(t); v.Source != nil || v.SourceError == nil || v.Rules != 2 {
		t.Fatalf("a removed file: %+v", v)
	}

	head := env.Head(t)
	wantStatus(t, "anonymous", env.Do(t, "GET", "/admin/v1/rules", "", anon), http.StatusUnauthorized)
	wantStatus(t, "a user", env.Do(t, "GET", "/admin/v1/rules", "", alice.h()), http.StatusForbidden)
	if got := env.Head(t); got != head {
		t.Errorf("refused reads wrote %d changes", got-head)
	}
}

func TestAccessAPI_RulesWithoutFile(t *testing.T) {
	builtin := MustStartServer(t, MustOpenStore(t), server.Config{})
	v := builtin.rules(t)
	if v.File != nil || !v.Builtin || v.Rules != rules.Default().Len() || v.Source == nil || *v.Source != rules.DefaultSource() || v.LastReload != nil {
		t.Fatalf("built-in rules: %+v", v)
	}
	wantStatus(t, "reload the built-in rules", builtin.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusOK)
	if v = builtin.rules(t); v.LastReload == nil || !v.LastReload.OK {
		t.Fatalf("after a reload of the built-in rules: %+v", v)
	}
	wantStatus(t, "anonymous", builtin.Do(t, "GET", "/admin/v1/rules", "", anon), http.StatusUnauthorized)

	set, err := rules.Parse([]byte(oneRule), "test")
	if err != nil {
		t.Fatal(err)
	}
	given := MustStartServer(t, MustOpenStore(t), server.Config{Rules: set})
	if v := given.rules(t); v.File != nil || v.Builtin || v.Rules != 1 || v.Source != nil {
		t.Fatalf("rules given without a file: %+v", v)
	}
}

// TestAccessAPI_OptionalRulesFileCreatedLater: a server started with the
// built-in rules because its default rules file did not exist picks the
// file up at the first reload after it is created (no restart); until then
// a reload keeps the built-in rules, and a bad file is refused with its
// error while the built-in rules stay.
func TestAccessAPI_OptionalRulesFileCreatedLater(t *testing.T) {
	file := filepath.Join(t.TempDir(), "security.toml")
	env := newAuthEnv(t, server.Config{RulesFile: file, RulesFileOptional: true})
	reload := func(what string, status int) map[string]any {
		t.Helper()
		r := env.Do(t, "POST", "/admin/v1/rules/reload", "", nil)
		wantStatus(t, what, r, status)
		return r.JSON(t)
	}

	v := env.rules(t)
	if !v.Builtin || v.File == nil || *v.File != file || v.Rules != rules.Default().Len() || v.Source == nil || *v.Source != rules.DefaultSource() || !v.FileAbsent {
		t.Fatalf("rules with the file absent: %+v", v)
	}
	if got := reload("reload, file absent", http.StatusOK); got["builtin"] != true || got["fileAbsent"] != true {
		t.Fatalf("reload with the file absent: %v", got)
	}

	if err := os.WriteFile(file, []byte("[[rule]]\nmatch = \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := reload("reload a bad file", http.StatusBadRequest); !strings.Contains(fmt.Sprint(got["message"]), "previous rules stay") {
		t.Fatalf("bad file: %v", got)
	}
	if v = env.rules(t); !v.Builtin || v.Rules != rules.Default().Len() || v.FileAbsent {
		t.Fatalf("after a bad file: %+v, want the built-in rules still, and the file no longer absent", v)
	}

	if err := os.WriteFile(file, []byte(oneRule), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := reload("reload the new file", http.StatusOK); got["builtin"] != nil || fmt.Sprint(got["rules"]) != "1" || got["file"] != file {
		t.Fatalf("reload of the new file: %v", got)
	}
	if v = env.rules(t); v.Builtin || v.Rules != 1 || v.Source == nil || *v.Source != oneRule {
		t.Fatalf("after loading the file: %+v", v)
	}
	// From now on the file is the rules: removing it is an error, not a
	// silent return to the built-in rules.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	reload("reload, file removed", http.StatusBadRequest)
	if v = env.rules(t); v.Builtin || v.Rules != 1 {
		t.Fatalf("after removing the file: %+v", v)
	}
}
