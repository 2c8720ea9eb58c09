package main_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServe_ExhaustionSettings: the [metrics] and [limits] keys of
// loom.toml reach the server of `loom serve`.
func TestServe_ExhaustionSettings(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(cfg, []byte(`
[metrics]
require_key = true
[limits]
max_request_bytes        = 1048576
max_document_bytes       = 1048576
max_body_bytes_in_flight = 1048576
read_timeout             = "1s"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "e2e-admin-key-0123456789"
	p := startLoom(t, t.TempDir(), "LOOM_ADMIN_KEY="+key, "LOOM_CONFIG="+cfg)

	if code, _ := request(t, "GET", p.url+"/metrics", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("anonymous /metrics: status=%d, want 401", code)
	}
	res, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest("GET", p.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("admin /metrics: status=%d, want 200", res.StatusCode)
	}

	// A body that stops arriving is cut after read_timeout.
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /api/v1/databases/default/documents/notes/n1 HTTP/1.1\r\nHost: loom\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"doc\":", key)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 400") {
		t.Fatalf("stalled body: read %q (%v), want a 400 after the read timeout", buf[:n], err)
	}
}
