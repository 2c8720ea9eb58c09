package rules_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/loomdb/loom/rules"
)

func TestSet_MayList(t *testing.T) {
	def := rules.Default()
	custom := MustParse(t, `
[[rule]]
match = "public/{doc}"
allow = ["list"]
if    = "request.auth != null"

[[rule]]
match = "private/{doc}"
allow = ["get", "write"]      # no list
if    = "true"

[[rule]]
match = "closed/{doc}"
allow = ["read"]
if    = "false"

[[rule]]
match = "orgs/acme/projects/{p}"
allow = ["read"]
if    = "request.auth != null"

[[rule]]
match = "archive/{rest=**}"
allow = ["read"]
if    = "true"
`)
	tests := []struct {
		name       string
		s          *rules.Set
		auth       *rules.Auth
		collection string
		want       bool
	}{
		{"default own notes", def, alice, "users/alice/notes", true},
		{"default other notes", def, bob, "users/alice/notes", false}, // userId is known: "alice" != bob's uid
		{"default anonymous", def, nil, "users/alice/notes", false},
		{"default anonymous pattern", def, nil, "users/*/notes", false},
		{"default other pattern", def, bob, "users/*/notes", true}, // userId unknown: bob's own notes match
		{"default pattern", def, alice, "users/*/notes", true},
		{"default deep", def, alice, "users/alice/notes/n1/comments", true},
		{"default all wildcards", def, alice, "*/*/*", true},
		{"default users", def, alice, "users", false}, // {rest=**} needs a segment after the uid
		{"default top wildcard", def, alice, "*", false},
		{"default posts", def, alice, "posts", false},
		{"default posts sub", def, alice, "posts/p1/comments", false},
		{"list granted", custom, alice, "public", true},
		{"list granted needs auth", custom, nil, "public", false},
		{"wildcard collection", custom, alice, "*", true},
		{"data-dependent condition", MustParse(t, `
[[rule]]
match = "posts/{p}"
allow = ["list"]
if    = "resource.data.public == true || (request.auth != null && get('acl/' + p).data.open)"
`), nil, "posts", true},
		{"time-dependent condition", MustParse(t, `
[[rule]]
match = "posts/{p}"
allow = ["list"]
if    = "request.time < timestamp('2000-01-01T00:00:00Z')"
`), alice, "posts", false},
		{"role condition", MustParse(t, `
[[rule]]
match = "posts/{p}"
allow = ["list"]
if    = "'editor' in request.auth.roles"
`), alice, "posts", false},
		{"no list grant", custom, alice, "private", false},
		{"if false", custom, alice, "closed", false},
		{"literal id", custom, alice, "orgs/acme/projects", true},
		{"other literal id", custom, alice, "orgs/other/projects", false},
		{"wildcard id", custom, alice, "orgs/*/projects", true},
		{"rest", custom, alice, "archive", true},
		{"rest deep", custom, alice, "archive/2020/months", true},
		{"unknown", custom, alice, "nothing", false},
		{"empty set", MustParse(t, ""), alice, "users/alice/notes", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.MayList(tt.auth, tt.collection); got != tt.want {
				t.Fatalf("MayList(%q)=%v, want %v", tt.collection, got, tt.want)
			}
		})
	}
}

func TestSet_May(t *testing.T) {
	def := rules.Default()
	custom := MustParse(t, `
[[rule]]
match = "public/{doc}"
allow = ["create"]
if    = "true"

[[rule]]
match = "posts/{p}"
allow = ["update"]
if    = "request.auth != null && resource.data.owner == request.auth.uid"

[[rule]]
match = "inbox/{uid}/msgs/{m}"
allow = ["delete"]
if    = "request.auth != null && request.auth.uid == uid"
`)
	w := []rules.Op{rules.OpCreate, rules.OpUpdate, rules.OpDelete}
	tests := []struct {
		name string
		s    *rules.Set
		auth *rules.Auth
		path string
		ops  []rules.Op
		want bool
	}{
		{"default own doc", def, alice, "users/alice/notes/n1", w, true},
		{"default other's doc", def, bob, "users/alice/notes/n1", w, false},
		{"default anonymous doc", def, nil, "users/alice/notes/n1", w, false},
		{"default anonymous anywhere", def, nil, "", w, false},
		{"default anonymous read anywhere", def, nil, "", []rules.Op{rules.OpGet, rules.OpList}, false},
		{"default user anywhere", def, alice, "", w, true},
		{"default create in own collection", def, alice, "users/alice/notes/*", []rules.Op{rules.OpCreate}, true},
		{"default create in other's collection", def, alice, "users/bob/notes/*", []rules.Op{rules.OpCreate}, false},
		{"default outside users", def, alice, "posts/p1", w, false},
		{"create granted to anyone", custom, nil, "public/*", []rules.Op{rules.OpCreate}, true},
		{"create only", custom, nil, "public/x", []rules.Op{rules.OpDelete}, false},
		{"data-dependent update", custom, alice, "posts/p1", []rules.Op{rules.OpUpdate}, true},
		{"data-dependent update, anonymous", custom, nil, "posts/p1", []rules.Op{rules.OpUpdate}, false},
		{"capture known", custom, bob, "inbox/alice/msgs/m1", []rules.Op{rules.OpDelete}, false},
		{"capture unknown", custom, bob, "inbox/*/msgs/m1", []rules.Op{rules.OpDelete}, true},
		{"anonymous anywhere, custom", custom, nil, "", w, true},
		{"unknown op", custom, alice, "public/x", []rules.Op{"frobnicate"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.May(tt.auth, tt.path, tt.ops...); got != tt.want {
				t.Fatalf("May(%q, %v)=%v, want %v", tt.path, tt.ops, got, tt.want)
			}
		})
	}
}

