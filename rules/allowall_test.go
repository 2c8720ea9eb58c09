package rules_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/loomdb/loom/rules"
)

// rule1 is the source of one rule.
func rule1(match, allow, cond string) string {
	return fmt.Sprintf("[[rule]]\nmatch = %q\nallow = [%s]\nif = %q\n\n", match, allow, cond)
}

func TestSet_AllowsAll(t *testing.T) {
	def := rules.Default()
	svc := &rules.Auth{UID: "key:agents", Roles: []string{"service"}}
	gold := &rules.Auth{UID: "carol", Claims: map[string]any{"tier": "gold"}}
	read := `"read"`
	// big costs more than rules.CostLimit without reading any document.
	var nums []string
	for i := range 120 {
		nums = append(nums, fmt.Sprint(i))
	}
	big := fmt.Sprintf("[%[1]s].all(x, [%[1]s].all(y, x + y >= 0))", strings.Join(nums, ","))

	tests := []struct {
		name string
		src  string // "" = the default rules
		auth *rules.Auth
		op   rules.Op
		coll string
		want bool
	}{
		// Decided: the condition reads only the caller and the collection's path.
		{"default owner", "", alice, rules.OpList, "users/alice/items", true},
		{"default owner get", "", alice, rules.OpGet, "users/alice/items", true},
		{"default owner deep", "", alice, rules.OpList, "users/alice/orch-chats/c1/messages", true},
		{"default owner any collection", "", alice, rules.OpList, "users/alice/*", true},
		{"default service", "", svc, rules.OpList, "users/alice/items", true},
		{"default service group", "", svc, rules.OpList, "users/*/items", true},
		{"role", rule1("rooms/{r}", read, "'editor' in request.auth.roles"), bob, rules.OpList, "rooms", true},
		{"claim", rule1("rooms/{r}", read, "request.auth.claims.tier == 'gold'"), gold, rules.OpList, "rooms", true},
		{"op", rule1("rooms/{r}", read, "request.op == 'list'"), alice, rules.OpList, "rooms", true},
		{"constant", rule1("public/{doc=**}", read, "true"), nil, rules.OpList, "public/a/b", true},
		{"collection capture", rule1("teams/{team}/docs/{d}", read, "request.auth.uid + 'x' == team"), alice, rules.OpList, "teams/alicex/docs", true},
		{"error rescued by or", rule1("rooms/{r}", read, "request.auth.claims.nope == 1 || request.auth != null"), alice, rules.OpList, "rooms", true},
		{"after a per-document rule", rule1("rooms/{r}", read, "resource.data.open == true") + rule1("rooms/{r}", read, "request.auth != null"), alice, rules.OpList, "rooms", true},

		// Not decided.
		{"default other user", "", bob, rules.OpList, "users/alice/items", false},
		{"default anonymous", "", nil, rules.OpList, "users/alice/items", false},
		{"default group", "", alice, rules.OpList, "users/*/items", false},
		{"default other collection", "", alice, rules.OpList, "rooms", false},
		{"role missing", rule1("rooms/{r}", read, "'editor' in request.auth.roles"), alice, rules.OpList, "rooms", false},
		{"op not granted", rule1("rooms/{r}", `"get"`, "true"), alice, rules.OpList, "rooms", false},
		{"op in condition", rule1("rooms/{r}", read, "request.op == 'list'"), alice, rules.OpGet, "rooms", false},
		{"constant false", rule1("rooms/{r}", read, "false"), alice, rules.OpList, "rooms", false},
		{"resource data", rule1("rooms/{r}", read, "resource.data.owner == request.auth.uid"), alice, rules.OpList, "rooms", false},
		{"resource null", rule1("rooms/{r}", read, "resource == null"), alice, rules.OpList, "rooms", false},
		{"resource absent field", rule1("rooms/{r}", read, "!has(resource.data.secret)"), alice, rules.OpList, "rooms", false},
		{"get", rule1("rooms/{r}", read, "get('cfg/open').data.open == true"), alice, rules.OpList, "rooms", false},
		{"exists", rule1("rooms/{r}", read, "!exists('cfg/closed')"), alice, rules.OpList, "rooms", false},
		{"request time", rule1("rooms/{r}", read, "request.time > timestamp('2000-01-01T00:00:00Z')"), alice, rules.OpList, "rooms", false},
		{"request path", rule1("rooms/{r}", read, "request.path.startsWith('rooms/')"), alice, rules.OpList, "rooms", false},
		{"request resource", rule1("rooms/{r}", read, "request.resource == null"), alice, rules.OpList, "rooms", false},
		{"whole request", rule1("rooms/{r}", read, "size(request) > 0"), alice, rules.OpList, "rooms", false},
		{"request index", rule1("rooms/{r}", read, "request['path'] != ''"), alice, rules.OpList, "rooms", false},
		{"id capture", rule1("rooms/{r}", read, "r != 'secret'"), alice, rules.OpList, "rooms", false},
		{"rest capture", rule1("users/{u}/{rest=**}", read, "!rest.endsWith('/secret')"), alice, rules.OpList, "users/alice/items", false},
		{"group capture", rule1("teams/{team}/docs/{d}", read, "team != 'x'"), alice, rules.OpList, "teams/*/docs", false},
		{"literal id", rule1("rooms/lobby", read, "true"), alice, rules.OpList, "rooms", false},
		{"literal collection", rule1("teams/acme/docs/{d}", read, "true"), alice, rules.OpList, "teams/*/docs", false},
		{"error", rule1("rooms/{r}", read, "request.auth.claims.nope == 1"), alice, rules.OpList, "rooms", false},
		{"cost limit", rule1("rooms/{r}", read, big), alice, rules.OpList, "rooms", false},
		// Allow evaluates rules in order and fails when a get() fails: a
		// rule that reads documents before the deciding one keeps the
		// decision per document.
		{"after a get", rule1("rooms/{r}", read, "get('cfg/' + r).data.open == true") + rule1("rooms/{r}", read, "true"), alice, rules.OpList, "rooms", false},
		{"after a partial get", rule1("rooms/lobby", read, "exists('cfg/x')") + rule1("rooms/{r}", read, "true"), alice, rules.OpList, "rooms", false},
		{"before a get", rule1("rooms/{r}", read, "true") + rule1("rooms/{r}", read, "exists('cfg/x')"), alice, rules.OpList, "rooms", true},
		{"get of another op", rule1("rooms/{r}", `"write"`, "exists('cfg/x')") + rule1("rooms/{r}", read, "true"), alice, rules.OpList, "rooms", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := def
			if tt.src != "" {
				s = MustParse(t, tt.src)
			}
			if got := s.AllowsAll(context.Background(), tt.auth, tt.op, tt.coll); got != tt.want {
				t.Fatalf("AllowsAll(%s %s)=%v, want %v", tt.op, tt.coll, got, tt.want)
			}
		})
	}
}

