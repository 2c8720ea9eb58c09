package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// ids returns the ids of a {"docs": [...]} response, in order.
func ids(t testing.TB, res *response) []string {
	t.Helper()
	docs, ok := res.JSON(t)["docs"].([]any)
	if !ok {
		t.Fatalf("no docs list in %s", res.Body)
	}
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i], _ = d.(map[string]any)["id"].(string)
	}
	return out
}

func expectIDs(want ...string) func(testing.TB, *testEnv, *response) {
	return func(t testing.TB, _ *testEnv, res *response) {
		t.Helper()
		if got := strings.Join(ids(t, res), ","); got != strings.Join(want, ",") {
			t.Errorf("ids=%s, want %s", got, strings.Join(want, ","))
		}
	}
}

// cursor returns the nextCursor of a page ("" for null).
func cursor(t testing.TB, res *response) string {
	t.Helper()
	c, _ := res.JSON(t)["nextCursor"].(string)
	return c
}

var listScenarios = []scenario{
	{
		Name: "list a collection", Method: "GET", URL: api + "/documents/rooms",
		ExpectedStatus: 200, ExpectedContent: []string{`"nextCursor":null}`, `{"docs":[{"id":"r1","collection":"rooms"`},
		After: expectIDs("r1", "r2", "r3"),
	},
	{
		Name: "list a subcollection", Method: "GET", URL: api + "/documents/rooms/r1/messages",
		ExpectedStatus: 200, After: expectIDs("m1", "m2"),
	},
	{
		Name: "list an empty collection", Method: "GET", URL: api + "/documents/nothing",
		ExpectedStatus: 200, ExpectedContent: []string{`{"docs":[],"nextCursor":null}`},
	},
	{
		Name: "list orderBy -field", Method: "GET", URL: api + "/documents/rooms?orderBy=-n",
		ExpectedStatus: 200, After: expectIDs("r3", "r2", "r1"),
	},
	{
		Name: "list orderBy field:desc", Method: "GET", URL: api + "/documents/rooms?orderBy=name:desc",
		ExpectedStatus: 200, After: expectIDs("r3", "r2", "r1"),
	},
	{
		Name: "list orderBy two terms", Method: "GET", URL: api + "/documents/rooms/r1/messages?orderBy=sender:asc,-n",
		ExpectedStatus: 200, After: expectIDs("m1", "m2"),
	},
	{
		Name: "list limit and startAfter page exactly", Method: "GET", URL: api + "/documents/rooms?limit=2&orderBy=-n",
		ExpectedStatus: 200,
		After: func(t testing.TB, env *testEnv, res *response) {
			expectIDs("r3", "r2")(t, env, res)
			next := cursor(t, res)
			if next == "" {
				t.Fatalf("nextCursor=null after a full page")
			}
			page2 := env.MustDo(t, 200, "GET", api+"/documents/rooms?limit=2&orderBy=-n&startAfter="+url.QueryEscape(next), "")
			expectIDs("r1")(t, env, page2)
			if c := cursor(t, page2); c != "" {
				t.Errorf("nextCursor=%q after the last page, want null", c)
			}
		},
	},
	{
		Name: "list showDeleted", Method: "GET", URL: api + "/documents/rooms?showDeleted=true",
		Before:          mustDelete("rooms/r2"),
		ExpectedStatus:  200,
		ExpectedContent: []string{`{"id":"r2","collection":"rooms","version":2,`, `"deleted":true`},
		After:           expectIDs("r1", "r2", "r3"),
	},
	{
		Name: "list hides tombstones", Method: "GET", URL: api + "/documents/rooms",
		Before:         mustDelete("rooms/r2"),
		ExpectedStatus: 200, NotExpectedContent: []string{`"deleted"`}, After: expectIDs("r1", "r3"),
	},
	{
		Name: "list a system collection as admin", Method: "GET", URL: api + "/documents/_sys",
		Before:         func(t testing.TB, env *testEnv) { mustSystemDoc(t, env, "_sys/k1") },
		ExpectedStatus: 200, After: expectIDs("k1"),
	},
	{
		Name: "list with a non-integer limit", Method: "GET", URL: api + "/documents/rooms?limit=ten",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list with a negative limit", Method: "GET", URL: api + "/documents/rooms?limit=-1",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list with a bad direction", Method: "GET", URL: api + "/documents/rooms?orderBy=n:sideways",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list with an empty orderBy term", Method: "GET", URL: api + "/documents/rooms?orderBy=n,,name",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list with a forged cursor", Method: "GET", URL: api + "/documents/rooms?startAfter=notacursor",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list with a bad showDeleted", Method: "GET", URL: api + "/documents/rooms?showDeleted=maybe",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "list without credentials", Method: "GET", URL: api + "/documents/rooms", Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
}

func TestDocuments_List(t *testing.T) { runScenarios(t, listScenarios) }

func queryRow(name, body string, want ...string) scenario {
	return scenario{
		Name: name, Method: "POST", URL: api + "/query", Body: body,
		ExpectedStatus: 200, After: expectIDs(want...),
	}
}

var queryScenarios = []scenario{
	queryRow("==", `{"collection":"rooms","filters":[{"field":"name","op":"==","value":"random"}]}`, "r2"),
	queryRow("!= (missing fields match)", `{"collection":"rooms","filters":[{"field":"topic","op":"!=","value":"x"}]}`, "r1", "r2", "r3"),
	queryRow("<", `{"collection":"rooms","filters":[{"field":"n","op":"<","value":2}]}`, "r1"),
	queryRow("<=", `{"collection":"rooms","filters":[{"field":"n","op":"<=","value":2}]}`, "r1", "r2"),
	queryRow(">", `{"collection":"rooms","filters":[{"field":"n","op":">","value":2}]}`, "r3"),
	queryRow(">=", `{"collection":"rooms","filters":[{"field":"n","op":">=","value":2}]}`, "r2", "r3"),
	queryRow("in", `{"collection":"rooms","filters":[{"field":"name","op":"in","value":["zeta","general"]}]}`, "r1", "r3"),
	queryRow("not-in", `{"collection":"rooms","filters":[{"field":"name","op":"not-in","value":["zeta","general"]}]}`, "r2"),
	queryRow("array-contains", `{"collection":"rooms","filters":[{"field":"tags","op":"array-contains","value":"b"}]}`, "r1", "r2"),
	queryRow("contains is array-contains", `{"collection":"rooms","filters":[{"field":"tags","op":"contains","value":"a"}]}`, "r1"),
	queryRow("array-contains-any", `{"collection":"rooms","filters":[{"field":"tags","op":"array-contains-any","value":["a","z"]}]}`, "r1"),
	queryRow("prefix", `{"collection":"rooms","filters":[{"field":"name","op":"prefix","value":"ra"}]}`, "r2"),
	queryRow("null equals null only", `{"collection":"rooms","filters":[{"field":"topic","op":"==","value":null}]}`, "r3"),
	queryRow("types do not mix", `{"collection":"rooms","filters":[{"field":"n","op":"==","value":"1"}]}`),
	queryRow("dotted field", `{"collection":"users","filters":[{"field":"profile.city","op":"==","value":"Oslo"}]}`, "u1"),
	queryRow("envelope field", `{"collection":"rooms","filters":[{"field":"id","op":"==","value":"r2"}]}`, "r2"),
	queryRow("exact big integer", `{"collection":"rooms","filters":[{"field":"big","op":"==","value":9007199254740993}]}`, "r1"),
	queryRow("big integer is not its neighbour", `{"collection":"rooms","filters":[{"field":"big","op":"==","value":9007199254740992}]}`),
	queryRow("orderBy desc", `{"collection":"rooms","orderBy":[{"field":"n","direction":"desc"}]}`, "r3", "r2", "r1"),
	queryRow("limit", `{"collection":"rooms","orderBy":[{"field":"n"}],"limit":2}`, "r1", "r2"),
	queryRow("collection group", `{"collection":"rooms/*/messages","filters":[{"field":"sender","op":"==","value":"alice"}]}`, "m1", "m3"),
	queryRow("collection group ordered", `{"collection":"rooms/*/messages","orderBy":[{"field":"n","direction":"desc"}]}`, "m3", "m2", "m1"),
	{
		Name: "query showDeleted", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms","showDeleted":true,"filters":[{"field":"id","op":"==","value":"r2"}]}`,
		Before:         mustDelete("rooms/r2"),
		ExpectedStatus: 200, ExpectedContent: []string{`"deleted":true`}, After: expectIDs("r2"),
	},
	{
		Name: "query paging continues exactly", Method: "POST", URL: api + "/query",
		Body:           `{"collection":"rooms/*/messages","orderBy":[{"field":"sender"}],"limit":1}`,
		ExpectedStatus: 200,
		After: func(t testing.TB, env *testEnv, res *response) {
			var all []string
			for page := 0; ; page++ {
				all = append(all, ids(t, res)...)
				next := cursor(t, res)
				if next == "" {
					break
				}
				if page > 10 {
					t.Fatalf("paging does not end")
				}
				res = env.MustDo(t, 200, "POST", api+"/query", `{"collection":"rooms/*/messages","orderBy":[{"field":"sender"}],"limit":1,"startAfter":"`+next+`"}`)
			}
			// alice (m1, m3 by path) then bob (m2); ties break by path.
			if got := strings.Join(all, ","); got != "m1,m3,m2" {
				t.Errorf("pages=%s, want m1,m3,m2", got)
			}
		},
	},
	{
		Name: "query cursor for another orderBy", Method: "POST", URL: api + "/query",
		Body:           `{"collection":"rooms","limit":1,"startAfter":"eyJmIjpbIm4gYXNjIl0sInYiOlt7IngiOjF9XSwicCI6InJvb21zL3IxIn0"}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "query unknown op", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms","filters":[{"field":"n","op":"like","value":1}]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`, `like`},
	},
	{
		Name: "query unknown key", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms","filter":[]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "query wrong value type", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms","filters":[{"field":"n","op":"in","value":1}]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "query invalid JSON", Method: "POST", URL: api + "/query", Body: `{"collection":`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "query not an object", Method: "POST", URL: api + "/query", Body: `["rooms"]`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "query trailing garbage", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms"}x`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "query a document path", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms/r1"}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "query without collection", Method: "POST", URL: api + "/query", Body: `{}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "query without credentials", Method: "POST", URL: api + "/query", Body: `{"collection":"rooms"}`, Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
	{
		Name: "query with GET", Method: "GET", URL: api + "/query",
		ExpectedStatus: http.StatusMethodNotAllowed, ExpectedContent: []string{`"code":"METHOD_NOT_ALLOWED"`},
		ExpectedHeaders: map[string]string{"Allow": "POST"},
	},
}

func TestQuery(t *testing.T) { runScenarios(t, queryScenarios) }
