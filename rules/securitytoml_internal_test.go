package rules

import (
	"os"
	"strings"
	"testing"
)

// TestSecurityTOML_MatchesDefault checks that the shipped security.toml
// compiles to the same rules as DefaultSource.
func TestSecurityTOML_MatchesDefault(t *testing.T) {
	got, err := Load("security.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if got.Len() != want.Len() {
		t.Fatalf("Len=%d, want %d", got.Len(), want.Len())
	}
	for i := range want.rules {
		g, w := got.rules[i], want.rules[i]
		if g.pat.String() != w.pat.String() || g.ops != w.ops || g.src != w.src || g.constant != w.constant {
			t.Errorf("rule %d: security.toml has (%q, %b, %q), DefaultSource (%q, %b, %q)",
				i+1, g.pat.String(), g.ops, g.src, w.pat.String(), w.ops, w.src)
		}
	}
}

// TestSecurityTOML_Examples compiles the commented-out examples too, so the
// documentation cannot rot.
func TestSecurityTOML_Examples(t *testing.T) {
	b, err := os.ReadFile("security.toml")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	inExamples := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "# Examples (not active):":
			inExamples = true
		case inExamples && strings.HasPrefix(line, "#   "):
			src = append(src, line[4:]+"\n"...)
		case inExamples && line != "#":
			inExamples = false
		}
	}
	s, err := Parse(src, "examples")
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("Len=%d, want 3 examples", s.Len())
	}
}
