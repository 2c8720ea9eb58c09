package app

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
)

// What a node remembers across restarts in its data directory, beside the
// engine's files.
const (
	// AdminKeyFile holds the SHA-256 of the generated admin key.
	AdminKeyFile      = "admin.key"
	jwtSecretFile     = "jwt.secret"
	cursorKeyFile     = "cursor.key"
	webhookSecretFile = "webhook.secret"
	nodeIDFile        = "node.id"
)

// adminKey is the admin credential as the server needs it.
type adminKey struct {
	hash      [32]byte
	generated string // the new key, only on the first start
}

// loadAdminKey returns the admin API key: LOOM_ADMIN_KEY / [auth] admin_key
// when set, else the key generated on first start. Only the key's SHA-256 is
// written to the data directory (keys are never stored in clear), so the
// key is printed once and cannot be read back; deleting the file makes the
// next start generate a new one.
func loadAdminKey(cfg config.Config) (adminKey, error) {
	if cfg.Auth.AdminKey != "" {
		return adminKey{hash: sha256.Sum256([]byte(cfg.Auth.AdminKey))}, nil
	}
	path := filepath.Join(cfg.Data, AdminKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		return parseAdminKeyFile(path, b)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	key := "loom_admin_" + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(key))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	_, werr := fmt.Fprintf(f, "%s%s\n", adminKeyHashPrefix, hex.EncodeToString(sum[:]))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return adminKey{}, fmt.Errorf("admin key: %w", err)
	}
	return adminKey{hash: sum, generated: key}, nil
}

const adminKeyHashPrefix = "sha256:"

func parseAdminKeyFile(path string, b []byte) (adminKey, error) {
	line := strings.TrimSpace(string(b))
	hexSum, ok := strings.CutPrefix(line, adminKeyHashPrefix)
	raw, err := hex.DecodeString(hexSum)
	if !ok || err != nil || len(raw) != sha256.Size {
		return adminKey{}, fmt.Errorf("admin key: %s is not a %s<hex> key hash; delete it to generate a new key", path, adminKeyHashPrefix)
	}
	var k adminKey
	copy(k.hash[:], raw)
	return k, nil
}

// loadCursorKey returns the key that seals query cursors: [security]
// cursor_key / LOOM_CURSOR_KEY, else one generated once into the data
// directory (so cursors survive a restart).
func loadCursorKey(cfg config.Config) ([]byte, error) {
	if cfg.Security.CursorKey != "" {
		return []byte(cfg.Security.CursorKey), nil
	}
	key, err := auth.LoadOrCreateSecret(filepath.Join(cfg.Data, cursorKeyFile))
	if err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	return key, nil
}

// loadWebhookSecret returns LOOM_WEBHOOK_SECRET, or the secret kept in the
// data directory (generated on first start). It signs the built-in
// triggers' deliveries and the handlers verify it.
func loadWebhookSecret(cfg config.Config) (string, error) {
	if cfg.WebhookSecret != "" {
		return cfg.WebhookSecret, nil
	}
	s, err := loadOrCreateText(filepath.Join(cfg.Data, webhookSecretFile), triggers.NewSecret)
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return s, nil
}

// loadNodeID returns this node's id for delivery leases, kept in the data
// directory so a restarted node takes its own leases back at once.
func loadNodeID(dir string) (string, error) {
	id, err := loadOrCreateText(filepath.Join(dir, nodeIDFile), func() string {
		raw := make([]byte, 8)
		rand.Read(raw) // never fails (crypto/rand crashes the program instead)
		return "node-" + hex.EncodeToString(raw)
	})
	if err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return id, nil
}

// loadOrCreateText returns the trimmed text of the file at path, or, when
// the file is absent or blank, a new value from gen written there first
// (mode 0600). It keeps what the data directory must remember across
// restarts as text: the node id and the webhook secret. (Binary keys use
// auth.LoadOrCreateSecret.)
func loadOrCreateText(path string, gen func() string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	s := gen()
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", err
	}
	return s, nil
}
