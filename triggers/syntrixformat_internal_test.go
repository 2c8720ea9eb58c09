package triggers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/pathpattern"
)

// FuzzTokenScope: whatever tokenScope a trigger was accepted with, and
// whatever document it fires on, the scope of the token is concrete (no
// capture left), never a system collection, names documents, and the
// default scope covers the event's own document.
func FuzzTokenScope(f *testing.F) {
	for _, s := range [][3]string{
		{"users/{u}/chats/{c}/m", `["users/{u}/**","audit/{c}"]`, "users/u1/chats/c1/m/d1"},
		{"a/{x=**}", `["b/{x}/**"]`, "a/p/q/r/d"},
		{"*", `["*/**"]`, "top/d"},
		{"users/{u}/inbox", `null`, "users/u.1/inbox/m-1"},
		{"users/{u}/inbox", `["users/{u}/notes/{u}"]`, "users/u1/inbox/m"},
		{"{a}/inbox", `["{a}/**"]`, "_users/inbox/m"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, collection, scopeJSON, docPath string) {
		var scope []string
		if json.Unmarshal([]byte(scopeJSON), &scope) != nil {
			return
		}
		c, err := Compile(Trigger{ID: "f", Collection: collection, Events: []string{"create"}, URL: "https://e.com", Format: FormatSyntrix, TokenScope: scope}, nil)
		if err != nil || collections.ValidateDocPath(docPath) != nil {
			return
		}
		coll, _ := collections.SplitDocPath(docPath)
		params, ok := c.Match("default", collections.OpCreate, coll)
		if !ok {
			return
		}
		out, err := c.tokenScope(params, coll)
		if err != nil && collections.IsSystemPath(docPath) {
			return // refused: system documents have no events, and get no token
		}
		if err != nil {
			t.Fatalf("accepted trigger %q %v: binding for %s failed: %v", collection, scope, docPath, err)
		}
		for _, s := range out {
			p, err := pathpattern.Compile(s)
			if err != nil {
				t.Fatalf("bound scope %q does not compile: %v", s, err)
			}
			if len(p.Names()) != 0 || strings.HasPrefix(s, "_") || (!p.HasRest() && p.Segments()%2 != 0) {
				t.Fatalf("bound scope %q: captures, system or no documents", s)
			}
		}
		if scope == nil {
			p, _ := pathpattern.Compile(out[0])
			if _, ok := p.Match(docPath, pathpattern.Split(nil, docPath), nil); !ok {
				t.Fatalf("default scope %q does not cover %s", out[0], docPath)
			}
		}
	})
}

// TestLoggedResponse: the receiver's answer kept in the delivery log has
// the preIssuedToken redacted, and without a token (every delivery not in
// the Syntrix format) it costs one copy, as before that format existed
// (redacting through string conversions cost two more copies of up to
// 4 KiB per attempt).
func TestLoggedResponse(t *testing.T) {
	const tok = "eyJhbGciOiJIUzI1NiJ9.eyJ0eXAiOiJ0cmlnZ2VyIn0.c2ln"
	if got, want := loggedResponse([]byte(`{"echo":"`+tok+`","again":"`+tok+`"}`), tok), `{"echo":"[preIssuedToken]","again":"[preIssuedToken]"}`; got != want {
		t.Errorf("loggedResponse = %s, want %s", got, want)
	}
	if got := loggedResponse([]byte("ok "+tok), ""); got != "ok "+tok {
		t.Errorf("without a token: %q", got)
	}
	body := []byte(strings.Repeat("x", maxResponse))
	if n := testing.AllocsPerRun(100, func() { _ = loggedResponse(body, "") }); n > 1 {
		t.Errorf("loggedResponse without a token: %v allocations, want 1 (the string)", n)
	}
}

// A receiver's answer is stored without the token, also when the answer
// was cut off inside it (an echo whose token straddles maxResponse): what
// is left of a cut token goes too.
func TestRedactToken(t *testing.T) {
	tok := "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ0eXAiOiJ0cmlnZ2VyIn0.c2lnbmF0dXJlLW9mLXRoZS10cmlnZ2VyLXRva2VuLXh4eA"
	for _, c := range []struct{ in, want string }{
		{`{"preIssuedToken":"` + tok + `","x":1}`, `{"preIssuedToken":"[preIssuedToken]","x":1}`},
		{`{"preIssuedToken":"` + tok[:len(tok)-2], `{"preIssuedToken":"[preIssuedToken]`},
		{`{"preIssuedToken":"` + tok[:40], `{"preIssuedToken":"[preIssuedToken]`},
		{`{"a":"` + tok[:8], `{"a":"` + tok[:8]}, // a JWT's first characters are anyone's
		{"plain answer", "plain answer"},
	} {
		if got := string(redactToken([]byte(c.in), tok)); got != c.want {
			t.Errorf("redactToken(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