// TestSet_AllowsAll_Canceled: an evaluation that ctx interrupts decides
// nothing.
func TestSet_AllowsAll_Canceled(t *testing.T) {
	var nums []string
	for i := range 300 { // more than one interrupt check's worth
		nums = append(nums, fmt.Sprint(i+1))
	}
	s := MustParse(t, rule1("rooms/{r}", `"read"`, "["+strings.Join(nums, ",")+"].all(x, x > 0)"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.AllowsAll(ctx, alice, rules.OpList, "rooms") {
		t.Fatal("decided with ctx canceled")
	}
	// Nor is the interrupted answer remembered.
	if !s.AllowsAll(context.Background(), alice, rules.OpList, "rooms") {
		t.Fatal("not decided after the cancel")
	}
}

// TestSet_AllowsAll_Differential checks AllowsAll against Allow: for random
// rule sets, callers and collections, whenever AllowsAll says every
// document is allowed, Allow allows each of a sample of documents (ids,
// data, versions of every kind, and none at all).
func TestSet_AllowsAll_Differential(t *testing.T) {
	patterns := []string{
		"rooms/{r}", "rooms/lobby", "rooms/{r}/msgs/{m}", "rooms/lobby/msgs/{m}",
		"users/{u}/{rest=**}", "users/{u}/items/{i}", "{all=**}", "{c}/{d}",
	}
	conds := []string{
		"true", "false",
		"request.auth != null",
		"request.auth != null && request.auth.uid == u",
		"request.auth.uid == r", "r == 'lobby'", "r != 'secret'", "m != 'secret'",
		"request.auth != null && 'editor' in request.auth.roles",
		"request.auth.claims.tier == 'gold'",
		"request.op == 'list'",
		"resource == null", "resource != null", "resource.data.owner == request.auth.uid",
		"!has(resource.data.secret)", "resource.data.n < 10",
		"request.path.endsWith('/secret') == false",
		"request.time > timestamp('2000-01-01T00:00:00Z')",
		"exists('cfg/open')", "get('cfg/open').data.open == true",
		"rest.startsWith('items/')", "!rest.endsWith('secret')",
		"d != 'secret'", "c == 'rooms'", "all.startsWith('rooms/')",
		"request.auth.claims.nope == 1",
		"request.auth.claims.nope == 1 || request.auth != null",
	}
	auths := []*rules.Auth{nil, alice, bob,
		{UID: "carol", Claims: map[string]any{"tier": "gold"}},
		{UID: "lobby", Roles: []string{"service"}},
	}
	colls := []string{"rooms", "rooms/lobby/msgs", "rooms/r1/msgs", "rooms/*/msgs",
		"users/alice/items", "users/bob/items", "users/*/items", "users/alice/*", "*"}
	ids := []string{"d1", "secret", "lobby", "alice", "items"}
	datas := []map[string]any{nil, {}, {"owner": "alice"}, {"owner": "bob", "secret": true},
		{"n": 3}, {"n": 30, "owner": "alice"}}
	g := &mapGetter{docs: map[string]map[string]any{"cfg/open": {"open": true}}}
	ctx := context.Background()

	rng := rand.New(rand.NewPCG(18, 2))
	decided, undecided := 0, 0
	for range 400 {
		var src strings.Builder
		for range 1 + rng.IntN(3) {
			p := patterns[rng.IntN(len(patterns))]
			var c string
			for { // a condition whose captures the pattern has
				c = conds[rng.IntN(len(conds))]
				if _, err := rules.Parse([]byte(rule1(p, `"read"`, c)), "x"); err == nil {
					break
				}
			}
			allow := []string{`"read"`, `"list"`, `"get"`, `"write"`}[rng.IntN(4)]
			src.WriteString(rule1(p, allow, c))
		}
		s := MustParse(t, src.String())
		for _, auth := range auths {
			for _, coll := range colls {
				for _, op := range []rules.Op{rules.OpList, rules.OpGet} {
					if !s.AllowsAll(ctx, auth, op, coll) {
						undecided++
						continue
					}
					decided++
					for _, id := range ids {
						path := strings.ReplaceAll(coll, "*", "x") + "/" + id
						for _, data := range datas {
							ok, err := s.Allow(ctx, rules.Request{Auth: auth, Op: op, Path: path, Existing: data}, g)
							if err != nil || !ok {
								t.Fatalf("rules:\n%s\nAllowsAll(%v, %s, %s) but Allow(%s, %v)=%v, %v",
									src.String(), auth, op, coll, path, data, ok, err)
							}
						}
					}
				}
			}
		}
	}
	if decided < 100 || undecided < 100 {
		t.Fatalf("decided %d, undecided %d: the sample does not exercise both answers", decided, undecided)
	}
	t.Logf("decided %d, undecided %d", decided, undecided)
}

// cacheAuths are the callers the decision-cache tests (AllowsAll's, May's)
// ask for: each differs from another in one field only.
var cacheAuths = []*rules.Auth{nil, alice, bob,
	{UID: "alice"}, {UID: "carol"},
	{UID: "alice", Username: "alice"},
	{UID: "alice", Roles: []string{"editor"}},
	{UID: "alice", Roles: []string{"user\x00editor"}},
	{UID: "alice", Roles: []string{"user", "editor"}},
	{UID: "carol", Claims: map[string]any{"tier": "gold"}},
	{UID: "carol", Claims: map[string]any{"tier": "silver"}},
}

// TestSet_AllowsAll_Cached: AllowsAll's answers, cached per Set, are those
// of a fresh Set for every caller, in any order: callers differing only in
// claims, roles, username or uid never share an answer they should not.
func TestSet_AllowsAll_Cached(t *testing.T) {
	read := `"read"`
	srcs := []string{
		rules.DefaultSource(),
		rule1("rooms/{r}", read, "request.auth != null && 'editor' in request.auth.roles"),
		rule1("rooms/{r}", read, "request.auth.claims.tier == 'gold'"),
		rule1("rooms/{r}", read, "request.auth.username == 'alice'"),
		rule1("rooms/{r}", read, "request.auth == null"),
		rule1("rooms/{r}", read, "request.auth.uid == 'carol' && has(request.auth.claims.tier)"),
		rule1("rooms/{r}", read, "request.auth != null && request.auth.size() > 3"),
		rule1("rooms/{r}", read, "request.op == 'get'"),
	}
	auths := cacheAuths
	colls := []string{"rooms", "users/alice/items", "users/carol/items", "users/*/items"}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 8))
	for _, src := range srcs {
		cached := MustParse(t, src)
		type key struct {
			auth int
			op   rules.Op
			coll string
		}
		fresh := map[key]bool{} // answers of a fresh Set each
		for range 300 {
			a := rng.IntN(len(auths))
			auth := auths[a]
			coll := colls[rng.IntN(len(colls))]
			op := []rules.Op{rules.OpGet, rules.OpList}[rng.IntN(2)]
			want, ok := fresh[key{a, op, coll}]
			if !ok {
				want = MustParse(t, src).AllowsAll(ctx, auth, op, coll)
				fresh[key{a, op, coll}] = want
			}
			if got := cached.AllowsAll(ctx, auth, op, coll); got != want {
				t.Fatalf("rules %s: AllowsAll(%+v, %s, %s)=%v after other callers, %v on a fresh Set", src, auth, op, coll, got, want)
			}
		}
	}
}

