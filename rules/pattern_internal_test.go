package rules

import (
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/pathpattern"
)

// Matching itself is tested in internal/pathpattern; these tests cover what
// rules add: reserved capture names, document parity, no wildcards.

func TestCompilePattern_Errors(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"", "empty pattern"},
		{"users", "names a collection"},
		{"users/{uid}/notes", "names a collection"},
		{"/users/{uid}", "segment 1 is empty"},
		{"users/{uid}/", "segment 3 is empty"},
		{"users//x", "segment 2 is empty"},
		{"users/*", `segment 2 "*": rules do not use *`},
		{"users/**", `segment 2 "**": rules do not use a bare **`},
		{"users/{u}/{int=**}", `capture name "int" is reserved`},
		{"users/..", `segment 2 ".."`},
		{"us{x}ers/a", "literal segment"},
		{"users/{uid", "a capture is a whole segment"},
		{"users/uid}", "a capture is a whole segment"},
		{"users/{}", "not an identifier"},
		{"users/{1a}", "not an identifier"},
		{"users/{a-b}", "not an identifier"},
		{"users/{in}", `capture name "in" is reserved`},
		{"users/{request}", `capture name "request" is reserved`},
		{"users/{int}", `capture name "int" is reserved`},
		{"users/{x=*}", "only capture form"},
		{"users/{x=**}/a", "must be the last segment"},
		{"a/{x}/b/{x}", `duplicate capture name "x"`},
		{"a/{x}/{x=**}", `duplicate capture name "x"`},
		{strings.Repeat("a/", 600) + "b", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := compilePattern(tt.pattern)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err=%v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPattern_MayMatch(t *testing.T) {
	tests := []struct {
		pattern, wild string // wild: a path with "*" segments
		want          bool
	}{
		{"users/{uid}", "users/*", true},
		{"users/{uid}", "posts/*", false},
		{"users/{uid}", "*/*", true},
		{"users/u1/notes/{n}", "users/*/notes/*", true},
		{"users/u1/notes/{n}", "users/u2/notes/*", false},
		{"users/{uid}/{rest=**}", "users/*", false},
		{"users/{uid}/{rest=**}", "users/u1/notes/*", true},
		{"users/{uid}/{rest=**}", "users/*/a/*/b/*", true},
		{"{all=**}", "x/*", true},
		{"users/{uid}", "users/*/notes/*", false},
		{"users/{uid}", "/*", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.wild, func(t *testing.T) {
			p, err := compilePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.MayMatch(pathpattern.Split(nil, tt.wild)); got != tt.want {
				t.Fatalf("mayMatch=%v, want %v", got, tt.want)
			}
		})
	}
}
