package server_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/loomdb/loom/server"
)

// rawRequest writes raw bytes to a fresh connection to env and returns the
// status line's code and the connection (the caller closes it).
func rawRequest(t *testing.T, env *testEnv, raw string) (int, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(raw)); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		t.Fatalf("read response: %v", err)
	}
	res.Body.Close()
	return res.StatusCode, conn
}

func randomMethod(n int) string {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

var methodLabelRE = regexp.MustCompile(`loom_http_requests_total\{[^}]*method="([^"]*)"`)

// TestMetrics_LabelsFromFixedSets sends anonymous requests with huge,
// random methods to matched and unmatched routes: /metrics stays small and
// its method labels stay in the fixed set.
func TestMetrics_LabelsFromFixedSets(t *testing.T) {
	env := newEnv(t, server.Config{})
	before := len(env.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body)
	for i := range 40 {
		method := randomMethod(10 << 10)
		path := api + "/documents/notes/n1"
		if i%2 == 1 {
			path = fmt.Sprintf("/no/such/route/%d", i)
		}
		code, conn := rawRequest(t, env, method+" "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		conn.Close()
		if code < 400 {
			t.Fatalf("method %.10s...: status %d", method, code)
		}
	}
	body := env.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body
	// The new series are one "other" method per route and code, not 40
	// labels of 10 KiB.
	if len(body) > before+64<<10 {
		t.Fatalf("/metrics grew from %d to %d bytes", before, len(body))
	}
	allowed := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "OPTIONS": true, "CONNECT": true, "TRACE": true, "other": true}
	seen := map[string]bool{}
	for _, m := range methodLabelRE.FindAllStringSubmatch(string(body), -1) {
		if !allowed[m[1]] {
			t.Fatalf("method label %.40q is not from the fixed set", m[1])
		}
		seen[m[1]] = true
	}
	if !seen["other"] {
		t.Fatalf("no method=\"other\" series after unknown methods; labels %v", seen)
	}
	if strings.Contains(string(body), "/no/such/route") {
		t.Fatal("an unmatched path became a route label")
	}
}

// TestMetrics_RequireKey: with MetricsRequireKey, /metrics needs the admin
// key or a key with the "metrics" role.
func TestMetrics_RequireKey(t *testing.T) {
	env := newAuthEnv(t, server.Config{MetricsRequireKey: true})
	alice := env.signup(t, "alice")
	wantStatus(t, "anonymous", env.Do(t, "GET", "/metrics", "", anon), http.StatusUnauthorized)
	wantStatus(t, "wrong key", env.Do(t, "GET", "/metrics", "", map[string]string{"X-API-Key": "nope"}), http.StatusUnauthorized)
	wantStatus(t, "user", env.Do(t, "GET", "/metrics", "", alice.h()), http.StatusForbidden)
	r := env.Do(t, "GET", "/metrics", "", nil)
	wantStatus(t, "admin key", r, http.StatusOK)
	if !strings.Contains(string(r.Body), "loom_http_requests_total") {
		t.Fatalf("admin scrape has no request metrics:\n%.400s", r.Body)
	}
	k := env.Do(t, "POST", "/admin/v1/keys", `{"name":"scraper","roles":["metrics"]}`, nil)
	wantStatus(t, "create scraper key", k, http.StatusCreated)
	key, _ := k.JSON(t)["key"].(string)
	wantStatus(t, "metrics-role key", env.Do(t, "GET", "/metrics", "", map[string]string{"X-API-Key": key}), http.StatusOK)

	open := newEnv(t, server.Config{})
	wantStatus(t, "default: public", open.Do(t, "GET", "/metrics", "", anon), http.StatusOK)
}
