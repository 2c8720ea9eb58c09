package rules_test

import (
	"context"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// FuzzParse feeds arbitrary TOML (and so arbitrary patterns and CEL) to
// Parse. Nothing may panic; a failure must be a *rules.Error; and a Set that
// compiles must answer Allow and MayList without panicking.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"",
		rules.DefaultSource(),
		"[[rule]]\nmatch = \"public/{doc=**}\"\nallow = [\"read\"]\nif = \"true\"\n",
		"[[rule]]\nmatch = \"posts/{p}\"\nallow = [\"update\"]\nif = \"resource.data.owner == request.auth.uid && request.resource.data.owner == resource.data.owner\"\n",
		"[[rule]]\nmatch = \"teams/{t}/docs/{d}\"\nallow = [\"read\"]\nif = \"exists('teams/' + t + '/members/' + request.auth.uid) && get('teams/' + t).data.open\"\n",
		"[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"[1,2,3].all(x, [1,2,3].exists(y, x == y))\"\n",
		"[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"'editor' in request.auth.roles && request.time > timestamp('2020-01-01T00:00:00Z')\"\n",
		"[[rule]]\nmatch = \"users/{uid\"\nallow = [\"read\"]\nif = \"true\"\n",
		"[[rule]]\nmatch = \"a/{b}\"\nallow = [\"reed\"]\nif = \"1 + 2\"\n",
		"[[rule]]\nmatch = \"a/{b}\"\nallow = \"read\"\niff = \"x\"\n",
		"[[rule]\n",
		"rule = 1\n",
		"version = 2\n[[rule]]\n",
	}
	for _, s := range seeds {
		f.Add(s, "users/alice/notes/n1", "users/*/notes")
		f.Add(s, "users/alice/notes/n1", "users/alice/notes")
	}
	f.Fuzz(func(t *testing.T, src, path, collection string) {
		s, err := rules.Parse([]byte(src), "fuzz.toml")
		if err != nil {
			if _, ok := err.(*rules.Error); !ok {
				t.Fatalf("err is %T, want *rules.Error: %v", err, err)
			}
			return
		}
		for _, auth := range []*rules.Auth{nil, {UID: "alice", Roles: []string{"editor"}}} {
			for _, op := range []rules.Op{rules.OpGet, rules.OpList, rules.OpCreate, rules.OpUpdate, rules.OpDelete} {
				req := rules.Request{Auth: auth, Op: op, Path: path,
					Resource: map[string]any{"owner": "alice"}, Existing: map[string]any{"owner": "alice"}}
				_, _ = s.Allow(context.Background(), req, &mapGetter{})
			}
			_ = s.MayList(auth, collection)
			// AllowsAll is never wrong about a document it covers.
			for _, op := range []rules.Op{rules.OpGet, rules.OpList} {
				if !s.AllowsAll(context.Background(), auth, op, collection) || collections.ValidateDocPath(path) != nil {
					continue
				}
				if coll, _ := collections.SplitDocPath(path); !collections.MatchCollection(collection, coll) {
					continue
				}
				for _, data := range []map[string]any{nil, {"owner": "bob"}} {
					req := rules.Request{Auth: auth, Op: op, Path: path, Existing: data}
					if ok, err := s.Allow(context.Background(), req, &mapGetter{}); !ok || err != nil {
						t.Fatalf("AllowsAll(%v, %s, %q), yet Allow(%q, %v)=%v, %v", auth, op, collection, path, data, ok, err)
					}
				}
			}
		}
	})
}
