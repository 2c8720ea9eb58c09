package server_test

import (
	"net/http"
	"testing"
)

func closeStore(t testing.TB, env *testEnv) {
	t.Helper()
	if err := env.Store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

var opsScenarios = []scenario{
	{
		Name: "health", Method: "GET", URL: "/health", Anonymous: true,
		ExpectedStatus: 200, ExpectedContent: []string{"OK"},
		ExpectedHeaders: map[string]string{"Content-Type": "text/plain; charset=utf-8"},
	},
	{
		Name: "ready", Method: "GET", URL: "/ready", Anonymous: true,
		ExpectedStatus: 200, ExpectedContent: []string{"OK"},
	},
	{
		Name: "not ready after the store closed", Method: "GET", URL: "/ready", Anonymous: true,
		Before: closeStore, StoreClosed: true,
		ExpectedStatus: 503, ExpectedContent: []string{`"code":"UNAVAILABLE"`},
	},
	{
		Name: "store calls on a closed store are 503", Method: "GET", URL: api + "/documents/rooms/r1",
		Before: closeStore, StoreClosed: true,
		ExpectedStatus: http.StatusServiceUnavailable, ExpectedContent: []string{`"code":"UNAVAILABLE"`},
	},
	{
		Name: "metrics", Method: "GET", URL: "/metrics", Anonymous: true,
		Before: func(t testing.TB, env *testEnv) {
			env.MustDo(t, 200, "GET", api+"/documents/rooms/r1", "")
			env.MustDo(t, 404, "GET", "/nowhere", "")
		},
		ExpectedStatus: 200,
		ExpectedContent: []string{
			`loom_http_requests_total{code="200",method="GET",route="/api/v1/databases/:db/documents/*path"} 1`,
			`loom_http_requests_total{code="201",method="PUT",route="/api/v1/databases/:db/documents/*path"} 7`,
			`loom_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
			`loom_http_request_duration_seconds_bucket{method="GET",route="/api/v1/databases/:db/documents/*path",le="+Inf"} 1`,
			"loom_changefeed_head_seq 7",
			"go_goroutines",
			"process_",
		},
		NotExpectedContent: []string{`rooms/r1`},
	},
}

func TestOps(t *testing.T) { runScenarios(t, opsScenarios) }
