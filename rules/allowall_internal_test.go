package rules

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

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

// A decision whose key would keep more than maxDecisionKeyBytes is not
// cached: what a caller sends cannot make the cache hold unbounded memory.
func TestDecisionCacheKeyBounded(t *testing.T) {
	s := Default()
	if !s.decisions.enabled {
		t.Fatal("the default rules' decisions are not cached")
	}
	big := strings.Repeat("r", maxDecisionKeyBytes)
	for _, tt := range []struct {
		name string
		auth *Auth
		coll string
	}{
		{"collection", nil, "users/" + big + "/notes"},
		{"uid", &Auth{UID: big}, "users/a/notes"},
		{"roles", &Auth{UID: "a", Roles: []string{big[:maxDecisionKeyBytes/2], big[:maxDecisionKeyBytes/2]}}, "users/a/notes"},
		// The username counts as much as the uid.
		{"username", &Auth{UID: "a", Username: big}, "users/a/notes"},
		// Every role counts its separator: a caller's many empty roles
		// still make a join of maxDecisionKeyBytes NULs.
		{"empty roles", &Auth{UID: "a", Roles: make([]string, maxDecisionKeyBytes)}, "users/a/notes"},
	} {
		if _, ok := s.decisions.key(tt.auth, OpList, tt.coll); ok {
			t.Errorf("%s: a %d-byte key is cached", tt.name, maxDecisionKeyBytes)
		}
		s.AllowsAll(context.Background(), tt.auth, OpList, tt.coll)
	}
	if n := len(s.decisions.m); n != 0 {
		t.Fatalf("the cache holds %d oversized decisions", n)
	}
	if _, ok := s.decisions.key(&Auth{UID: "a", Roles: []string{"x"}}, OpList, "users/a/notes"); !ok {
		t.Fatal("a small key is not cached")
	}
}

// May's cache is on only when, in addition, no condition can read the
// time (May knows it), by any detour.
func TestMayCacheEnabled(t *testing.T) {
	if !Default().mays.enabled {
		t.Error("the default rules' May answers are not cached")
	}
	for cond, want := range map[string]bool{
		"request.auth != null && request.auth.uid == r":                       true,
		"request.op == 'create' && request.path != 'rooms/x'":                 true,
		"request.resource.data.owner == request.auth.uid && resource == null": true,
		"has(request.resource.data.x)":                                        true,
		"request.time > timestamp('2030-01-01T00:00:00Z')":                    false,
		"has(request.time)": false,
		".request.time > timestamp('2030-01-01T00:00:00Z')":                                                 false,
		"[1].all(request, .request.time > timestamp('2030-01-01T00:00:00Z'))":                               false,
		"[request.auth].all(request, request != null) && .request.time > timestamp('2030-01-01T00:00:00Z')": false,
		"dyn(request).time > timestamp('2030-01-01T00:00:00Z')":                                             false,
		"[request][0].time > timestamp('2030-01-01T00:00:00Z')":                                             false,
		"{'x': request}.x.time > timestamp('2030-01-01T00:00:00Z')":                                         false,
		"request['time'] > timestamp('2030-01-01T00:00:00Z')":                                               false,
		"request.exists(k, k == 'time')":                                                                    false,
		"[1].all(x, request.time > timestamp('2030-01-01T00:00:00Z'))":                                      false,
		"request.auth.claims.tier == 'gold'":                                                                false,
		"request.auth != null && request.auth.uid == r && size(request) > 0":                                false,
	} {
		s, err := Parse([]byte("[[rule]]\nmatch = \"rooms/{r}\"\nallow = [\"write\"]\nif = \""+cond+"\"\n"), "t")
		if err != nil {
			t.Fatalf("%s: %v", cond, err)
		}
		if s.mays.enabled != want {
			t.Errorf("%s: cached=%v, want %v", cond, s.mays.enabled, want)
		}
	}
}

