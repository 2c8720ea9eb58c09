package pathpattern

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
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
		// Empty segments never match, even a capture or a wildcard.
		{"{c}/{d}", "a/", false, nil},
		{"{all=**}", "a//b", false, nil},
		{"users/{uid}/{rest=**}", "users/a/", false, nil},
		{"users/{uid}", "users/u1.v2-x_y", true, map[string]string{"uid": "u1.v2-x_y"}},
		// * matches one segment and captures nothing.
		{"users/*", "users/u1", true, map[string]string{}},
		{"users/*", "users/", false, nil},
		{"users/*", "users/u1/x", false, nil},
		{"*/{id}/*", "a/b/c", true, map[string]string{"id": "b"}},
		{"*", "x", true, map[string]string{}},
		{"*", "x/y", false, nil},
		// A bare final ** matches one or more segments, uncaptured.
		{"users/**", "users/a", true, map[string]string{}},
		{"users/**", "users/a/b/c", true, map[string]string{}},
		{"users/**", "users", false, nil},
		{"users/**", "users/a//c", false, nil},
		{"users/{u}/**", "users/a/b", true, map[string]string{"u": "a"}},
		{"**", "a/b/c", true, map[string]string{}},
		{"*/**", "a", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.path, func(t *testing.T) {
			p, err := Compile(tt.pattern)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tt.pattern, err)
			}
			caps, ok := p.Match(tt.path, Split(nil, tt.path), nil)
			if ok != tt.ok {
				t.Fatalf("Match=%v, want %v", ok, tt.ok)
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

func TestCompile_Errors(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"", "empty pattern"},
		{"/users/{uid}", "segment 1 is empty"},
		{"users/{uid}/", "segment 3 is empty"},
		{"users//x", "segment 2 is empty"},
		{"users/..", `segment 2 ".."`},
		{"users/*x", `segment 2 "*x": a literal segment`},
		{"us{x}ers/a", "literal segment"},
		{"users/{uid", "a capture is a whole segment"},
		{"users/uid}", "a capture is a whole segment"},
		{"users/{}", "not an identifier"},
		{"users/{1a}", "not an identifier"},
		{"users/{a-b}", "not an identifier"},
		{"users/{**}", "not an identifier"},
		{"users/{x=*}", "only capture form"},
		{"users/{x=**}/a", "must be the last segment"},
		{"users/**/a", `segment 2 "**": ** must be the last segment`},
		{"**/**", `segment 1 "**"`},
		{"a/{x}/b/{x}", `duplicate capture name "x"`},
		{"a/{x}/{x=**}", `duplicate capture name "x"`},
		{strings.Repeat("a/", 600) + "b", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := Compile(tt.pattern)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err=%v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	p, err := Compile("a/*/{b}/{c=**}")
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != "a/*/{b}/{c=**}" || p.Segments() != 3 || !p.HasRest() || p.RestName() != "c" {
		t.Fatalf("got %q %d %v %q", p.String(), p.Segments(), p.HasRest(), p.RestName())
	}
	want := []Segment{{Literal: "a"}, {Wild: true}, {Name: "b"}}
	for i, w := range want {
		if p.Segment(i) != w {
			t.Errorf("Segment(%d)=%+v, want %+v", i, p.Segment(i), w)
		}
	}
	if got := p.Names(); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Errorf("Names=%v", got)
	}
	p, _ = Compile("x/**")
	if !p.HasRest() || p.RestName() != "" || p.Names() != nil {
		t.Errorf("x/**: HasRest=%v RestName=%q Names=%v", p.HasRest(), p.RestName(), p.Names())
	}
}

