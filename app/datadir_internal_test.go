package app

import (
	"os"
	"path/filepath"
	"testing"
)

// The node id and the webhook secret are generated once and read back on
// every later start; a blank file (a crash before the write) is replaced.
func TestLoadOrCreateText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.id")
	n := 0
	gen := func() string { n++; return "v" + string(rune('0'+n)) }
	for range 2 {
		if got, err := loadOrCreateText(path, gen); err != nil || got != "v1" {
			t.Fatalf("got %q, %v; want v1", got, err)
		}
	}
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := loadOrCreateText(path, gen); err != nil || got != "v2" {
		t.Fatalf("blank file: got %q, %v; want v2", got, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "v2\n" {
		t.Errorf("file=%q", b)
	}
	if _, err := loadOrCreateText(filepath.Join(path, "under-a-file"), gen); err == nil {
		t.Error("unreadable path: no error")
	}
}
