package main_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServe_AuthAbuseLimitsFromConfig: loom.toml's [server] trusted_proxies
// and [auth] signup_rate / signup_burst reach the running server — signups
// are limited per client address as X-Forwarded-For from the trusted
// loopback proxy names it — and the hashing gauge is in /metrics.
func TestServe_AuthAbuseLimitsFromConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "loom.toml")
	os.WriteFile(cfg, []byte("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[auth]\nsignup_rate = 1\nsignup_burst = 2\nmax_concurrent_hashes = 1\n"), 0o600)
	p := startLoom(t, t.TempDir(), "LOOM_ADMIN_KEY=k", "LOOM_CONFIG="+cfg)
	signup := func(name, addr string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", p.url+"/auth/v1/signup", strings.NewReader(fmt.Sprintf(`{"username":%q,"password":"correct horse battery"}`, name)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for i := range 2 {
		if code, _ := signup(fmt.Sprintf("alice%d", i), "198.51.100.7"); code != 200 {
			t.Fatalf("signup %d within the burst: status=%d", i, code)
		}
	}
	// At 1 signup a minute the next token is due 60 s after the burst's
	// first one, less the time the burst took (seconds, under a
	// race-built binary): not an exact 60, but far above what a faster
	// rate would give.
	if code, retry := signup("alice2", "198.51.100.7"); code != 429 || !retryWithin(retry, 30, 60) {
		t.Fatalf("signup over the burst: status=%d Retry-After=%q, want 429 and 30 < s <= 60", code, retry)
	}
	if code, _ := signup("bob0", "203.0.113.5"); code != 200 {
		t.Fatalf("signup from another address: status=%d, want 200", code)
	}
	req, _ := http.NewRequest("GET", p.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(body, []byte("loom_auth_password_hashes_in_flight 0")) {
		t.Errorf("/metrics has no loom_auth_password_hashes_in_flight:\n%s", body)
	}
}

func TestServe_BadTrustedProxyRefusesToStart(t *testing.T) {
	mustRefuseToStart(t, "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy.internal\"]\n", "proxy.internal")
}

// retryWithin reports whether the Retry-After value v is a number of
// seconds in (lo, hi].
func retryWithin(v string, lo, hi int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n > lo && n <= hi
}
