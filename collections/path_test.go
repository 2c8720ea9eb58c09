package collections_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// pathCase is one input for the path validators; the tables below also seed
// FuzzDocPath.
type pathCase struct {
	path string
	ok   bool
}

var (
	id128 = strings.Repeat("i", collections.MaxIDBytes)
	// longCollection makes "<collection>/x" exactly MaxPathBytes long.
	longCollection = strings.Repeat("c", collections.MaxPathBytes-2)
)

var docPathCases = []pathCase{
	{"rooms/r1", true},
	{"rooms/r1/messages/m1", true},
	{"a_b-c.d/X9", true},
	{"_outbox/x", true},
	{"rooms/...", true},
	{"rooms/.x", true},
	{"rooms/x.", true},
	{"rooms/" + id128, true},
	{longCollection + "/x", true},
	{"users/u1/orch-chats/c1/tasks/t1", true},

	{"", false},
	{"rooms", false},
	{"rooms/r1/messages", false},
	{"rooms/", false},
	{"/rooms/r1", false},
	{"rooms//r1", false},
	{"rooms/r1/", false},
	{"rooms/.", false},
	{"rooms/..", false},
	{"./r1", false},
	{"../r1", false},
	{"rooms/r 1", false},
	{"rooms/r*", false},
	{"rooms/*", false},
	{"*/r1", false},
	{"rooms/é", false},
	{"rooms/r1?x=1", false},
	{`rooms\r1`, false},
	{"rooms/r1\x00", false},
	{"rooms/r%2F1", false},
	{"rooms/" + id128 + "x", false},
	{longCollection + "/xy", false},
	{"rooms/r1/" + strings.Repeat("m", 200) + "/" + id128 + "x", false},
}

var collectionPathCases = []pathCase{
	{"rooms", true},
	{"rooms/r1/messages", true},
	{"_outbox", true},
	{"users/u1/orch-chats/c1/tasks", true},
	{strings.Repeat("c", collections.MaxPathBytes), true},
	{"rooms/" + id128 + "/m", true},

	{"", false},
	{"rooms/r1", false},
	{"rooms/*/m", false},
	{"*", false},
	{"rooms/", false},
	{"/rooms", false},
	{"rooms/../m", false},
	{"rooms/./m", false},
	{"rooms/" + id128 + "x/m", false},
	{strings.Repeat("c", collections.MaxPathBytes+1), false},
}

var patternCases = []pathCase{
	{"users/*/orch-chats/*/tasks", true},
	{"users/u1/orch-chats/*/tasks", true},
	{"*", true},
	{"*/x/y", true},
	{"rooms", true},
	{"rooms/r1/messages", true},

	{"", false},
	{"users/*", false},
	{"users/**/x", false},
	{"users/a*/x", false},
	{"users/*/", false},
	{"users//x", false},
	{"users/*/orch-chats/*", false},
	{"users/./x", false},
}

func checkPathCases(t *testing.T, name string, cases []pathCase, validate func(string) error) {
	t.Helper()
	for _, tc := range cases {
		err := validate(tc.path)
		if got := err == nil; got != tc.ok {
			t.Errorf("%s(%.60q) ok=%v (err %v), want %v", name, tc.path, got, err, tc.ok)
		}
		if err != nil && !errors.Is(err, collections.ErrInvalidPath) {
			t.Errorf("%s(%.60q) err=%v, want ErrInvalidPath", name, tc.path, err)
		}
	}
}

func TestValidateDocPath(t *testing.T) {
	checkPathCases(t, "ValidateDocPath", docPathCases, collections.ValidateDocPath)
}

func TestValidateCollectionPath(t *testing.T) {
	checkPathCases(t, "ValidateCollectionPath", collectionPathCases, collections.ValidateCollectionPath)
}

func TestValidateCollectionPattern(t *testing.T) {
	checkPathCases(t, "ValidateCollectionPattern", patternCases, collections.ValidateCollectionPattern)
	// Every concrete collection is also a valid pattern.
	for _, tc := range collectionPathCases {
		if !tc.ok {
			continue
		}
		if err := collections.ValidateCollectionPattern(tc.path); err != nil {
			t.Errorf("ValidateCollectionPattern(%.60q) err=%v, want nil", tc.path, err)
		}
	}
}

func TestSplitDocPath(t *testing.T) {
	for _, tc := range []struct{ path, coll, id string }{
		{"rooms/r1", "rooms", "r1"},
		{"rooms/r1/messages/m1", "rooms/r1/messages", "m1"},
	} {
		if c, id := collections.SplitDocPath(tc.path); c != tc.coll || id != tc.id {
			t.Errorf("SplitDocPath(%q)=%q,%q, want %q,%q", tc.path, c, id, tc.coll, tc.id)
		}
	}
}

func TestIsSystemPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"_outbox/x", true},
		{"_outbox", true},
		{"_triggers/t/_x/y", true},
		{"rooms/_x", false},
		{"rooms/r1/_sub/x", false},
		{"rooms", false},
	} {
		if got := collections.IsSystemPath(tc.path); got != tc.want {
			t.Errorf("IsSystemPath(%q)=%v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestIsPattern(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"*", true},
		{"*/x/y", true},
		{"users/*/tasks", true},
		{"a/b/*", true},
		{"users", false},
		{"users/u1/tasks", false},
	} {
		if got := collections.IsPattern(tc.path); got != tc.want {
			t.Errorf("IsPattern(%q)=%v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestShape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"users", "users"},
		{"users/u1/orch-chats", "users/*/orch-chats"},
		{"users/u1/orch-chats/c1/tasks", "users/*/orch-chats/*/tasks"},
		{"users/*/orch-chats/*/tasks", "users/*/orch-chats/*/tasks"},
		{"users/u1/orch-chats/*/tasks", "users/*/orch-chats/*/tasks"},
		{"*", "*"},
	} {
		if got := collections.Shape(tc.in); got != tc.want {
			t.Errorf("Shape(%q)=%q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMatchCollection(t *testing.T) {
	const group = "users/*/orch-chats/*/tasks"
	for _, tc := range []struct {
		pattern, coll string
		want          bool
	}{
		{group, "users/u1/orch-chats/c1/tasks", true},
		{group, "users/u2/orch-chats/c9/tasks", true},
		{group, "users/u1/orch-chats/c1/tasks/t1/sub", false},
		{group, "users/u1/orch-chats", false},
		{group, "users/u1/orch-chats/c1/notes", false},
		{group, "people/u1/orch-chats/c1/tasks", false},
		{"users/u1/orch-chats/*/tasks", "users/u1/orch-chats/c1/tasks", true},
		{"users/u1/orch-chats/*/tasks", "users/u2/orch-chats/c1/tasks", false},
		{"*", "rooms", true},
		{"*", "rooms/r1/messages", false},
		{"*/r1/messages", "rooms/r1/messages", true},
		{"rooms", "rooms", true},
		{"rooms", "rooms2", false},
		{"rooms", "room", false},
		{"rooms/*/m", "rooms/r/m", true},
		{"rooms/*/m", "rooms/r/mm", false},
		{"rooms/r/m", "rooms/r/m", true},
		{"rooms/r/m", "rooms/s/m", false},
		// A wildcard never reaches a system collection; naming one does.
		{"*", "_users", false},
		{"*", "_outbox", false},
		{"*/u1/sessions", "_users/u1/sessions", false},
		{"*/*/sessions", "_users/u1/sessions", false},
		{"_users", "_users", true},
		{"_users/*/sessions", "_users/u1/sessions", true},
		{"*", "a_b", true},
	} {
		if got := collections.MatchCollection(tc.pattern, tc.coll); got != tc.want {
			t.Errorf("MatchCollection(%q, %q)=%v, want %v", tc.pattern, tc.coll, got, tc.want)
		}
	}
}

// FuzzDocPath checks that the validators never panic, agree with each other
// and that everything derived from a valid path is valid again.
func FuzzDocPath(f *testing.F) {
	for _, cases := range [][]pathCase{docPathCases, collectionPathCases, patternCases} {
		for _, tc := range cases {
			f.Add(tc.path)
		}
	}
	f.Fuzz(func(t *testing.T, p string) {
		docErr := collections.ValidateDocPath(p)
		collErr := collections.ValidateCollectionPath(p)
		patErr := collections.ValidateCollectionPattern(p)
		for _, err := range []error{docErr, collErr, patErr} {
			if err != nil && !errors.Is(err, collections.ErrInvalidPath) {
				t.Fatalf("err=%v, want ErrInvalidPath", err)
			}
		}
		if docErr == nil && (collErr == nil || patErr == nil) {
			t.Fatalf("%q is both a document and a collection", p)
		}
		if collErr == nil && patErr != nil {
			t.Fatalf("collection %q is not a valid pattern: %v", p, patErr)
		}
		if docErr == nil {
			if len(p) > collections.MaxPathBytes {
				t.Fatalf("len=%d, want <= %d", len(p), collections.MaxPathBytes)
			}
			coll, id := collections.SplitDocPath(p)
			if coll+"/"+id != p {
				t.Fatalf("SplitDocPath(%q)=%q,%q, do not join back", p, coll, id)
			}
			if len(id) > collections.MaxIDBytes || id == "." || id == ".." || strings.ContainsAny(id, "/*") {
				t.Fatalf("accepted id %q", id)
			}
			if err := collections.ValidateCollectionPath(coll); err != nil {
				t.Fatalf("collection %q of valid doc path: %v", coll, err)
			}
		}
		if patErr == nil {
			shape := collections.Shape(p)
			if err := collections.ValidateCollectionPattern(shape); err != nil {
				t.Fatalf("Shape(%q)=%q is not a valid pattern: %v", p, shape, err)
			}
			if collErr == nil && !collections.MatchCollection(shape, p) {
				t.Fatalf("MatchCollection(Shape(%q), %q)=false", p, p)
			}
			if collErr == nil && !collections.MatchCollection(p, p) {
				t.Fatalf("MatchCollection(%q, itself)=false", p)
			}
			if got := collections.IsPattern(p); got != (collErr != nil) {
				t.Fatalf("IsPattern(%q)=%v, want %v", p, got, collErr != nil)
			}
		}
	})
}

func TestIsLogged(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"rooms/r1", true},
		{"rooms/_x", true},
		{"rooms/r1/_sub/x", true},
		{"_triggers/t1", true},
		{"_triggers/t1/_x/y", true},
		{"_triggersx/t1", false},
		{"_outbox/x", false},
		{"_cursors/triggers", false},
		{"_users/u1", false},
		{"_users/u1/_triggers/x", false},
	} {
		if got := collections.IsLogged(tc.path); got != tc.want {
			t.Errorf("IsLogged(%q)=%v, want %v", tc.path, got, tc.want)
		}
	}
}
