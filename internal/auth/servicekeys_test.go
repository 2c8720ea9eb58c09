package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
)

func TestService_ServiceKeys(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()

	key, err := s.CreateServiceKey(ctx, "webhooks", []string{"service", "reader"})
	if err != nil {
		t.Fatalf("CreateServiceKey: %v", err)
	}
	if !strings.HasPrefix(key, "lk_") {
		t.Errorf("key=%q, want an lk_ prefix", key)
	}
	for _, bearer := range []string{key, "Bearer " + key} {
		id := MustAuthenticate(t, s, bearer)
		if id.Kind != auth.KindServiceKey || id.UID != "service:webhooks" || !slices.Equal(id.Roles, []string{"service", "reader"}) {
			t.Errorf("identity=%+v, want service-key service:webhooks [service reader]", id)
		}
	}

	def, err := s.CreateServiceKey(ctx, "default-roles", nil)
	if err != nil {
		t.Fatalf("CreateServiceKey: %v", err)
	}
	if id := MustAuthenticate(t, s, def); !slices.Equal(id.Roles, []string{"service"}) {
		t.Errorf("roles=%v, want the default [service]", id.Roles)
	}

	// Stored hashed: the raw key appears in no stored document, and the
	// key document's id is its SHA-256.
	sum := sha256.Sum256([]byte(key))
	wantID := hex.EncodeToString(sum[:])
	found := false
	for _, coll := range []string{"_api_keys", "_api_key_names"} {
		for _, d := range allDocs(t, st, coll) {
			b, err := d.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), key) || strings.Contains(string(b), key[3:]) {
				t.Errorf("%s contains the raw key: %s", d.Path, b)
			}
			if d.ID == wantID {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no _api_keys document with id sha256(key)=%s", wantID)
	}

	if _, err := s.CreateServiceKey(ctx, "webhooks", nil); !errors.Is(err, auth.ErrServiceKeyExists) {
		t.Errorf("duplicate name err=%v, want ErrServiceKeyExists", err)
	}
	for _, tc := range []struct {
		name  string
		roles []string
	}{
		{"", nil}, {"..", nil}, {"a/b", nil}, {"has space", nil}, {strings.Repeat("n", 65), nil},
		{"bad-role", []string{""}}, {"bad-role", []string{"two words"}},
	} {
		if _, err := s.CreateServiceKey(ctx, tc.name, tc.roles); !errors.Is(err, auth.ErrInvalidServiceKey) {
			t.Errorf("CreateServiceKey(%q, %q) err=%v, want ErrInvalidServiceKey", tc.name, tc.roles, err)
		}
	}

	if err := s.RevokeServiceKey(ctx, "webhooks"); err != nil {
		t.Fatalf("RevokeServiceKey: %v", err)
	}
	expectInvalidToken(t, s, "revoked key", key)
	MustAuthenticate(t, s, def) // other keys unaffected
	if err := s.RevokeServiceKey(ctx, "webhooks"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("second revoke err=%v, want ErrNotFound", err)
	}
	if err := s.RevokeServiceKey(ctx, "a/b"); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("revoke of an invalid name err=%v, want ErrNotFound", err)
	}
	// The name is free again.
	again, err := s.CreateServiceKey(ctx, "webhooks", nil)
	if err != nil {
		t.Fatalf("CreateServiceKey after revoke: %v", err)
	}
	if again == key {
		t.Fatal("a new key equals the revoked one")
	}
	MustAuthenticate(t, s, again)

	// Well-formed but unknown keys and near misses.
	for name, bearer := range map[string]string{
		"unknown":        "lk_" + strings.Repeat("A", 43),
		"one char off":   again[:len(again)-1] + flip(again[len(again)-1]),
		"too long":       again + "A",
		"prefix only":    "lk_",
		"wrong prefix":   "lr_" + again[3:],
		"lowercase pref": "LK_" + again[3:],
	} {
		expectInvalidToken(t, s, name, bearer)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
