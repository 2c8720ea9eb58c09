package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/loomdb/loom/collections"
)

// Service-key limits and defaults.
const (
	MaxServiceKeyName = 64
	maxRoleLength     = 64
	maxRoles          = 32
	fieldName         = "name"
	fieldHash         = "hash"
	serviceUIDPrefix  = "service:"
)

// defaultServiceRoles are given to a service key created without roles
// ("service", the role the default rules give webhook handlers).
var defaultServiceRoles = []string{"service"}

// ErrInvalidServiceKey: a service-key name or role that CreateServiceKey
// refuses.
var ErrInvalidServiceKey = errors.New("auth: invalid service key name or role")

// validKeyName: 1–64 characters of [A-Za-z0-9_.-], not "." or "..". The name
// is a document id.
func validKeyName(name string) bool {
	if name == "" || len(name) > MaxServiceKeyName || name == "." || name == ".." {
		return false
	}
	return collections.ValidateDocPath(docPath(colAPIKeyNames, name)) == nil
}

// validRole: 1–64 printable ASCII characters without spaces.
func validRole(r string) bool {
	if r == "" || len(r) > maxRoleLength {
		return false
	}
	for i := 0; i < len(r); i++ {
		if r[i] <= ' ' || r[i] > '~' {
			return false
		}
	}
	return true
}

// CreateServiceKey creates a service key with the given roles (default
// ["service"]) and returns it. The key is shown only here: the store keeps its
// SHA-256. Names are unique (ErrServiceKeyExists); a key with the "admin"
// role bypasses security rules.
func (s *Service) CreateServiceKey(ctx context.Context, name string, roles []string) (string, error) {
	if !validKeyName(name) {
		return "", fmt.Errorf("%w: name %q: use 1 to %d characters of A-Z a-z 0-9 _ . -", ErrInvalidServiceKey, name, MaxServiceKeyName)
	}
	if len(roles) == 0 {
		roles = defaultServiceRoles
	}
	if len(roles) > maxRoles {
		return "", fmt.Errorf("%w: at most %d roles", ErrInvalidServiceKey, maxRoles)
	}
	for _, r := range roles {
		if !validRole(r) {
			return "", fmt.Errorf("%w: role %q", ErrInvalidServiceKey, r)
		}
	}
	key, hash := newSecretToken(serviceKeyPrefix)
	writes := []collections.Write{
		{Type: collections.WriteCreate, Path: docPath(colAPIKeys, hash), Data: map[string]any{
			fieldName:      name,
			fieldRoles:     toAnySlice(roles),
			fieldCreatedAt: s.now().UnixMilli(),
		}},
		{Type: collections.WriteCreate, Path: docPath(colAPIKeyNames, name), Data: map[string]any{fieldHash: hash}},
	}
	if _, err := s.store.Commit(ctx, s.db, writes, collections.CommitOptions{}); err != nil {
		if errors.Is(err, collections.ErrAlreadyExists) {
			return "", fmt.Errorf("%w: %q", ErrServiceKeyExists, name)
		}
		return "", fmt.Errorf("auth: create service key: %w", err)
	}
	return key, nil
}

// RevokeServiceKey deletes the named service key; it stops authenticating at
// once. An unknown name is an error wrapping collections.ErrNotFound.
func (s *Service) RevokeServiceKey(ctx context.Context, name string) error {
	notFound := fmt.Errorf("auth: service key %q: %w", name, collections.ErrNotFound)
	if !validKeyName(name) {
		return notFound
	}
	namePath := docPath(colAPIKeyNames, name)
	d, err := s.store.Get(ctx, s.db, namePath)
	if errors.Is(err, collections.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return fmt.Errorf("auth: revoke service key: %w", err)
	}
	hash, _ := d.Data[fieldHash].(string)
	writes := []collections.Write{{
		Type:    collections.WriteDelete,
		Path:    namePath,
		IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(d.Version, 10))}},
	}}
	if wellFormedHash(hash) {
		writes = append(writes, collections.Write{Type: collections.WriteDelete, Path: docPath(colAPIKeys, hash)})
	}
	if _, err := s.store.Commit(ctx, s.db, writes, collections.CommitOptions{}); err != nil {
		if isGone(err) { // revoked concurrently
			return notFound
		}
		return fmt.Errorf("auth: revoke service key: %w", err)
	}
	return nil
}

func (s *Service) authenticateServiceKey(ctx context.Context, key string) (*Identity, error) {
	if !wellFormed(key, serviceKeyPrefix) {
		return nil, ErrInvalidToken
	}
	// The lookup is by hash, so comparing the key itself never happens and
	// there is no timing side channel on its content.
	d, err := s.store.Get(ctx, s.db, docPath(colAPIKeys, hashToken(key)))
	if errors.Is(err, collections.ErrNotFound) {
		return nil, fmt.Errorf("%w: unknown or revoked service key", ErrInvalidToken)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: look up service key: %w", err)
	}
	name, _ := d.Data[fieldName].(string)
	roles := stringList(d.Data[fieldRoles])
	if roles == nil {
		roles = []string{}
	}
	return &Identity{UID: serviceUIDPrefix + name, Username: name, Roles: roles, Kind: KindServiceKey}, nil
}

// wellFormedHash: 64 lowercase hex digits.
func wellFormedHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
