package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// nested returns a document body nesting objects depth levels deep in total
// (the document object itself is level 1).
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{"leaf":1}` + strings.Repeat(`}`, depth-1)
}

// mustSystemDoc writes a system document directly through the engine (the
// document API refuses system writes by design).
func mustSystemDoc(t testing.TB, env *testEnv, path string) {
	t.Helper()
	_, err := env.Store.Commit(context.Background(), "default", []collections.Write{
		{Type: collections.WriteCreate, Path: path, Data: map[string]any{"secret": "s"}},
	}, collections.CommitOptions{})
	if err != nil {
		t.Fatalf("seed system doc: %v", err)
	}
}

func mustDelete(path string) func(testing.TB, *testEnv) {
	return func(t testing.TB, env *testEnv) {
		t.Helper()
		env.MustDo(t, http.StatusNoContent, "DELETE", api+"/documents/"+path, "")
	}
}

var getScenarios = []scenario{
	{
		Name: "get document", Method: "GET", URL: api + "/documents/rooms/r1",
		ExpectedStatus:     200,
		ExpectedContent:    []string{`{"id":"r1","collection":"rooms","version":1,"createdAt":`, `"name":"general"`, `"tags":["a","b"]`},
		ExpectedHeaders:    map[string]string{"ETag": `"1"`, "Content-Type": "application/json; charset=utf-8"},
		NotExpectedContent: []string{`"deleted"`},
	},
	{
		Name: "get keeps integer precision", Method: "GET", URL: api + "/documents/rooms/r1",
		ExpectedStatus:  200,
		ExpectedContent: []string{`"big":9007199254740993`},
	},
	{
		Name: "get nested document", Method: "GET", URL: api + "/documents/rooms/r1/messages/m1",
		ExpectedStatus:  200,
		ExpectedContent: []string{`"id":"m1","collection":"rooms/r1/messages"`, `"sender":"alice"`},
	},
	{
		Name: "get missing", Method: "GET", URL: api + "/documents/rooms/nope",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "get deleted is 404", Method: "GET", URL: api + "/documents/rooms/r2",
		Before:         mustDelete("rooms/r2"),
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "get invalid segment", Method: "GET", URL: api + "/documents/rooms/r$1",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "get dot-dot segment", Method: "GET", URL: api + "/documents/rooms/..",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "get trailing slash", Method: "GET", URL: api + "/documents/rooms/r1/",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "get empty path", Method: "GET", URL: api + "/documents/",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "get id over 128 bytes", Method: "GET", URL: api + "/documents/rooms/" + strings.Repeat("x", 129),
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "get system document as admin", Method: "GET", URL: api + "/documents/_sys/k1",
		Before:          func(t testing.TB, env *testEnv) { mustSystemDoc(t, env, "_sys/k1") },
		ExpectedStatus:  200,
		ExpectedContent: []string{`"id":"k1","collection":"_sys"`},
	},
	{
		Name: "other database is separate", Method: "GET", URL: "/api/v1/databases/other/documents/rooms/r1",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
}

func TestDocuments_Get(t *testing.T) { runScenarios(t, getScenarios) }

var createScenarios = []scenario{
	{
		Name: "create with id", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":"r9","name":"new"}`,
		ExpectedStatus:  201,
		ExpectedContent: []string{`{"id":"r9","collection":"rooms","version":1,`, `"name":"new"}`},
		ExpectedHeaders: map[string]string{"ETag": `"1"`, "Location": api + "/documents/rooms/r9"},
		ExpectedChanges: 1,
		After: func(t testing.TB, env *testEnv, _ *response) {
			if got := env.mustGet(t, "rooms/r9", 200); !strings.Contains(got, `"name":"new"`) {
				t.Errorf("stored=%s, want name new", got)
			}
		},
	},
	{
		Name: "create generates a UUIDv7 id", Method: "POST", URL: api + "/documents/rooms/r1/messages", Body: `{"text":"x"}`,
		ExpectedStatus:  201,
		ExpectedContent: []string{`"collection":"rooms/r1/messages"`},
		ExpectedChanges: 1,
		After: func(t testing.TB, env *testEnv, res *response) {
			id, _ := res.JSON(t)["id"].(string)
			if len(id) != 36 || id[14] != '7' {
				t.Errorf("id=%q, want a UUIDv7", id)
			}
			if loc := res.Header.Get("Location"); loc != api+"/documents/rooms/r1/messages/"+id {
				t.Errorf("Location=%q, want the new document", loc)
			}
		},
	},
	{
		Name: "create with null id generates one", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":null,"a":1}`,
		ExpectedStatus: 201, ExpectedChanges: 1, NotExpectedContent: []string{`"id":null`},
	},
	{
		Name: "create ignores envelope fields", Method: "POST", URL: api + "/documents/rooms",
		Body:               `{"id":"e1","collection":"evil","version":99,"createdAt":1,"updatedAt":2,"deleted":true,"a":1}`,
		ExpectedStatus:     201,
		ExpectedContent:    []string{`{"id":"e1","collection":"rooms","version":1,`, `"a":1}`},
		NotExpectedContent: []string{`"deleted"`, `"createdAt":1,`, `"updatedAt":2,`, `evil`},
		ExpectedChanges:    1,
	},
	{
		Name: "create keeps number precision", Method: "POST", URL: api + "/documents/nums",
		Body:            `{"id":"n1","big":9007199254740993,"min":-9223372036854775808,"huge":123456789012345678901234567890,"f":1.5e300,"z":0.1}`,
		ExpectedStatus:  201,
		ExpectedContent: []string{`"big":9007199254740993`, `"min":-9223372036854775808`, `"huge":123456789012345678901234567890`, `"f":1.5e300`, `"z":0.1`},
		ExpectedChanges: 1,
		After: func(t testing.TB, env *testEnv, _ *response) {
			if got := env.mustGet(t, "nums/n1", 200); !strings.Contains(got, `"big":9007199254740993`) || !strings.Contains(got, `"huge":123456789012345678901234567890`) {
				t.Errorf("stored=%s, want exact numbers", got)
			}
		},
	},
	{
		Name: "create depth 32 is fine", Method: "POST", URL: api + "/documents/deep", Body: nested(collections.MaxDepth),
		ExpectedStatus: 201, ExpectedChanges: 1,
	},
	{
		Name: "create depth 33", Method: "POST", URL: api + "/documents/deep", Body: nested(collections.MaxDepth + 1),
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, `32`},
	},
	{
		Name: "create over a live document", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":"r1"}`,
		ExpectedStatus: 409, ExpectedContent: []string{`"code":"ALREADY_EXISTS"`},
		After: func(t testing.TB, env *testEnv, _ *response) {
			if got := env.mustGet(t, "rooms/r1", 200); !strings.Contains(got, `"version":1,`) {
				t.Errorf("stored=%s, want untouched", got)
			}
		},
	},
	{
		Name: "create over a tombstone continues the version", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":"r2","again":true}`,
		Before:          mustDelete("rooms/r2"),
		ExpectedStatus:  201,
		ExpectedContent: []string{`"id":"r2","collection":"rooms","version":3,`},
		ExpectedHeaders: map[string]string{"ETag": `"3"`},
		ExpectedChanges: 1,
	},
	{
		Name: "create with numeric id", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":7}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "create with id that is not a segment", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":"a/b"}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "create on a document path", Method: "POST", URL: api + "/documents/rooms/r5", Body: `{"a":1}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "create invalid JSON", Method: "POST", URL: api + "/documents/rooms", Body: `{"a":`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "create non-object", Method: "POST", URL: api + "/documents/rooms", Body: `[1,2]`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "create null body", Method: "POST", URL: api + "/documents/rooms", Body: `null`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "create trailing garbage", Method: "POST", URL: api + "/documents/rooms", Body: `{"a":1} {"b":2}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "create empty body", Method: "POST", URL: api + "/documents/rooms",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "create in a system collection", Method: "POST", URL: api + "/documents/_users", Body: `{"id":"u1"}`,
		ExpectedStatus: 403, ExpectedContent: []string{`"code":"PERMISSION_DENIED"`},
	},
	{
		Name: "create document over the size limit", Method: "POST", URL: api + "/documents/rooms",
		Body:           `{"id":"fat","s":"` + strings.Repeat("x", 1<<20+10) + `"}`,
		ExpectedStatus: 413, ExpectedContent: []string{`"code":"DOCUMENT_TOO_LARGE"`},
	},
	{
		Name: "create without credentials", Method: "POST", URL: api + "/documents/rooms", Body: `{"id":"x"}`, Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
}

