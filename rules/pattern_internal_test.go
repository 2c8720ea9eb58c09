package rules

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
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
			caps, ok := p.match(tt.path, splitPath(nil, tt.path), nil)
			if ok != tt.ok {
				t.Fatalf("match=%v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			got := map[string]string{}
			for _, c := range caps {
				got[c.name] = c.value
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
		{"users/*", `segment 2 "*": a literal segment`},
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
			if got := p.mayMatch(splitPath(nil, tt.wild)); got != tt.want {
				t.Fatalf("mayMatch=%v, want %v", got, tt.want)
			}
		})
	}
}

// refRegexp is an independent implementation of a pattern as a regexp, the
// model FuzzPattern checks match against.
func refRegexp(p *pattern) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, s := range p.segs {
		if i > 0 {
			b.WriteString("/")
		}
		if s.name == "" {
			b.WriteString(regexp.QuoteMeta(s.lit))
		} else {
			b.WriteString("(?P<" + s.name + ">[^/]+)")
		}
	}
	if p.rest != "" {
		if len(p.segs) > 0 {
			b.WriteString("/")
		}
		b.WriteString("(?P<" + p.rest + ">[^/]+(?:/[^/]+)*)")
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// FuzzPattern compiles arbitrary patterns and matches them against arbitrary
// paths. Properties: nothing panics; match agrees with a regexp model,
// captures included; a matched path is rebuilt exactly from its captures;
// mayMatch is conservative (true whenever match is, also with any segments
// replaced by "*"); and compiling is deterministic.
func FuzzPattern(f *testing.F) {
	seeds := [][2]string{
		{"users/{uid}", "users/u1"},
		{"users/{uid}/{rest=**}", "users/a/notes/b"},
		{"users/{uid}/{rest=**}", "users/a"},
		{"{all=**}", "a/b/c"},
		{"a/{x}/b/{y}", "a/1/b/2"},
		{"users/{uid}", "users/"},
		{"{c}/{d}", "a//b"},
		{"users/*", "users/x"},
		{"a/{x=**}/b", "a/b"},
		{"", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], uint8(0))
	}
	f.Fuzz(func(t *testing.T, src, path string, wildMask uint8) {
		p, err := compilePattern(src)
		if err != nil {
			return
		}
		p2, err := compilePattern(src)
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Fatalf("compilePattern(%q) not deterministic", src)
		}
		segs := splitPath(nil, path)
		caps, ok := p.match(path, segs, nil)

		re := refRegexp(p)
		m := re.FindStringSubmatch(path)
		if (m != nil) != ok {
			t.Fatalf("match(%q, %q)=%v, regexp %s says %v", src, path, ok, re, m != nil)
		}
		if !ok {
			return
		}
		names := p.names()
		if len(caps) != len(names) {
			t.Fatalf("captures=%v, want names %v", caps, names)
		}
		for i, c := range caps {
			if c.name != names[i] || c.value != m[re.SubexpIndex(c.name)] {
				t.Fatalf("capture %d=%v, regexp has %q", i, c, m[re.SubexpIndex(c.name)])
			}
		}
		// Substituting the captures back into the pattern gives the path.
		var rebuilt []string
		ci := 0
		for _, s := range p.segs {
			if s.name == "" {
				rebuilt = append(rebuilt, s.lit)
			} else {
				rebuilt = append(rebuilt, caps[ci].value)
				ci++
			}
		}
		if p.rest != "" {
			rebuilt = append(rebuilt, caps[ci].value)
		}
		if got := strings.Join(rebuilt, "/"); got != path {
			t.Fatalf("rebuilt %q from captures of %q", got, path)
		}
		// mayMatch must be true for the path itself and for any version of
		// it with some segments turned into "*".
		wild := append([]string(nil), segs...)
		for i := range wild {
			if wildMask&(1<<(i%8)) != 0 {
				wild[i] = "*"
			}
		}
		if !p.mayMatch(segs) || !p.mayMatch(wild) {
			t.Fatalf("mayMatch false for %q / %q though match is true", path, strings.Join(wild, "/"))
		}
	})
}