// TestSet_May_Cached: May's answers, cached per Set, are those of a fresh
// Set for every caller, path and set of operations, in any order; among
// the rules are conditions on the document being written, which May
// cannot decide and must not answer false for.
func TestSet_May_Cached(t *testing.T) {
	w := `"write"`
	srcs := []string{
		rules.DefaultSource(),
		rule1("rooms/{r}", w, "request.auth != null && 'editor' in request.auth.roles"),
		rule1("rooms/{r}", w, "request.auth.username == 'alice' && request.resource.data.owner == 'alice'"),
		rule1("rooms/{r}", w, "request.auth == null || r == 'open'"),
		rule1("rooms/{r}", w, "request.auth != null && request.auth.size() > 3"),
		rule1("rooms/{r}", w, "request.auth.uid == 'carol' && has(request.auth.claims.tier)"),
		rule1("rooms/{r}", `"create"`, "request.op == 'create' && resource == null && request.path != 'rooms/x'"),
		rule1("users/{u}/{rest=**}", w, "request.auth != null && request.auth.uid == u && !rest.startsWith('orch-chats/')"),
	}
	auths := cacheAuths
	paths := []string{"", "rooms/*", "rooms/open", "rooms/x", "users/alice/items/*", "users/carol/items/*",
		"users/*/items/*", "users/alice/orch-chats/*", "posts/p1"}
	opSets := [][]rules.Op{{rules.OpCreate}, {rules.OpUpdate}, {rules.OpCreate, rules.OpUpdate, rules.OpDelete},
		{rules.OpGet}, {"frobnicate"}}
	rng := rand.New(rand.NewPCG(2, 9))
	for _, src := range srcs {
		cached := MustParse(t, src)
		type key struct{ auth, path, ops int }
		fresh := map[key]bool{}
		for range 400 {
			k := key{rng.IntN(len(auths)), rng.IntN(len(paths)), rng.IntN(len(opSets))}
			want, ok := fresh[k]
			if !ok {
				want = MustParse(t, src).May(auths[k.auth], paths[k.path], opSets[k.ops]...)
				fresh[k] = want
			}
			if got := cached.May(auths[k.auth], paths[k.path], opSets[k.ops]...); got != want {
				t.Fatalf("rules %s: May(%+v, %q, %v)=%v after other callers, %v on a fresh Set",
					src, auths[k.auth], paths[k.path], opSets[k.ops], got, want)
			}
		}
	}
}

// TestSet_May_CachedNotAllow: a cached May answer is only the pre-check.
// Conditions on the written document (request.resource.data, a capture
// holding the id) or on another document still decide each write in Allow,
// however often May answered true for the same caller and collection.
func TestSet_May_CachedNotAllow(t *testing.T) {
	w := `"create"`
	s := MustParse(t, rule1("rooms/{r}", w, "request.auth != null && request.resource.data.owner == request.auth.uid && r != 'locked'")+
		rule1("notes/{n}", w, "request.auth != null && dyn(request).resource.data.size() < 2"))
	ctx := context.Background()
	for range 3 {
		if !s.May(alice, "rooms/*", rules.OpCreate) || !s.May(alice, "notes/*", rules.OpCreate) {
			t.Fatal("May refuses what a document could make true")
		}
	}
	for _, tt := range []struct {
		path string
		data map[string]any
		want bool
	}{
		{"rooms/r1", map[string]any{"owner": "alice"}, true},
		{"rooms/r1", map[string]any{"owner": "bob"}, false},
		{"rooms/locked", map[string]any{"owner": "alice"}, false},
		{"notes/n1", map[string]any{"a": 1}, true},
		{"notes/n1", map[string]any{"a": 1, "b": 2}, false},
	} {
		got, err := s.Allow(ctx, rules.Request{Auth: alice, Op: rules.OpCreate, Path: tt.path, Resource: tt.data}, nil)
		if err != nil || got != tt.want {
			t.Errorf("Allow(%s, %v) = %v, %v after cached May answers; want %v", tt.path, tt.data, got, err, tt.want)
		}
	}
}
