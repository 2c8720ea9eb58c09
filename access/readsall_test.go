package access_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// defaultReadRule is the default rules' read condition, which the rules
// decide once per collection for its owner (rules.Set.AllowsAll).
const defaultReadRule = `if    = "request.auth != null && request.auth.uid == userId"`

// perDocumentDefault is the default rules with a read condition of the
// same meaning that the rules can only decide per document (it reads
// request.path, never empty).
func perDocumentDefault(t *testing.T) *rules.Set {
	t.Helper()
	src := rules.DefaultSource()
	if !strings.Contains(src, defaultReadRule) {
		t.Fatal("the default read rule changed: update defaultReadRule")
	}
	src = strings.Replace(src, defaultReadRule, `if    = "request.auth != null && request.auth.uid == userId && request.path != ''"`, 1)
	set, err := rules.Parse([]byte(src), "per-document.toml")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A query or get the rules decide for a whole collection returns exactly
// what deciding document by document returns — the same documents, pages,
// denials and not-founds — and, for a response, without decoding.
func TestService_WholeCollectionDecisionSameAsPerDocument(t *testing.T) {
	ctx := context.Background()
	perDoc := perDocumentDefault(t)
	// Two services over one store: the default rules, and the same
	// meaning decided per document.
	st := mustOpenStore(t)
	fast := newServiceOn(t, st, rules.Default())
	slow := newServiceOn(t, st, perDoc)

	for i := range 12 {
		for _, u := range []string{"alice", "bob"} {
			mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/%s/items/i%02d", u, i),
				Data: map[string]any{"n": i, "g": fmt.Sprint(i % 3), "t": "<" + u + ">"}})
		}
	}
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/alice/notes/x", Data: map[string]any{"n": 1}})
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "rooms/r1", Data: map[string]any{"n": 1}})
	mustCommit(t, st, collections.Write{Type: collections.WriteDelete, Path: "users/alice/items/i03"})

	service := &access.Caller{Kind: "service-key", UID: "key:svc", Roles: []string{"service"}}
	callers := []*access.Caller{alice, bob, access.Anonymous, service, roleAdmin}
	queries := []collections.Query{
		{Collection: "users/alice/items", Limit: 5},
		{Collection: "users/alice/items", Limit: 4, ShowDeleted: true},
		{Collection: "users/alice/items", Limit: 3, Filters: []collections.Filter{{Field: "g", Op: collections.OpEq, Value: "1"}}},
		{Collection: "users/alice/items", Limit: 4, OrderBy: []collections.Order{{Field: "n", Direction: "desc"}}},
		{Collection: "users/alice/*", Limit: 7},
		{Collection: "users/*/items", Limit: 5},
		{Collection: "users/bob/items", Limit: 5},
		{Collection: "rooms", Limit: 5},
	}
	wire := func(docs []*collections.Document) string {
		var b bytes.Buffer
		for _, d := range docs {
			if err := d.AppendJSON(&b); err != nil {
				t.Fatal(err)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	sameErr := func(name string, got, want error) {
		t.Helper()
		var gd, wd *access.Denied
		if errors.As(got, &gd) != errors.As(want, &wd) || (gd != nil && *gd != *wd) ||
			errors.Is(got, collections.ErrNotFound) != errors.Is(want, collections.ErrNotFound) || (got == nil) != (want == nil) {
			t.Fatalf("%s: decided once: err %v; per document: err %v", name, got, want)
		}
	}
	fastRaw := 0
	for _, caller := range callers {
		for _, q0 := range queries {
			for _, forResponse := range []bool{false, true} {
				name := fmt.Sprintf("%s %+v forResponse=%v", caller.UID, q0, forResponse)
				run := func(svc *access.Service, q collections.Query) (collections.QueryResult, error) {
					if forResponse {
						return svc.QueryForResponse(ctx, caller, "default", q)
					}
					return svc.Query(ctx, caller, "default", q)
				}
				fq, sq := q0, q0
				for page := 0; ; page++ {
					fres, ferr := run(fast, fq)
					sres, serr := run(slow, sq)
					sameErr(name, ferr, serr)
					if ferr != nil {
						break
					}
					if wire(fres.Docs) != wire(sres.Docs) || (fres.NextCursor == "") != (sres.NextCursor == "") {
						t.Fatalf("%s page %d: decided once\n%s(more %v); per document\n%s(more %v)", name, page,
							wire(fres.Docs), fres.NextCursor != "", wire(sres.Docs), sres.NextCursor != "")
					}
					for _, d := range fres.Docs {
						if forResponse && d.Data == nil && caller == alice {
							fastRaw++
						}
						if !forResponse && d.Data == nil {
							t.Fatalf("%s: Query handed out %s without Data", name, d.Path)
						}
					}
					for _, d := range sres.Docs {
						// The service role's rule is decided once in
						// both sets; the owner's only in fast's.
						if d.Data == nil && caller == alice {
							t.Fatalf("%s: %s was not decoded for the rules deciding per document", name, d.Path)
						}
					}
					if fres.NextCursor == "" {
						break
					}
					fq.StartAfter, sq.StartAfter = fres.NextCursor, sres.NextCursor
				}
			}
		}
		for _, path := range []string{"users/alice/items/i01", "users/alice/items/i03", "users/alice/items/none", "users/bob/items/i01", "rooms/r1"} {
			for _, forResponse := range []bool{false, true} {
				get := (*access.Service).Get
				if forResponse {
					get = (*access.Service).GetForResponse
				}
				fd, ferr := get(fast, ctx, caller, "default", path)
				sd, serr := get(slow, ctx, caller, "default", path)
				name := fmt.Sprintf("%s get %s forResponse=%v", caller.UID, path, forResponse)
				sameErr(name, ferr, serr)
				var de *access.Denied
				readable := caller.Admin || (strings.HasPrefix(path, "users/") && (caller == service || (caller.UID != "" && strings.HasPrefix(path, "users/"+caller.UID+"/"))))
				if errors.As(ferr, &de) == readable {
					t.Fatalf("%s: err %v, want readable=%v", name, ferr, readable)
				}
				if ferr == nil && wire([]*collections.Document{fd}) != wire([]*collections.Document{sd}) {
					t.Fatalf("%s: decided once %s, per document %s", name, wire([]*collections.Document{fd}), wire([]*collections.Document{sd}))
				}
			}
		}
	}
	if fastRaw == 0 {
		t.Fatal("no user page was served from the stored bytes: the whole-collection decision was not taken")
	}
}

func newServiceOn(t *testing.T, st collections.Store, set *rules.Set) *access.Service {
	t.Helper()
	svc, err := access.New(access.Config{Store: st, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// A rules reload between two queries, and under a ReadCheck held across
// it (a realtime subscription), takes effect at once, whether the old or
// the new rules decide the collection as a whole.
func TestService_ReloadChangesWholeCollectionDecisions(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, rules.Default())
	for i, vis := range []bool{true, false, true} {
		mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/alice/items/i%d", i),
			Data: map[string]any{"visible": vis}})
	}
	mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "users/bob/items/b", Data: map[string]any{"visible": true}})
	visibleOnly, err := rules.Parse([]byte(`
[[rule]]
match = "users/{userId}/{rest=**}"
allow = ["read"]
if    = "request.auth != null && request.auth.uid == userId && resource.data.visible == true"
`), "visible.toml")
	if err != nil {
		t.Fatal(err)
	}
	nothing, err := rules.Parse([]byte("[[rule]]\nmatch = \"rooms/{r}\"\nallow = [\"read\"]\nif = \"true\"\n"), "rooms.toml")
	if err != nil {
		t.Fatal(err)
	}
	docOf := func(path string) *collections.Document {
		d, err := st.Get(ctx, "default", path)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	check := svc.ReadCheck(alice, "default", rules.OpList, "users/alice/items")
	steps := []struct {
		set     *rules.Set
		n       int  // documents alice's query returns; -1: denied
		visible bool // ReadCheck on a document with visible: false
	}{
		{rules.Default(), 3, true},
		{visibleOnly, 2, false},
		{rules.Default(), 3, true},
		{nothing, -1, false},
		{rules.Default(), 3, true},
	}
	for i, s := range steps {
		svc.SetRules(s.set)
		res, err := svc.QueryForResponse(ctx, alice, "default", collections.Query{Collection: "users/alice/items", Limit: 10})
		var de *access.Denied
		switch {
		case s.n < 0 && !errors.As(err, &de):
			t.Fatalf("step %d: err %v, want a denial", i, err)
		case s.n >= 0 && (err != nil || len(res.Docs) != s.n):
			t.Fatalf("step %d: %d documents, %v; want %d", i, len(res.Docs), err, s.n)
		}
		for _, path := range []string{"users/alice/items/i0", "users/alice/items/i1"} {
			want := s.visible || (s.set == visibleOnly && path == "users/alice/items/i0")
			if ok, err := check(ctx, docOf(path)); err != nil || ok != want {
				t.Fatalf("step %d: ReadCheck(%s)=%v, %v; want %v", i, path, ok, err, want)
			}
		}
		// A document outside the collection is decided on its own.
		if ok, err := check(ctx, docOf("users/bob/items/b")); err != nil || ok {
			t.Fatalf("step %d: ReadCheck(bob's document)=%v, %v; want false", i, ok, err)
		}
	}
	bobCheck := svc.ReadCheck(bob, "default", rules.OpList, "users/alice/items")
	if ok, err := bobCheck(ctx, docOf("users/alice/items/i0")); err != nil || ok {
		t.Fatalf("bob's ReadCheck on alice's document: %v, %v", ok, err)
	}
}
