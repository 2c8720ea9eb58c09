package rules

import (
	"fmt"
	"strings"

	"github.com/loomdb/loom/collections"
)

// maxPatternBytes bounds a match pattern; it is the same limit as a path.
const maxPatternBytes = 1024

// pattern is a compiled match pattern such as "users/{userId}/{rest=**}".
type pattern struct {
	src  string
	segs []segment
	// rest is the name of the trailing {name=**} capture, "" when there is
	// none. It is not part of segs.
	rest string
}

// segment is one fixed-width element of a pattern: a literal, or a capture
// of exactly one path segment.
type segment struct {
	lit  string // literal text; "" for a capture
	name string // capture name; "" for a literal
}

// capture is one bound path variable.
type capture struct {
	name, value string
}

// reservedNames cannot be capture names: CEL keywords, the built-in type
// names (an identifier such as int resolves to the type), and the variables
// the rules environment declares itself.
var reservedNames = map[string]bool{
	// CEL language keywords and reserved words.
	"as": true, "break": true, "const": true, "continue": true, "else": true,
	"false": true, "for": true, "function": true, "if": true, "import": true,
	"in": true, "let": true, "loop": true, "package": true, "namespace": true,
	"null": true, "return": true, "true": true, "var": true, "void": true,
	"while": true,
	// Type identifiers.
	"bool": true, "bytes": true, "double": true, "dyn": true, "int": true,
	"list": true, "map": true, "null_type": true, "string": true, "type": true,
	"uint": true,
	// Our own variables.
	"request": true, "resource": true,
}

// compilePattern parses a match pattern. Segments are separated by "/"; a
// segment is a literal ([A-Za-z0-9_.-], not "." or ".."), {name} (one path
// segment) or, as the last segment only, {name=**} (one or more segments).
// A pattern without {name=**} must have an even number of segments: rules
// apply to documents, and an odd count names a collection.
func compilePattern(src string) (*pattern, error) {
	if src == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	if len(src) > maxPatternBytes {
		return nil, fmt.Errorf("pattern longer than %d bytes", maxPatternBytes)
	}
	parts := strings.Split(src, "/")
	p := &pattern{src: src, segs: make([]segment, 0, len(parts))}
	seen := make(map[string]bool)
	for i, s := range parts {
		if s == "" {
			return nil, fmt.Errorf("segment %d is empty (no leading, trailing or double \"/\")", i+1)
		}
		if s[0] != '{' && s[len(s)-1] != '}' {
			if !collections.ValidSegment(s) {
				return nil, fmt.Errorf("segment %d %q: a literal segment uses [A-Za-z0-9_.-] and is not . or ..; capture a segment with {name}", i+1, s)
			}
			p.segs = append(p.segs, segment{lit: s})
			continue
		}
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return nil, fmt.Errorf("segment %d %q: a capture is a whole segment, {name} or {name=**}", i+1, s)
		}
		name, wild, isRest := strings.Cut(s[1:len(s)-1], "=")
		if isRest && wild != "**" {
			return nil, fmt.Errorf("segment %d %q: the only capture form with \"=\" is {name=**}", i+1, s)
		}
		if !isIdent(name) {
			return nil, fmt.Errorf("segment %d %q: capture name %q is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", i+1, s, name)
		}
		if reservedNames[name] {
			return nil, fmt.Errorf("segment %d %q: capture name %q is reserved", i+1, s, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("segment %d %q: duplicate capture name %q", i+1, s, name)
		}
		seen[name] = true
		if isRest {
			if i != len(parts)-1 {
				return nil, fmt.Errorf("segment %d %q: {name=**} must be the last segment", i+1, s)
			}
			p.rest = name
			continue
		}
		p.segs = append(p.segs, segment{name: name})
	}
	if p.rest == "" && len(p.segs)%2 != 0 {
		return nil, fmt.Errorf("pattern has %d segments and so names a collection; rules match documents (an even number of segments, or end with {name=**})", len(p.segs))
	}
	return p, nil
}

// names returns the capture names in pattern order.
func (p *pattern) names() []string {
	var ns []string
	for _, s := range p.segs {
		if s.name != "" {
			ns = append(ns, s.name)
		}
	}
	if p.rest != "" {
		ns = append(ns, p.rest)
	}
	return ns
}

// match reports whether the pattern consumes all of path, whose segments are
// segs (strings.Split(path, "/")). The captures are appended to caps. An
// empty path segment never matches anything.
func (p *pattern) match(path string, segs []string, caps []capture) ([]capture, bool) {
	n := len(p.segs)
	if len(segs) < n || (p.rest == "" && len(segs) != n) || (p.rest != "" && len(segs) == n) {
		return caps, false
	}
	off := 0 // byte offset of segs[i] in path
	for i, s := range p.segs {
		v := segs[i]
		if v == "" {
			return caps, false
		}
		if s.name == "" {
			if v != s.lit {
				return caps, false
			}
		} else {
			caps = append(caps, capture{s.name, v})
		}
		off += len(v) + 1
	}
	if p.rest != "" {
		for _, v := range segs[n:] {
			if v == "" {
				return caps, false
			}
		}
		caps = append(caps, capture{p.rest, path[off:]})
	}
	return caps, true
}

// mayMatch reports whether the pattern could match some path whose segments
// are segs, where a "*" segment stands for any one segment.
func (p *pattern) mayMatch(segs []string) bool {
	n := len(p.segs)
	if len(segs) < n || (p.rest == "" && len(segs) != n) || (p.rest != "" && len(segs) == n) {
		return false
	}
	for i, v := range segs {
		if v == "" {
			return false
		}
		if i < n && v != "*" && p.segs[i].name == "" && p.segs[i].lit != v {
			return false
		}
	}
	return true
}

// isIdent reports whether s is a CEL identifier: [A-Za-z_][A-Za-z0-9_]*.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// splitPath splits path on "/" into buf (reused when large enough).
func splitPath(buf []string, path string) []string {
	buf = buf[:0]
	for {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			return append(buf, path)
		}
		buf = append(buf, path[:i])
		path = path[i+1:]
	}
}