// TestSet_AllowsAll_CachedRoleLists: no role list shares a cached answer
// with another, the empty list and the list of one empty role included
// (both join to ""), and lists of as many roles that join to the same
// NUL-separated string (a token's roles may hold a NUL).
func TestSet_AllowsAll_CachedRoleLists(t *testing.T) {
	read := `"read"`
	lists := [][]string{nil, {}, {""}, {"", ""}, {"a"}, {"a", ""}, {"", "a"},
		{"editor", "x\x00y"}, {"editor\x00x", "y"}, {"x", "\x00", "editor"}, {"x", "", "\x00editor"}}
	for _, cond := range []string{
		"request.auth != null && 'editor' in request.auth.roles",
		"request.auth != null && size(request.auth.roles) == 0",
		"request.auth != null && '' in request.auth.roles",
		"request.auth != null && size(request.auth.roles) == 1",
	} {
		s := MustParse(t, rule1("rooms/{r}", read, cond))
		for _, first := range lists {
			for _, second := range lists {
				ctx := context.Background()
				s.AllowsAll(ctx, &rules.Auth{UID: "alice", Roles: first}, rules.OpList, "rooms")
				auth := &rules.Auth{UID: "alice", Roles: second}
				want := MustParse(t, rule1("rooms/{r}", read, cond)).AllowsAll(ctx, auth, rules.OpList, "rooms")
				if got := s.AllowsAll(ctx, auth, rules.OpList, "rooms"); got != want {
					t.Fatalf("%s: roles %q after roles %q: AllowsAll=%v, want %v", cond, second, first, got, want)
				}
			}
		}
	}
}

