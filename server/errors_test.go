package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loomdb/loom/server"
)

var errorScenarios = []scenario{
	{
		Name: "unknown route", Method: "GET", URL: "/api/v2/nothing",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "unknown route under a database", Method: "GET", URL: api + "/collections",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "documents root without slash", Method: "GET", URL: api + "/documents",
		ExpectedStatus: 404, ExpectedContent: []string{`"code":"NOT_FOUND"`},
	},
	{
		Name: "wrong method", Method: "DELETE", URL: api + "/batch",
		ExpectedStatus: 405, ExpectedContent: []string{`"code":"METHOD_NOT_ALLOWED"`},
	},
	{
		Name: "no credentials", Method: "GET", URL: api + "/documents/rooms/r1", Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
	{
		Name: "wrong bearer key", Method: "GET", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"Authorization": "Bearer nope"},
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
	{
		Name: "wrong X-API-Key", Method: "GET", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"X-API-Key": testAdminKey + "x"},
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
	{
		Name: "other auth scheme", Method: "GET", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"Authorization": "Basic " + testAdminKey},
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
	},
	{
		Name: "X-API-Key", Method: "GET", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"X-API-Key": testAdminKey},
		ExpectedStatus: 200,
	},
	{
		Name: "lower-case bearer", Method: "GET", URL: api + "/documents/rooms/r1",
		Headers:        map[string]string{"Authorization": "bearer " + testAdminKey},
		ExpectedStatus: 200,
	},
	{
		Name: "unauthenticated write changes nothing", Method: "DELETE", URL: api + "/documents/rooms/r1", Anonymous: true,
		ExpectedStatus: 401, ExpectedContent: []string{`"code":"UNAUTHENTICATED"`},
		After: func(t testing.TB, env *testEnv, _ *response) { env.mustGet(t, "rooms/r1", 200) },
	},
	{
		Name: "invalid database name", Method: "GET", URL: "/api/v1/databases/bad.name/documents/rooms/r1",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "database name too long", Method: "GET", URL: "/api/v1/databases/" + strings.Repeat("d", 65) + "/documents/rooms/r1",
		ExpectedStatus: 400, ExpectedContent: []string{`"code":"BAD_REQUEST"`},
	},
	{
		Name: "body over the request limit", Method: "POST", URL: api + "/documents/rooms",
		Config:         server.Config{MaxRequestBytes: 1024},
		Body:           `{"s":"` + strings.Repeat("x", 4096) + `"}`,
		ExpectedStatus: 413, ExpectedContent: []string{`"code":"REQUEST_TOO_LARGE"`},
	},
	{
		Name: "body at the request limit", Method: "POST", URL: api + "/documents/rooms",
		Config:         server.Config{MaxRequestBytes: 1024},
		Body:           `{"s":"` + strings.Repeat("x", 1024-8) + `"}`,
		ExpectedStatus: 201, ExpectedChanges: 1,
	},
	{
		Name: "request id is echoed", Method: "GET", URL: "/health",
		Headers:         map[string]string{"X-Request-ID": "abc-123"},
		ExpectedStatus:  200,
		ExpectedHeaders: map[string]string{"X-Request-ID": "abc-123"},
	},
	{
		Name: "request id is generated", Method: "GET", URL: "/nowhere",
		ExpectedStatus: 404,
		After: func(t testing.TB, _ *testEnv, res *response) {
			if res.Header.Get("X-Request-ID") == "" {
				t.Errorf("X-Request-ID missing")
			}
		},
	},
}

func TestErrors(t *testing.T) { runScenarios(t, errorScenarios) }

// TestServer_ChunkedBodyOverLimit sends a body without Content-Length, so the
// limit is enforced while reading, not from the header.
func TestServer_ChunkedBodyOverLimit(t *testing.T) {
	t.Parallel()
	env := MustStartServer(t, MustOpenStore(t), server.Config{MaxRequestBytes: 1024})
	before := env.Head(t)
	body := io.MultiReader(strings.NewReader(`{"s":"`), strings.NewReader(strings.Repeat("x", 8192)), strings.NewReader(`"}`))
	req, err := http.NewRequest("POST", env.URL+api+"/documents/rooms", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	res, err := env.Client.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if req.ContentLength != -1 && req.ContentLength != 0 {
		t.Fatalf("ContentLength=%d, want a chunked request", req.ContentLength)
	}
	if res.StatusCode != 413 || !strings.Contains(string(b), `"code":"REQUEST_TOO_LARGE"`) {
		t.Errorf("status=%d body=%s, want 413 REQUEST_TOO_LARGE", res.StatusCode, b)
	}
	if got := env.Head(t); got != before {
		t.Errorf("head=%d, want %d (nothing written)", got, before)
	}
}

func TestNew_Errors(t *testing.T) {
	t.Parallel()
	st := MustOpenStore(t)
	if _, err := server.New(st, server.Config{}); err == nil {
		t.Errorf("New without admin key: err=nil, want an error")
	}
	if _, err := server.New(nil, server.Config{AdminKey: "k"}); err == nil {
		t.Errorf("New without store: err=nil, want an error")
	}
}
