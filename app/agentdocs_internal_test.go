package app

import (
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
)

// agentDocs checks the service key on every call, as each HTTP request
// did over the old loopback: once the key is revoked (or replaced by the
// next start's), the in-process path refuses reads, writes and queries
// alike, with the error a rejected key gives (transient for the handlers,
// which then retry the delivery).
func TestAgentDocs_RevokedKeyStopsThem(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	authSvc, err := auth.New(ctx, st, auth.Config{Secret: []byte("0123456789abcdef0123456789abcdef"), BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { authSvc.Close() })
	acc, err := access.New(access.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}

	key, err := agentsKey(ctx, authSvc)
	if err != nil {
		t.Fatal(err)
	}
	docs := agentDocs(acc, authSvc, key)
	const path = "users/u1/chats/c1"
	if _, err := docs.Create(ctx, path, map[string]any{"title": "hi"}); err != nil {
		t.Fatalf("create with the live key: %v", err)
	}

	// The next start replaces the key: the previous one is revoked.
	if _, err := agentsKey(ctx, authSvc); err != nil {
		t.Fatal(err)
	}
	if _, err := docs.Get(ctx, path); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("get with a revoked key: err=%v, want auth.ErrInvalidToken", err)
	}
	if _, err := docs.Update(ctx, path, map[string]any{"title": "x"}, 0); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("update with a revoked key: err=%v, want auth.ErrInvalidToken", err)
	}
	if _, err := docs.Create(ctx, "users/u1/chats/c2", map[string]any{}); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("create with a revoked key: err=%v, want auth.ErrInvalidToken", err)
	}
	if _, err := docs.Query(ctx, collections.Query{Collection: "users/u1/chats"}); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("query with a revoked key: err=%v, want auth.ErrInvalidToken", err)
	}
	if d, err := st.Get(ctx, "default", path); err != nil || d.Version != 1 {
		t.Errorf("stored %+v %v, want the document as the live key left it", d, err)
	}
}
