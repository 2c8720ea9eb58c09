package auth_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/internal/auth"
)

func TestLoadOrCreateSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "jwt.secret")
	first, err := auth.LoadOrCreateSecret(path)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(first) != 32 {
		t.Fatalf("len=%d, want 32", len(first))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode=%v, want 0600", perm)
	}
	second, err := auth.LoadOrCreateSecret(path)
	if err != nil {
		t.Fatalf("re-read: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Error("second call returned a different secret")
	}
	if other, _ := auth.LoadOrCreateSecret(filepath.Join(t.TempDir(), "s")); bytes.Equal(other, first) {
		t.Error("two fresh secrets are equal")
	}
	// No temp files are left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the secret", len(entries))
	}

	// Tokens signed with it survive a "restart".
	st := MustOpenStore(t)
	s1, err := auth.New(context.Background(), st, auth.Config{Secret: first, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	tok := MustSignup(t, s1, "victor")
	s2, err := auth.New(context.Background(), st, auth.Config{Secret: second, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	MustAuthenticate(t, s2, tok.AccessToken)
}

func TestLoadOrCreateSecret_Race(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwt.secret")
	const n = 10
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if got[i], err = auth.LoadOrCreateSecret(path); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range got {
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("call %d got a different secret than call 0", i)
		}
	}
}

func TestLoadOrCreateSecret_Invalid(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadOrCreateSecret(short); err == nil {
		t.Error("short secret file accepted")
	}
	if b, _ := os.ReadFile(short); string(b) != "abc" {
		t.Error("short secret file was overwritten")
	}
	if _, err := auth.LoadOrCreateSecret(dir); err == nil {
		t.Error("a directory accepted as the secret file")
	}
	// An existing secret of any length >= 32 is used as is.
	long := filepath.Join(dir, "long")
	want := bytes.Repeat([]byte("k"), 48)
	if err := os.WriteFile(long, want, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := auth.LoadOrCreateSecret(long); err != nil || !bytes.Equal(got, want) {
		t.Errorf("LoadOrCreateSecret=(%q, %v), want the file's content", got, err)
	}
}