// A time-dependent condition changes May's answer over time: with the
// cache off it is evaluated at each call (the rule allows until a moment
// that has passed, then never).
func TestMayNotCachedAcrossTime(t *testing.T) {
	s, err := Parse([]byte("[[rule]]\nmatch = \"rooms/{r}\"\nallow = [\"create\"]\nif = \"request.time < timestamp('2000-01-01T00:00:00Z')\"\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if s.May(nil, "rooms/*", OpCreate) {
		t.Fatal("May allows after the deadline")
	}
	if n := len(s.mays.m); n != 0 {
		t.Fatalf("the May cache holds %d answers of a time-dependent rule", n)
	}
}

// The bound is inclusive: a key of exactly maxDecisionKeyBytes is cached,
// one byte more is not.
func TestDecisionCacheKeyBoundExact(t *testing.T) {
	s := freshDefault(t)
	coll := "users/a/notes"
	uid := strings.Repeat("u", maxDecisionKeyBytes-len(coll))
	if _, ok := s.decisions.key(&Auth{UID: uid}, OpList, coll); !ok {
		t.Errorf("a key of exactly %d bytes is not cached", maxDecisionKeyBytes)
	}
	if _, ok := s.decisions.key(&Auth{UID: uid + "u"}, OpList, coll); ok {
		t.Errorf("a key of %d bytes is cached", maxDecisionKeyBytes+1)
	}
	// A role counts its length and one separator.
	role := strings.Repeat("r", maxDecisionKeyBytes-len(coll)-2)
	if _, ok := s.decisions.key(&Auth{UID: "a", Roles: []string{role}}, OpList, coll); !ok {
		t.Errorf("uid, one role and its separator in exactly %d bytes are not cached", maxDecisionKeyBytes)
	}
	if _, ok := s.decisions.key(&Auth{UID: "a", Roles: []string{role + "r"}}, OpList, coll); ok {
		t.Errorf("uid, one role and its separator in %d bytes are cached", maxDecisionKeyBytes+1)
	}
}

// A role holding a NUL anywhere, even first, is never cached: the roles'
// NUL-joined key would be ambiguous.
func TestDecisionCacheKeyNULRole(t *testing.T) {
	s := freshDefault(t)
	for _, role := range []string{"\x00", "\x00a", "a\x00", "a\x00b"} {
		if _, ok := s.decisions.key(&Auth{UID: "a", Roles: []string{"x", role}}, OpList, "users/a/notes"); ok {
			t.Errorf("role %q: the decision is cached", role)
		}
	}
}

// The cache holds maxDecisions answers and never more: a full cache starts
// over instead of growing with every distinct caller.
func TestDecisionCacheEntriesBounded(t *testing.T) {
	s := freshDefault(t)
	c := &s.decisions
	key := func(i int) decisionKey {
		k, ok := c.key(&Auth{UID: strconv.Itoa(i)}, OpList, "users/a/notes")
		if !ok {
			t.Fatalf("caller %d: not cacheable", i)
		}
		return k
	}
	for i := range maxDecisions {
		c.put(key(i), true)
	}
	if n := len(c.m); n != maxDecisions {
		t.Fatalf("after %d distinct decisions the cache holds %d, want all of them", maxDecisions, n)
	}
	for i := maxDecisions; i < 2*maxDecisions+10; i++ {
		c.put(key(i), true)
		if n := len(c.m); n > maxDecisions {
			t.Fatalf("after %d distinct decisions the cache holds %d > maxDecisions=%d", i+1, n, maxDecisions)
		}
	}
	if _, ok := c.get(key(2*maxDecisions + 9)); !ok {
		t.Fatal("the latest decision is not cached after the cache started over")
	}
}

// freshDefault is the default rules in a Set of their own: Default() is
// shared by the package's tests, and these fill its cache.
func freshDefault(t *testing.T) *Set {
	t.Helper()
	s, err := Parse([]byte(DefaultSource()), "built-in security.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !s.decisions.enabled {
		t.Fatal("the default rules' decisions are not cached")
	}
	return s
}
