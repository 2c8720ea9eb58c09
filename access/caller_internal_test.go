package access

import (
	"reflect"
	"testing"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/rules"
)

// The request.auth a Caller of an identity carries is the one ruleAuth
// would build from its fields, built once; a Caller written as a literal
// (no identity) still gets its own.
func TestCallerRuleAuth(t *testing.T) {
	ids := []*auth.Identity{
		{Kind: auth.KindUser, UID: "u1", Username: "alice", Roles: []string{"user"}, Claims: map[string]any{"exp": 1.0}},
		{Kind: auth.KindServiceKey, UID: "svc", Roles: []string{"service"}},
		{Kind: auth.KindOIDC, UID: "", Username: "nobody"},
	}
	for _, id := range ids {
		c := CallerOfIdentity(id)
		want := (&Caller{UID: id.UID, Username: id.Username, Roles: id.Roles, Claims: id.Claims}).ruleAuth()
		got := c.ruleAuth()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: ruleAuth=%+v, want %+v", id, got, want)
		}
		if got != c.ruleAuth() {
			t.Errorf("%+v: request.auth rebuilt per call", id)
		}
	}
	lit := &Caller{UID: "u2", Roles: []string{"user"}}
	if got, want := lit.ruleAuth(), (&rules.Auth{UID: "u2", Roles: []string{"user"}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("literal caller: ruleAuth=%+v, want %+v", got, want)
	}
	if Anonymous.ruleAuth() != nil || (*Caller)(nil).ruleAuth() != nil {
		t.Fatal("anonymous has a request.auth")
	}
}
