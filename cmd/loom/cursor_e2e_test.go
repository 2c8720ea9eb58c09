package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServe_CursorKey: query cursors are sealed with a key generated once
// into the data directory, so a cursor survives a restart; nodes configured
// with the same LOOM_CURSOR_KEY accept each other's cursors, a node with
// another key refuses them, and a short key refuses to start.
func TestServe_CursorKey(t *testing.T) {
	query := func(p *proc, cursor string) (int, string) {
		t.Helper()
		body := map[string]any{"collection": "items", "orderBy": []any{map[string]any{"field": "i"}}, "limit": 1}
		if cursor != "" {
			body["startAfter"] = cursor
		}
		code, out := request(t, "POST", p.url+"/api/v1/databases/default/query", "k", body)
		next, _ := out["nextCursor"].(string)
		return code, next
	}
	seed := func(p *proc) {
		t.Helper()
		for i := range 3 {
			if code, _ := request(t, "POST", p.url+"/api/v1/databases/default/documents/items", "k", map[string]any{"i": i}); code != 201 {
				t.Fatalf("create: status=%d", code)
			}
		}
	}

	data := t.TempDir()
	p := startLoom(t, data, "LOOM_ADMIN_KEY=k", "LOOM_CURSOR_KEY=")
	seed(p)
	_, cursor := query(p, "")
	if fi, err := os.Stat(filepath.Join(data, "cursor.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("data/cursor.key: %v %v, want a 0600 file", fi, err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("loom did not exit after SIGTERM")
	}
	p = startLoom(t, data, "LOOM_ADMIN_KEY=k", "LOOM_CURSOR_KEY=")
	if code, _ := query(p, cursor); code != 200 {
		t.Fatalf("cursor after a restart: status=%d, want 200", code)
	}

	shared := "LOOM_CURSOR_KEY=0123456789abcdef0123456789abcdef-cluster"
	a := startLoom(t, t.TempDir(), "LOOM_ADMIN_KEY=k", shared)
	b := startLoom(t, t.TempDir(), "LOOM_ADMIN_KEY=k", shared)
	c := startLoom(t, t.TempDir(), "LOOM_ADMIN_KEY=k", "LOOM_CURSOR_KEY=")
	for _, n := range []*proc{a, b, c} {
		seed(n)
	}
	_, cursor = query(a, "")
	if code, _ := query(b, cursor); code != 200 {
		t.Fatalf("a node sharing the key: status=%d, want 200", code)
	}
	if code, _ := query(c, cursor); code != 400 {
		t.Fatalf("a node with another key: status=%d, want 400", code)
	}

	cmd := exec.Command(loomBin, "serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "LOOM_ADMIN_KEY=k", "LOOM_CURSOR_KEY=short")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cursor_key") {
		t.Fatalf("a short cursor key: err=%v\n%s", err, out)
	}
}
