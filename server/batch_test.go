package server_test

import (
	"fmt"
	"strings"
	"testing"
)

// unchanged asserts that a failed batch left the seed data as it was.
func unchanged(t testing.TB, env *testEnv, _ *response) {
	t.Helper()
	env.mustGet(t, "rooms/new1", 404)
	if got := env.mustGet(t, "rooms/r1", 200); !strings.Contains(got, `"version":1,`) {
		t.Errorf("rooms/r1=%s, want version 1", got)
	}
}

// failingBatch is a batch whose write at index 2 is bad; writes 0 and 1
// would succeed on their own.
func failingBatch(bad string) string {
	return `{"writes":[
		{"type":"create","path":"rooms/new1","data":{"a":1}},
		{"type":"update","path":"rooms/r1","data":{"b":2}},
		` + bad + `]}`
}

var batchScenarios = []scenario{
	{
		Name: "batch of every write type", Method: "POST", URL: api + "/batch",
		Body: `{"writes":[
			{"type":"create","path":"rooms/new1","data":{"a":1}},
			{"type":"replace","path":"rooms/r2","data":{"b":2},"ifMatch":[{"field":"version","op":"==","value":1}]},
			{"type":"update","path":"users/u1","data":{"profile":{"age":40}}},
			{"type":"delete","path":"rooms/r3"},
			{"type":"replace","path":"rooms/new2","data":{"c":3}}]}`,
		ExpectedStatus: 200,
		ExpectedContent: []string{
			`{"results":[{"id":"new1","collection":"rooms","version":1,`,
			`{"id":"r2","collection":"rooms","version":2,`,
			`"profile":{"age":40,"city":"Oslo"}`,
			`,null,{"id":"new2"`,
		},
		ExpectedChanges: 5,
		After: func(t testing.TB, env *testEnv, _ *response) {
			env.mustGet(t, "rooms/r3", 404)
			env.mustGet(t, "rooms/new1", 200)
		},
	},
	{
		Name: "batch writes the same document twice in order", Method: "POST", URL: api + "/batch",
		Body: `{"writes":[
			{"type":"create","path":"rooms/x","data":{"a":1}},
			{"type":"update","path":"rooms/x","data":{"b":2},"ifMatch":[{"field":"version","op":"==","value":1}]}]}`,
		ExpectedStatus: 200, ExpectedChanges: 2,
		ExpectedContent: []string{`{"id":"x","collection":"rooms","version":2,`, `"a":1,"b":2}`},
	},
	{
		Name: "batch with no writes", Method: "POST", URL: api + "/batch", Body: `{"writes":[]}`,
		ExpectedStatus: 200, ExpectedContent: []string{`{"results":[]}`},
	},
	{
		Name: "batch create over a live document fails whole", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"create","path":"rooms/r2","data":{}}`),
		ExpectedStatus:  409,
		ExpectedContent: []string{`"code":"ALREADY_EXISTS"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch update of an absent document", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"update","path":"rooms/nope","data":{"x":1}}`),
		ExpectedStatus:  404,
		ExpectedContent: []string{`"code":"NOT_FOUND"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch delete of an absent document", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"delete","path":"rooms/nope"}`),
		ExpectedStatus:  404,
		ExpectedContent: []string{`"code":"NOT_FOUND"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch false precondition", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"replace","path":"rooms/r3","data":{},"ifMatch":[{"field":"n","op":"==","value":99}]}`),
		ExpectedStatus:  412,
		ExpectedContent: []string{`"code":"PRECONDITION_FAILED"`, `"current":{"id":"r3"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch document over the size limit", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"replace","path":"rooms/r3","data":{"s":"` + strings.Repeat("x", 1<<20+10) + `"}}`),
		ExpectedStatus:  413,
		ExpectedContent: []string{`"code":"DOCUMENT_TOO_LARGE"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch invalid path", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"delete","path":"rooms"}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"INVALID_PATH"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch system path", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"create","path":"_sys/k","data":{}}`),
		ExpectedStatus:  403,
		ExpectedContent: []string{`"code":"PERMISSION_DENIED"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch unknown type", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"upsert","path":"rooms/r3","data":{}}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
		After:           unchanged,
	},
	{
		Name: "batch write without data", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"replace","path":"rooms/r3"}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch data not an object", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"replace","path":"rooms/r3","data":"x"}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch id mismatch", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"create","path":"rooms/r9","data":{"id":"r8"}}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch depth 33", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"create","path":"rooms/r9","data":` + nested(33) + `}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch unknown op in ifMatch", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"delete","path":"rooms/r3","ifMatch":[{"field":"n","op":"=~","value":1}]}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"INVALID_QUERY"`, `"index":2`},
	},
	{
		Name: "batch write not an object", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`"delete rooms/r3"`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch unknown write field", Method: "POST", URL: api + "/batch",
		Body:            failingBatch(`{"type":"delete","path":"rooms/r3","ifmatch":[]}`),
		ExpectedStatus:  400,
		ExpectedContent: []string{`"code":"BAD_REQUEST"`, `"index":2`},
	},
	{
		Name: "batch writes not a list", Method: "POST", URL: api + "/batch", Body: `{"writes":{}}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "batch without writes", Method: "POST", URL: api + "/batch", Body: `{}`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "batch of 500 writes", Method: "POST", URL: api + "/batch", Body: batchOf(500),
		ExpectedStatus: 200, ExpectedChanges: 500,
	},
	{
		Name: "batch of 501 writes", Method: "POST", URL: api + "/batch", Body: batchOf(501),
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`, `500`},
	},
	{
		Name: "batch invalid JSON", Method: "POST", URL: api + "/batch", Body: `{"writes":[`,
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"INVALID_JSON"`},
	},
	{
		Name: "batch without credentials", Method: "POST", URL: api + "/batch", Body: batchOf(1), Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
}

func batchOf(n int) string {
	var b strings.Builder
	b.WriteString(`{"writes":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"create","path":"bulk/d%d","data":{"i":%d}}`, i, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestBatch(t *testing.T) { runScenarios(t, batchScenarios) }