// TestSet_AllowsAll_Disguised: conditions that reach a document, the
// request's path or time, or the caller's claims by a detour — a
// root-scoped name (also inside a comprehension whose variable shadows
// it), dyn, a list or map around request, a comprehension
// variable shadowing request, resource or a capture — are never decided
// whole, and a claim read by a detour turns the decision cache off (the
// answer changes with the claim, same uid, username and roles).
func TestSet_AllowsAll_Disguised(t *testing.T) {
	read := `"read"`
	undecided := []string{
		".request.path != 'rooms/secret'",
		".resource == null",
		"request.auth != null && .r != 'secret'",
		"dyn(request).path != 'rooms/secret'",
		"[request][0].path != 'rooms/secret'",
		"{'x': request}.x.time > timestamp('2000-01-01T00:00:00Z')",
		"[request.auth][0] != null && request.path != 'rooms/secret'",
		"['rooms/secret'].all(request, request != 'x') && resource != null",
		"[r].all(x, x != 'secret')",
		"[1].all(r, r == 1) && r != 'secret'",
		"request.exists(k, k == 'path')",
		"[0].exists(x, has(resource.data.open))",
		"[1].all(request, !.request.path.startsWith('rooms/secret'))",
		"[1].all(resource, .resource == null)",
		"[1].all(r, .r != 'secret')",
	}
	for _, cond := range undecided {
		s := MustParse(t, rule1("rooms/{r}", read, cond))
		if s.AllowsAll(context.Background(), alice, rules.OpList, "rooms") {
			t.Errorf("%s: decided for the whole collection", cond)
		}
	}
	claims := []string{
		"request.auth['claims'].tier == 'gold'",
		"dyn(request.auth).claims.tier == 'gold'",
		"[request.auth][0].claims.tier == 'gold'",
		"request.auth.exists(k, k == 'claims') && request.auth.claims.tier == 'gold'",
		"'gold' in [request.auth].map(a, a.claims.tier)",
		"request.auth == {'uid': 'carol', 'username': '', 'roles': [], 'claims': {'tier': 'gold'}}",
		"[1].all(request, .request.auth.claims.tier == 'gold')",
	}
	gold := &rules.Auth{UID: "carol", Claims: map[string]any{"tier": "gold"}}
	silver := &rules.Auth{UID: "carol", Claims: map[string]any{"tier": "silver"}}
	for _, cond := range claims {
		s := MustParse(t, rule1("rooms/{r}", read, cond))
		ctx := context.Background()
		if !s.AllowsAll(ctx, gold, rules.OpList, "rooms") {
			t.Errorf("%s: gold not decided", cond)
		}
		if s.AllowsAll(ctx, silver, rules.OpList, "rooms") {
			t.Errorf("%s: silver decided after gold (a cached answer)", cond)
		}
	}
}
