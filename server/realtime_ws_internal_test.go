package server

import (
	"testing"

	"github.com/loomdb/loom/access"
)

// A refreshed token keeps the connection's subscriptions unless what the
// rules can see changed: per-token claims (registered and OIDC) do not
// count, roles and other claims do.
func TestSameGrant(t *testing.T) {
	base := func(claims map[string]any, roles ...string) *access.Caller {
		return &access.Caller{Kind: "oidc", UID: "u1", Username: "ann", Roles: roles, Claims: claims}
	}
	old := base(map[string]any{"tenant": "t1", "exp": 1.0, "iat": 1.0, "jti": "a", "at_hash": "x", "nonce": "n1", "sid": "s1", "uti": "u", "rh": "r", "aio": "a1"}, "user")
	for _, tc := range []struct {
		name string
		next *access.Caller
		want bool
	}{
		{"refresh: only per-token claims differ", base(map[string]any{"tenant": "t1", "exp": 2.0, "iat": 2.0, "jti": "b", "at_hash": "y", "nonce": "n2", "sid": "s2", "uti": "v", "rh": "q", "aio": "a2"}, "user"), true},
		{"a custom claim changed", base(map[string]any{"tenant": "t2", "exp": 2.0}, "user"), false},
		{"a custom claim gone", base(map[string]any{"exp": 2.0}, "user"), false},
		{"a role added", base(map[string]any{"tenant": "t1"}, "user", "admin"), false},
		{"another kind", &access.Caller{Kind: "user", UID: "u1", Username: "ann", Roles: []string{"user"}, Claims: map[string]any{"tenant": "t1"}}, false},
	} {
		if got := sameGrant(old, tc.next); got != tc.want {
			t.Errorf("%s: sameGrant = %v, want %v", tc.name, got, tc.want)
		}
	}
}
