package rules

import (
	"strings"
	"testing"
)

// TestSecurityTOML_Examples compiles the commented-out examples of the
// built-in security.toml too, so the documentation cannot rot.
func TestSecurityTOML_Examples(t *testing.T) {
	var src []byte
	inExamples := false
	for _, line := range strings.Split(defaultSource, "\n") {
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
