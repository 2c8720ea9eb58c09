package app_test

import (
	"net/http"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/config"
)

// [compat] syntrix and [auth] min_password_length reach the node the
// composition root builds: the SDK's login body with "database"
// (sdk/syntrix-client-ts/src/internal/auth/provider.ts @ 0ecdf490) and an
// 8-character password are accepted, a PUT that creates answers 200, a
// query answers a bare array. Without them, the same requests get Loom's
// answers.
func TestApp_SyntrixCompatWiring(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
			c.Compat.Syntrix = on
			if on {
				c.Auth.MinPasswordLength = 8
			}
		}})
		signup := s.Do(t, "POST", "/auth/v1/signup", `{"username":"sdkuser","password":"12345678","database":"default"}`, apptest.Anonymous)
		put := s.Do(t, "PUT", "/api/v1/databases/default/documents/things/t1", `{"doc":{"a":1}}`, nil)
		query := s.Do(t, "POST", "/api/v1/databases/default/query", `{"collection":"things"}`, nil)
		if on {
			if signup.Status != http.StatusOK || put.Status != http.StatusOK || query.Status != http.StatusOK || len(query.Body) == 0 || query.Body[0] != '[' {
				t.Errorf("compat on: signup %d %s, PUT-create %d, query %d %s", signup.Status, signup.Body, put.Status, query.Status, query.Body)
			}
			continue
		}
		if signup.Status != http.StatusBadRequest || put.Status != http.StatusCreated || query.Status != http.StatusOK || len(query.Body) == 0 || query.Body[0] != '{' {
			t.Errorf("compat off: signup %d %s, PUT-create %d, query %d %s", signup.Status, signup.Body, put.Status, query.Status, query.Body)
		}
	}
}
