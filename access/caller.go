package access

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
)

// Caller is who makes a request: anonymous, the admin key, a user (Loom's
// own access token or an OIDC token) or a service key. Admins — the admin
// key and callers with the "admin" role — bypass security rules.
type Caller struct {
	Admin bool
	// Kind names the credential: KindAnonymous, KindAdminKey, or one of
	// internal/auth's KindUser, KindOIDC and KindServiceKey.
	Kind     string
	UID      string
	Username string
	Roles    []string
	Claims   map[string]any
	// auth is request.auth built once by CallerOfIdentity (nil otherwise:
	// ruleAuth builds it per call). A Caller is not modified once built.
	auth *rules.Auth
}

// Credential kinds of the callers this package builds itself.
const (
	KindAnonymous = "anonymous"
	KindAdminKey  = "admin-key"
)

// Anonymous is the caller who presented no credential. Shared: never
// modify it.
var Anonymous = &Caller{Kind: KindAnonymous}

// AdminKey is the caller who presented the admin key. Shared: never modify
// it.
var AdminKey = &Caller{Admin: true, Kind: KindAdminKey, Username: "admin", Roles: []string{"admin"}}

// CallerOfIdentity turns an authenticated identity into a Caller.
//
// A request checks the rules more than once (before its body is read, then
// each write), so request.auth is built here once rather than per check.
func CallerOfIdentity(id *auth.Identity) *Caller {
	c := &Caller{
		Admin:    slices.Contains(id.Roles, "admin"),
		Kind:     id.Kind,
		UID:      id.UID,
		Username: id.Username,
		Roles:    id.Roles,
		Claims:   id.Claims,
	}
	c.auth = c.newRuleAuth()
	return c
}

// anonymous reports whether the caller presented no credential: a denial
// may then be lifted by authenticating.
func (c *Caller) anonymous() bool { return c == nil || c.Kind == KindAnonymous }

// Expiry is when the caller's credential stops being valid: the exp claim
// of a user or OIDC token; zero for credentials that do not expire (the
// admin key, service keys, anonymous).
func (c *Caller) Expiry() time.Time {
	switch v := c.Claims["exp"].(type) {
	case float64:
		return time.Unix(int64(v), 0)
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return time.Unix(n, 0)
		}
	}
	return time.Time{}
}

// ruleAuth is request.auth for security rules (nil = anonymous).
func (c *Caller) ruleAuth() *rules.Auth {
	if c != nil && c.auth != nil {
		return c.auth
	}
	return c.newRuleAuth()
}

func (c *Caller) newRuleAuth() *rules.Auth {
	if c == nil || c.UID == "" {
		return nil
	}
	return &rules.Auth{UID: c.UID, Username: c.Username, Roles: c.Roles, Claims: c.Claims}
}