func TestMatch_NoAllocs(t *testing.T) {
	p, _ := Compile("users/{uid}/*/{rest=**}")
	path := "users/u1/notes/n1/x"
	var segBuf [16]string
	var capBuf [4]Capture
	allocs := testing.AllocsPerRun(100, func() {
		segs := Split(segBuf[:0], path)
		if _, ok := p.Match(path, segs, capBuf[:0]); !ok {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v times", allocs)
	}
}

func TestMayMatch(t *testing.T) {
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
		{"users/*", "users/x", true},
		{"*/x", "a/y", false},
		{"users/**", "users/a/b", true},
		{"users/**", "users", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.wild, func(t *testing.T) {
			p, err := Compile(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.MayMatch(Split(nil, tt.wild)); got != tt.want {
				t.Fatalf("MayMatch=%v, want %v", got, tt.want)
			}
		})
	}
}

func TestMustMatch(t *testing.T) {
	tests := []struct {
		pattern, wild string // wild: a path with "*" segments
		want          bool
	}{
		{"users/{uid}", "users/*", true},
		{"users/{uid}", "users/u1", true},
		{"users/{uid}", "*/*", false}, // "users" is not every first segment
		{"users/{uid}", "posts/*", false},
		{"users/u1/notes/{n}", "users/u1/notes/*", true},
		{"users/u1/notes/{n}", "users/*/notes/*", false}, // u1 is not every user
		{"users/{uid}/notes/{n}", "users/*/notes/*", true},
		{"users/{uid}/{rest=**}", "users/u1/notes/*", true},
		{"users/{uid}/{rest=**}", "users/*/*/*", true},
		{"users/{uid}/{rest=**}", "users/*", false}, // ** needs a segment
		{"users/{uid}/x/{rest=**}", "users/u1/*/*", false},
		{"{all=**}", "*/*", true},
		{"users/*", "users/*", true},
		{"users/{uid}", "users/*/notes/*", false},
		{"users/{uid}", "users/", false},
		{"users/**", "users/a/*", true},
		// Empty segments match nothing, under ** too.
		{"users/{uid}/{rest=**}", "users//notes/*", false},
		{"users/{uid}/{rest=**}", "users/u1//*", false},
		{"users/{uid}/{rest=**}", "users/u1/notes/", false},
		{"{all=**}", "", false},
		{"{all=**}", "/*", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.wild, func(t *testing.T) {
			p, err := Compile(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			segs := Split(nil, tt.wild)
			if got := p.MustMatch(segs); got != tt.want {
				t.Fatalf("MustMatch=%v, want %v", got, tt.want)
			}
			if tt.want && !p.MayMatch(segs) {
				t.Fatal("MustMatch without MayMatch")
			}
			if tt.want { // every instance matches: try some
				for _, v := range []string{"a", "users", "u1", "notes", "x"} {
					path := strings.ReplaceAll(tt.wild, "*", v)
					if _, ok := p.Match(path, Split(nil, path), nil); !ok {
						t.Fatalf("MustMatch, yet %q does not match", path)
					}
				}
			}
		})
	}
}

// refRegexp is an independent implementation of a pattern as a regexp, the
// model FuzzCompile checks Match against.
func refRegexp(p *Pattern) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, s := range p.segs {
		if i > 0 {
			b.WriteString("/")
		}
		switch {
		case s.Wild:
			b.WriteString("[^/]+")
		case s.Name == "":
			b.WriteString(regexp.QuoteMeta(s.Literal))
		default:
			b.WriteString("(?P<" + s.Name + ">[^/]+)")
		}
	}
	if p.rest {
		if len(p.segs) > 0 {
			b.WriteString("/")
		}
		if p.restName != "" {
			b.WriteString("(?P<" + p.restName + ">[^/]+(?:/[^/]+)*)")
		} else {
			b.WriteString("[^/]+(?:/[^/]+)*")
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// FuzzCompile compiles arbitrary patterns and matches them against arbitrary
// paths. Properties: nothing panics; Match agrees with a regexp model,
// captures included; a matched path without wildcards is rebuilt exactly
// from its captures; MayMatch is conservative (true whenever Match is, also
// with any segments replaced by "*"); String round-trips; and compiling is
// deterministic.
func FuzzCompile(f *testing.F) {
	seeds := [][2]string{
		{"users/{uid}", "users/u1"},
		{"users/{uid}/{rest=**}", "users/a/notes/b"},
		{"users/{uid}/{rest=**}", "users/a"},
		{"{all=**}", "a/b/c"},
		{"a/{x}/b/{y}", "a/1/b/2"},
		{"users/{uid}", "users/"},
		{"{c}/{d}", "a//b"},
		{"users/*", "users/x"},
		{"users/*/x/**", "users/a/x/b/c"},
		{"a/{x=**}/b", "a/b"},
		{"", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], uint8(0))
	}
	f.Fuzz(func(t *testing.T, src, path string, wildMask uint8) {
		p, err := Compile(src)
		if err != nil {
			return
		}
		p2, err := Compile(src)
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Fatalf("Compile(%q) not deterministic", src)
		}
		if p.String() != src {
			t.Fatalf("String()=%q, want %q", p.String(), src)
		}
		segs := Split(nil, path)
		caps, ok := p.Match(path, segs, nil)

		re := refRegexp(p)
		m := re.FindStringSubmatch(path)
		if (m != nil) != ok {
			t.Fatalf("Match(%q, %q)=%v, regexp %s says %v", src, path, ok, re, m != nil)
		}
		if !ok {
			return
		}
		names := p.Names()
		if len(caps) != len(names) {
			t.Fatalf("captures=%v, want names %v", caps, names)
		}
		for i, c := range caps {
			if c.Name != names[i] || c.Value != m[re.SubexpIndex(c.Name)] {
				t.Fatalf("capture %d=%v, regexp has %q", i, c, m[re.SubexpIndex(c.Name)])
			}
		}
		// Substituting the captures (and the path's own segments for the
		// wildcards) back into the pattern gives the path.
		var rebuilt []string
		ci := 0
		for i, s := range p.segs {
			switch {
			case s.Wild:
				rebuilt = append(rebuilt, segs[i])
			case s.Name == "":
				rebuilt = append(rebuilt, s.Literal)
			default:
				rebuilt = append(rebuilt, caps[ci].Value)
				ci++
			}
		}
		if p.restName != "" {
			rebuilt = append(rebuilt, caps[ci].Value)
		} else if p.rest {
			rebuilt = append(rebuilt, segs[len(p.segs):]...)
		}
		if got := strings.Join(rebuilt, "/"); got != path {
			t.Fatalf("rebuilt %q from captures of %q", got, path)
		}
		// MayMatch must be true for the path itself and for any version of
		// it with some segments turned into "*".
		wild := append([]string(nil), segs...)
		for i := range wild {
			if wildMask&(1<<(i%8)) != 0 {
				wild[i] = "*"
			}
		}
		if !p.MayMatch(segs) || !p.MayMatch(wild) {
			t.Fatalf("MayMatch false for %q / %q though Match is true", path, strings.Join(wild, "/"))
		}
	})
}
