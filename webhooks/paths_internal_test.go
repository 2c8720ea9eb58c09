package webhooks

import (
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// validDerived fails t unless id is a legal document id that fits the
// deepest path the runtime writes.
func validDerived(t *testing.T, id string) {
	t.Helper()
	long := strings.Repeat("u", collections.MaxIDBytes)
	c := chat{uid: long, id: long}
	if err := collections.ValidateDocPath(c.toolCalls(long) + "/" + id); err != nil {
		t.Fatalf("derived id %q: %v", id, err)
	}
}

func TestDeriveID(t *testing.T) {
	id128 := strings.Repeat("a", collections.MaxIDBytes)
	for _, tc := range []struct{ parts []string }{
		{[]string{"m1", "-reply"}},
		{[]string{id128, "-reply"}},
		{[]string{id128, "-t", "0"}},
		{[]string{"answer-", id128}},
		{[]string{"call 1"}},
		{[]string{"call/" + strings.Repeat("é", 300)}},
		{[]string{""}},
		{[]string{"."}},
		{[]string{".."}},
	} {
		got := deriveID(tc.parts...)
		validDerived(t, got)
		if again := deriveID(tc.parts...); again != got {
			t.Fatalf("deriveID(%q) = %q then %q", tc.parts, got, again)
		}
	}
	// Ids that are valid as joined stay as they were.
	if got := replyID("m1"); got != "m1-reply" {
		t.Fatalf("replyID(m1) = %q", got)
	}
	if got := taskID("m1", 2); got != "m1-t2" {
		t.Fatalf("taskID(m1, 2) = %q", got)
	}
	// Distinct inputs that clean up or cut to the same text stay distinct,
	// and a readable prefix is kept.
	distinct := map[string]string{}
	for _, in := range []string{"call 1", "call_1", "call/1", id128 + "-reply", id128 + "-t0", id128 + "-t1", id128[:127] + "b-reply"} {
		got := deriveID(in)
		if prev, dup := distinct[got]; dup {
			t.Fatalf("%q and %q both derive %q", prev, in, got)
		}
		distinct[got] = in
	}
	if got := taskID(id128, 0); !strings.HasPrefix(got, id128[:idPrefixMax]) {
		t.Fatalf("taskID of a long id lost its prefix: %q", got)
	}
}

// FuzzDeriveID: whatever a document id or a model says, the derived id is
// a legal id and the deepest path built with it is a legal path.
func FuzzDeriveID(f *testing.F) {
	f.Add("m1", "-reply")
	f.Add(strings.Repeat("x", 128), "-t0")
	f.Add("call/é", "")
	f.Add("..", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		validDerived(t, deriveID(a, b))
	})
}