func TestDocuments_Create(t *testing.T) { runScenarios(t, createScenarios) }

var replaceScenarios = []scenario{
	{
		Name: "replace existing", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"name":"renamed"}}`,
		ExpectedStatus:     200,
		ExpectedContent:    []string{`{"id":"r1","collection":"rooms","version":2,`, `"name":"renamed"}`},
		NotExpectedContent: []string{`"tags"`, `"big"`},
		ExpectedHeaders:    map[string]string{"ETag": `"2"`},
		ExpectedChanges:    1,
	},
	{
		Name: "replace absent creates", Method: "PUT", URL: api + "/documents/rooms/r7", Body: `{"doc":{"name":"seven"}}`,
		ExpectedStatus:  201,
		ExpectedContent: []string{`"id":"r7","collection":"rooms","version":1,`},
		ExpectedHeaders: map[string]string{"Location": api + "/documents/rooms/r7", "ETag": `"1"`},
		ExpectedChanges: 1,
	},
	{
		Name: "replace with matching id field", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"id":"r1","x":1}}`,
		ExpectedStatus: 200, ExpectedChanges: 1, ExpectedContent: []string{`"id":"r1"`, `"x":1}`},
	},
	{
		Name: "replace with mismatched id field", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"id":"r2","x":1}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, `id`},
	},
	{
		Name: "replace ignores envelope fields", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"version":50,"collection":"x","deleted":true,"y":2}}`,
		ExpectedStatus: 200, ExpectedChanges: 1,
		ExpectedContent:    []string{`"collection":"rooms","version":2,`},
		NotExpectedContent: []string{`"deleted"`, `"version":50`},
	},
	{
		Name: "replace with ifMatch on version", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{"a":1},"ifMatch":[{"field":"version","op":"==","value":1}]}`,
		ExpectedStatus: 200, ExpectedChanges: 1, ExpectedContent: []string{`"version":2`},
	},
	{
		Name: "replace with ifMatch on a user field", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{"a":1},"ifMatch":[{"field":"name","op":"==","value":"general"},{"field":"n","op":"<","value":5}]}`,
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "replace with a false ifMatch", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:            `{"doc":{"a":1},"ifMatch":[{"field":"version","op":"==","value":5}]}`,
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"details":{"current":{"id":"r1","collection":"rooms","version":1,`, `"big":9007199254740993`},
	},
	{
		Name: "replace absent with ifMatch", Method: "PUT", URL: api + "/documents/rooms/r8",
		Body:            `{"doc":{"a":1},"ifMatch":[{"field":"version","op":"==","value":1}]}`,
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"details":{"current":null}`},
		After:           func(t testing.TB, env *testEnv, _ *response) { env.mustGet(t, "rooms/r8", 404) },
	},
	{
		Name: "replace with If-Match header", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `"1"`},
		ExpectedStatus: 200, ExpectedChanges: 1, ExpectedHeaders: map[string]string{"ETag": `"2"`},
	},
	{
		Name: "replace with weak If-Match header", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `W/"1"`},
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "replace with unquoted If-Match header", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `1`},
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "replace with an If-Match list", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `"4", "1"`},
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "replace with stale If-Match header", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:         map[string]string{"If-Match": `"7"`},
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"current":{"id":"r1"`},
	},
	{
		Name: "replace with If-Match * on a live document", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `*`},
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "replace with If-Match * on an absent document", Method: "PUT", URL: api + "/documents/rooms/r8", Body: `{"doc":{"a":1}}`,
		Headers:         map[string]string{"If-Match": `*`},
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"current":null`},
	},
	{
		Name: "replace with If-Match header and body ifMatch both checked", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{"a":1},"ifMatch":[{"field":"name","op":"==","value":"other"}]}`,
		Headers:        map[string]string{"If-Match": `"1"`},
		ExpectedStatus: 412, ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`},
	},
	{
		Name: "replace with a malformed If-Match header", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:        map[string]string{"If-Match": `"abc"`},
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace without the doc wrapper", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"name":"x"}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace with doc not an object", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":[1]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace with doc null", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":null}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace with ifMatch not a list", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{},"ifMatch":{"field":"version"}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace with ifMatch entries not objects", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{},"ifMatch":[1]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace with an unknown ifMatch op", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{},"ifMatch":[{"field":"version","op":"~=","value":1}]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_QUERY"`},
	},
	{
		Name: "replace with a misspelt ifMatch key", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{},"ifmatch":[{"field":"version","op":"==","value":9}]}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, `ifmatch`},
	},
	{
		Name: "replace depth 33", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":` + nested(33) + `}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "replace invalid JSON", Method: "PUT", URL: api + "/documents/rooms/r1", Body: `{"doc":{}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "replace on a collection path", Method: "PUT", URL: api + "/documents/rooms", Body: `{"doc":{}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
	{
		Name: "replace in a system collection", Method: "PUT", URL: api + "/documents/_sys/k", Body: `{"doc":{}}`,
		ExpectedStatus: 403, ExpectedContent: []string{`"code":"PERMISSION_DENIED"`},
	},
	{
		Name: "replace over the size limit", Method: "PUT", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{"s":"` + strings.Repeat("x", 1<<20+10) + `"}}`,
		ExpectedStatus: 413, ExpectedContent: []string{`"code":"DOCUMENT_TOO_LARGE"`},
	},
}

func TestDocuments_Replace(t *testing.T) { runScenarios(t, replaceScenarios) }

var updateScenarios = []scenario{
	{
		Name: "update deep-merges", Method: "PATCH", URL: api + "/documents/users/u1", Body: `{"doc":{"profile":{"age":31}}}`,
		ExpectedStatus:  200,
		ExpectedContent: []string{`"version":2,`, `"profile":{"age":31,"city":"Oslo"}`, `"name":"Ann"`},
		ExpectedChanges: 1,
	},
	{
		Name: "update removes nulls and sets dotted keys", Method: "PATCH", URL: api + "/documents/rooms/r1",
		Body:               `{"doc":{"tags":null,"meta.owner":"ann","name":"g2"}}`,
		ExpectedStatus:     200,
		ExpectedContent:    []string{`"meta":{"owner":"ann"}`, `"name":"g2"`, `"big":9007199254740993`},
		NotExpectedContent: []string{`"tags"`},
		ExpectedChanges:    1,
	},
	{
		Name: "update ignores envelope fields", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"doc":{"version":100,"createdAt":5}}`,
		ExpectedStatus: 200, ExpectedChanges: 1,
		ExpectedContent:    []string{`"version":2,`},
		NotExpectedContent: []string{`"version":100`, `"createdAt":5,`},
	},
	{
		Name: "update absent", Method: "PATCH", URL: api + "/documents/rooms/nope", Body: `{"doc":{"a":1}}`,
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
		After: func(t testing.TB, env *testEnv, _ *response) { env.mustGet(t, "rooms/nope", 404) },
	},
	{
		Name: "update a tombstone", Method: "PATCH", URL: api + "/documents/rooms/r2", Body: `{"doc":{"a":1}}`,
		Before:         mustDelete("rooms/r2"),
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "update with stale If-Match", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a":1}}`,
		Headers:         map[string]string{"If-Match": `"2"`},
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"current":{"id":"r1"`},
	},
	{
		Name: "update with matching ifMatch", Method: "PATCH", URL: api + "/documents/rooms/r1",
		Body:           `{"doc":{"a":1},"ifMatch":[{"field":"tags","op":"array-contains","value":"a"}]}`,
		ExpectedStatus: 200, ExpectedChanges: 1,
	},
	{
		Name: "update with mismatched id", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"doc":{"id":"zz"}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "update with an empty dotted segment", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"doc":{"a..b":1}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "update without the doc wrapper", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"a":1}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "update in a system collection", Method: "PATCH", URL: api + "/documents/_sys/k1", Body: `{"doc":{"a":1}}`,
		Before:         func(t testing.TB, env *testEnv) { mustSystemDoc(t, env, "_sys/k1") },
		ExpectedStatus: 403, ExpectedContent: []string{`"code":"PERMISSION_DENIED"`},
	},
	{
		Name: "update trailing garbage", Method: "PATCH", URL: api + "/documents/rooms/r1", Body: `{"doc":{}}]`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
}

func TestDocuments_Update(t *testing.T) { runScenarios(t, updateScenarios) }

var deleteScenarios = []scenario{
	{
		Name: "delete", Method: "DELETE", URL: api + "/documents/rooms/r1",
		ExpectedStatus: 204, ExpectedChanges: 1,
		After: func(t testing.TB, env *testEnv, res *response) {
			if len(res.Body) != 0 {
				t.Errorf("body=%q, want empty", res.Body)
			}
			env.mustGet(t, "rooms/r1", 404)
		},
	},
	{
		Name: "delete absent", Method: "DELETE", URL: api + "/documents/rooms/nope",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "delete twice", Method: "DELETE", URL: api + "/documents/rooms/r1",
		Before:         mustDelete("rooms/r1"),
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "delete with a matching ifMatch body", Method: "DELETE", URL: api + "/documents/rooms/r1",
		Body:           `{"ifMatch":[{"field":"version","op":"==","value":1}]}`,
		ExpectedStatus: 204, ExpectedChanges: 1,
	},
	{
		Name: "delete with a false ifMatch body", Method: "DELETE", URL: api + "/documents/rooms/r1",
		Body:            `{"ifMatch":[{"field":"version","op":">","value":1}]}`,
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"current":{"id":"r1"`},
		After:           func(t testing.TB, env *testEnv, _ *response) { env.mustGet(t, "rooms/r1", 200) },
	},
	{
		Name: "delete with If-Match header", Method: "DELETE", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"If-Match": `"1"`},
		ExpectedStatus: 204, ExpectedChanges: 1,
	},
	{
		Name: "delete with stale If-Match header", Method: "DELETE", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"If-Match": `"3"`},
		ExpectedStatus: 412, ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`},
	},
	{
		Name: "delete with invalid JSON body", Method: "DELETE", URL: api + "/documents/rooms/r1", Body: `{`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "delete with a doc in the body", Method: "DELETE", URL: api + "/documents/rooms/r1", Body: `{"doc":{}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "delete in a system collection", Method: "DELETE", URL: api + "/documents/_sys/k1",
		Before:         func(t testing.TB, env *testEnv) { mustSystemDoc(t, env, "_sys/k1") },
		ExpectedStatus: 403, ExpectedContent: []string{`"code":"PERMISSION_DENIED"`},
		After: func(t testing.TB, env *testEnv, _ *response) { env.mustGet(t, "_sys/k1", 200) },
	},
	{
		Name: "delete a collection path", Method: "DELETE", URL: api + "/documents/rooms",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_PATH"`},
	},
}

func TestDocuments_Delete(t *testing.T) { runScenarios(t, deleteScenarios) }
