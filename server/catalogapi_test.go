package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/server"
)

// The catalog admin API on a real server over SQLite, seeded with
// testdata/seed.json (rooms/r1..r3, rooms/r1/messages, rooms/r2/messages,
// users/u1 in "default").
func TestCatalogAPI(t *testing.T) {
	put := func(db, path string) func(t testing.TB, env *testEnv) {
		return func(t testing.TB, env *testEnv) {
			env.MustDo(t, http.StatusCreated, "PUT", "/api/v1/databases/"+db+"/documents/"+path, `{"doc":{}}`)
		}
	}
	runScenarios(t, []scenario{
		{Name: "databases", Method: "GET", URL: "/admin/v1/databases", ExpectedStatus: 200,
			ExpectedContent: []string{`{"databases":["default"],"nextCursor":null}`}},
		{Name: "databases without tombstone-only ones", Method: "GET", URL: "/admin/v1/databases", ExpectedStatus: 200,
			Before: func(t testing.TB, env *testEnv) {
				put("zoo", "a/1")(t, env)
				put("gone", "a/1")(t, env)
				env.MustDo(t, http.StatusNoContent, "DELETE", "/api/v1/databases/gone/documents/a/1", "")
			},
			ExpectedContent: []string{`{"databases":["default","zoo"],"nextCursor":null}`}},
		{Name: "databases page", Method: "GET", URL: "/admin/v1/databases?limit=1", ExpectedStatus: 200, Before: put("zoo", "a/1"),
			ExpectedContent: []string{`{"databases":["default"],"nextCursor":"default"}`}},
		{Name: "databases next page", Method: "GET", URL: "/admin/v1/databases?limit=1&after=default", ExpectedStatus: 200, Before: put("zoo", "a/1"),
			ExpectedContent: []string{`{"databases":["zoo"],"nextCursor":null}`}},
		{Name: "top-level collections", Method: "GET", URL: "/admin/v1/databases/default/collections", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[{"path":"rooms"},{"path":"users"}],"nextCursor":null}`}},
		{Name: "collections page", Method: "GET", URL: "/admin/v1/databases/default/collections?limit=1", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[{"path":"rooms"}],"nextCursor":"rooms"}`}},
		{Name: "collections next page", Method: "GET", URL: "/admin/v1/databases/default/collections?limit=1&after=rooms", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[{"path":"users"}],"nextCursor":null}`}},
		{Name: "subcollections", Method: "GET", URL: "/admin/v1/databases/default/collections?parent=rooms/r1", ExpectedStatus: 200,
			Before:          put("default", "rooms/r1/pins/p1"),
			ExpectedContent: []string{`{"collections":[{"path":"rooms/r1/messages"},{"path":"rooms/r1/pins"}],"nextCursor":null}`}},
		{Name: "subcollections of a document without any", Method: "GET", URL: "/admin/v1/databases/default/collections?parent=rooms/r3", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[],"nextCursor":null}`}},
		{Name: "a system parent lists nothing", Method: "GET", URL: "/admin/v1/databases/default/collections?parent=_users/u1", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[],"nextCursor":null}`}},
		{Name: "an unknown database is empty", Method: "GET", URL: "/admin/v1/databases/nowhere/collections", ExpectedStatus: 200,
			ExpectedContent: []string{`{"collections":[],"nextCursor":null}`}},
		{Name: "groups", Method: "GET", URL: "/admin/v1/databases/default/groups", ExpectedStatus: 200,
			Before:          put("default", "users/u1/notes/n1"),
			ExpectedContent: []string{`{"groups":[{"pattern":"rooms/*/messages"},{"pattern":"users/*/notes"}],"nextCursor":null}`}},
		{Name: "groups page", Method: "GET", URL: "/admin/v1/databases/default/groups?limit=1&after=" + url.QueryEscape("rooms/*/messages"), ExpectedStatus: 200,
			Before:          put("default", "users/u1/notes/n1"),
			ExpectedContent: []string{`{"groups":[{"pattern":"users/*/notes"}],"nextCursor":null}`}},
		{Name: "a limit above 1000 is capped", Method: "GET", URL: "/admin/v1/databases/default/groups?limit=5000", ExpectedStatus: 200,
			ExpectedContent: []string{`{"groups":[{"pattern":"rooms/*/messages"}],"nextCursor":null}`}},

		{Name: "limit 0", Method: "GET", URL: "/admin/v1/databases?limit=0", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, "limit"}},
		{Name: "limit not a number", Method: "GET", URL: "/admin/v1/databases/default/collections?limit=ten", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`}},
		{Name: "limit empty", Method: "GET", URL: "/admin/v1/databases/default/groups?limit=", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`}},
		{Name: "bad after database", Method: "GET", URL: "/admin/v1/databases?after=a/b", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, "after"}},
		{Name: "bad after collection", Method: "GET", URL: "/admin/v1/databases/default/collections?after=rooms/r1", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`}},
		{Name: "bad after group", Method: "GET", URL: "/admin/v1/databases/default/groups?after=a//b", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`}},
		{Name: "parent is a collection", Method: "GET", URL: "/admin/v1/databases/default/collections?parent=rooms", ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`}},
		{Name: "parent with a wildcard", Method: "GET", URL: "/admin/v1/databases/default/collections?parent=" + url.QueryEscape("rooms/*"), ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`}},
		{Name: "bad database name", Method: "GET", URL: "/admin/v1/databases/bad$name/groups", ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`}},
		{Name: "anonymous", Method: "GET", URL: "/admin/v1/databases", Anonymous: true, ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`}},
		{Name: "anonymous collections", Method: "GET", URL: "/admin/v1/databases/default/collections", Anonymous: true, ExpectedStatus: 401},
		{Name: "wrong key", Method: "GET", URL: "/admin/v1/databases/default/groups", Headers: map[string]string{"Authorization": "Bearer nope"}, ExpectedStatus: 401},
		{Name: "POST is not allowed", Method: "POST", URL: "/admin/v1/databases", ExpectedStatus: 405},
	})
}

// Signed-up users never reach the catalog, and the auth service's own
// documents (_users, ...) never show in it.
func TestCatalogAPI_AdminOnly(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	alice := env.signup(t, "alice")
	env.MustDo(t, http.StatusCreated, "PUT", api+"/documents/users/"+alice.UID+"/notes/n1", `{"doc":{}}`)
	for _, u := range []string{"/admin/v1/databases", "/admin/v1/databases/default/collections", "/admin/v1/databases/default/collections?parent=users/" + alice.UID, "/admin/v1/databases/default/groups"} {
		wantStatus(t, "alice "+u, env.Do(t, "GET", u, "", alice.h()), http.StatusForbidden)
		wantStatus(t, "anonymous "+u, env.Do(t, "GET", u, "", anon), http.StatusUnauthorized)
	}
	var dbs struct {
		Databases  []string `json:"databases"`
		NextCursor *string  `json:"nextCursor"`
	}
	mustJSON(t, env.MustDo(t, 200, "GET", "/admin/v1/databases", ""), &dbs)
	if !slices.Equal(dbs.Databases, []string{"default"}) || dbs.NextCursor != nil {
		t.Errorf("databases %+v, want [default] and no cursor", dbs)
	}
	top := env.MustDo(t, 200, "GET", "/admin/v1/databases/default/collections", "")
	if got := compact(top.Body); got != `{"collections":[],"nextCursor":null}` {
		t.Errorf("top-level collections %s, want none (users/%s has no document itself; _users is a system collection)", got, alice.UID)
	}
	sub := env.MustDo(t, 200, "GET", "/admin/v1/databases/default/collections?parent=users/"+alice.UID, "")
	if got, want := compact(sub.Body), `{"collections":[{"path":"users/`+alice.UID+`/notes"}],"nextCursor":null}`; got != want {
		t.Errorf("subcollections %s, want %s", got, want)
	}
	groups := env.MustDo(t, 200, "GET", "/admin/v1/databases/default/groups", "")
	if got := compact(groups.Body); got != `{"groups":[{"pattern":"users/*/notes"}],"nextCursor":null}` || strings.Contains(got, "_") {
		t.Errorf("groups %s, want users/*/notes only", got)
	}
}

// Paging with nextCursor through many names returns each once, in order.
func TestCatalogAPI_PagesEveryName(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	var want []string
	var batch []string
	for i := range 25 {
		c := "c" + string(rune('a'+i))
		want = append(want, c)
		batch = append(batch, `{"type":"create","path":"`+c+`/x","data":{}}`, `{"type":"create","path":"`+c+`/x/sub/y","data":{}}`)
	}
	env.MustDo(t, http.StatusOK, "POST", api+"/batch", `{"writes":[`+strings.Join(batch, ",")+`]}`)
	for _, limit := range []string{"1", "7", "25", "1000"} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 30 {
				t.Fatalf("limit %s: no last page", limit)
			}
			var page struct {
				Collections []struct{ Path string } `json:"collections"`
				NextCursor  *string                 `json:"nextCursor"`
			}
			mustJSON(t, env.MustDo(t, 200, "GET", "/admin/v1/databases/default/collections?limit="+limit+"&after="+after, ""), &page)
			for _, c := range page.Collections {
				got = append(got, c.Path)
			}
			if page.NextCursor == nil {
				break
			}
			after = *page.NextCursor
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %s: %v, want %v", limit, got, want)
		}
	}
}

// An engine without collections.Catalog answers 501, clearly.
func TestCatalogAPI_EngineWithoutCatalog(t *testing.T) {
	type plainStore struct{ collections.Store } // hides the optional interface
	store := plainStore{MustOpenStore(t)}
	if _, ok := any(store).(collections.Catalog); ok {
		t.Fatal("the wrapper still implements Catalog")
	}
	env := MustStartServer(t, store, server.Config{})
	for _, u := range []string{"/admin/v1/databases", "/admin/v1/databases/default/collections", "/admin/v1/databases/default/groups"} {
		r := env.Do(t, "GET", u, "", nil)
		wantStatus(t, u, r, http.StatusNotImplemented)
		if m := r.JSON(t); m["code"] != "NOT_IMPLEMENTED" || !strings.Contains(m["message"].(string), "Catalog") {
			t.Errorf("%s: %s", u, r.Body)
		}
	}
	// Still admin only.
	wantStatus(t, "anonymous", env.Do(t, "GET", "/admin/v1/databases", "", anon), http.StatusUnauthorized)
}

func mustJSON(t testing.TB, r *response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
}
