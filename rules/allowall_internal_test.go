package rules

import "testing"

// The decision cache is on only when no condition reads more of the
// caller than its key holds.
func TestDecisionCacheEnabled(t *testing.T) {
	if !Default().decisions.enabled {
		t.Error("the default rules' decisions are not cached")
	}
	for cond, want := range map[string]bool{
		"request.auth != null && request.auth.uid == r":        true,
		"null != request.auth && 'x' in request.auth.roles":    true,
		"request.auth.username == 'a' && request.op == 'list'": true,
		"request.path != '' && resource.data.x == 1":           true,
		"request.auth.claims.tier == 'gold'":                   false,
		"has(request.auth.claims)":                             false,
		"request.auth == {'uid': 'a'}":                         false,
		"size(request.auth) > 0":                               false,
		"has(request.auth)":                                    false,
		"request['auth'].uid == 'a'":                           false,
		"size(request) > 0":                                    false,
	} {
		s, err := Parse([]byte("[[rule]]\nmatch = \"rooms/{r}\"\nallow = [\"read\"]\nif = \""+cond+"\"\n"), "t")
		if err != nil {
			t.Fatalf("%s: %v", cond, err)
		}
		if s.decisions.enabled != want {
			t.Errorf("%s: cached=%v, want %v", cond, s.decisions.enabled, want)
		}
	}
}
