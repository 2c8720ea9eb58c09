package rules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/loomdb/loom/internal/pathpattern"
)

func TestPattern_Match(t *testing.T) {
	tests := []struct {
		pattern, path string
		ok            bool
		caps          map[string]string
	}{
		{"users/{uid}", "users/u1", true, map[string]string{"uid": "u1"}},
		{"users/{uid}", "users/u1/notes/n1", false, nil}, // trailing segments
		{"users/{uid}", "posts/u1", false, nil},
		{"users/u1", "users/u1", true, map[string]string{}},
		{"users/u1", "users/u2", false, nil},
		{"users/{uid}/notes/{nid}", "users/a/notes/b", true, map[string]string{"uid": "a", "nid": "b"}},
		{"users/{uid}/notes/{nid}", "users/a/tasks/b", false, nil},
		{"users/{uid}/notes/{nid}", "users/a", false, nil}, // too short
		{"users/{uid}/{rest=**}", "users/a/notes/b", true, map[string]string{"uid": "a", "rest": "notes/b"}},
		{"users/{uid}/{rest=**}", "users/a/notes/b/c/d", true, map[string]string{"uid": "a", "rest": "notes/b/c/d"}},
		{"users/{uid}/{rest=**}", "users/a/x", true, map[string]string{"uid": "a", "rest": "x"}},
		{"users/{uid}/{rest=**}", "users/a", false, nil}, // ** needs at least one segment
		{"users/{uid}/{rest=**}", "posts/a/notes/b", false, nil},
		{"{all=**}", "a/b", true, map[string]string{"all": "a/b"}},
		{"{all=**}", "a", true, map[string]string{"all": "a"}},
		{"{c}/{d}", "a/b", true, map[string]string{"c": "a", "d": "b"}},
		{"{c}/{d}", "a/b/c/d", false, nil},
		// Empty segments never match, even a capture.
		{"{c}/{d}", "a/", false, nil},
		{"{all=**}", "a//b", false, nil},
		{"users/{uid}/{rest=**}", "users/a/", false, nil},
		{"users/{uid}", "users/u1.v2-x_y", true, map[string]string{"uid": "u1.v2-x_y"}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.path, func(t *testing.T) {
			p, err := compilePattern(tt.pattern)
			if err != nil {
				t.Fatalf("compilePattern(%q): %v", tt.pattern, err)
			}
			caps, ok := p.Match(tt.path, pathpattern.Split(nil, tt.path), nil)
			if ok != tt.ok {
				t.Fatalf("match=%v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			got := map[string]string{}
			for _, c := range caps {
				got[c.Name] = c.Value
			}
			if !reflect.DeepEqual(got, tt.caps) {
				t.Fatalf("captures=%v, want %v", got, tt.caps)
			}
		})
	}
}

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
