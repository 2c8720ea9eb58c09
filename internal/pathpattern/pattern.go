// Package pathpattern compiles and matches slash-separated path patterns
// such as "users/{userId}/notes/*" or "public/{rest=**}". The security
// rules and the triggers share it.
package pathpattern

import (
	"fmt"
	"strings"

	"github.com/loomdb/loom/collections"
)

// MaxBytes bounds a pattern; it is the same limit as a path.
const MaxBytes = collections.MaxPathBytes

// Pattern is a compiled pattern. It is immutable and safe for concurrent use.
type Pattern struct {
	src  string
	segs []Segment
	// rest is true when the pattern ends with ** or {name=**}, which is not
	// part of segs; restName is the capture name ("" for a bare **).
	rest     bool
	restName string
}

// Segment is one fixed-width element of a pattern: a literal, a capture
// {name} of one path segment, or the wildcard * (one segment, not
// captured). Exactly one of Literal, Name and Wild is set.
type Segment struct {
	Literal string
	Name    string
	Wild    bool
}

// Capture is one bound path variable.
type Capture struct {
	Name, Value string
}

// Compile parses a pattern. Segments are separated by "/"; a segment is a
// literal ([A-Za-z0-9_.-], not "." or ".."), * (any one segment), {name}
// (one segment, captured) or, as the last segment only, ** or {name=**}
// (one or more segments; the latter captured as the rest of the path).
// Capture names are identifiers ([A-Za-z_][A-Za-z0-9_]*) and unique.
// Errors name the offending segment.
func Compile(src string) (*Pattern, error) {
	if src == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	if len(src) > MaxBytes {
		return nil, fmt.Errorf("pattern longer than %d bytes", MaxBytes)
	}
	n := strings.Count(src, "/") + 1
	p := &Pattern{src: src, segs: make([]Segment, 0, n)}
	var seen []string
	rest := src
	for i := 0; i < n; i++ {
		s := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			s, rest = rest[:j], rest[j+1:]
		}
		last := i == n-1
		switch {
		case s == "":
			return nil, fmt.Errorf("segment %d is empty (no leading, trailing or double \"/\")", i+1)
		case s == "*":
			p.segs = append(p.segs, Segment{Wild: true})
			continue
		case s == "**":
			if !last {
				return nil, fmt.Errorf("segment %d \"**\": ** must be the last segment", i+1)
			}
			p.rest = true
			continue
		case s[0] != '{' && s[len(s)-1] != '}':
			if !collections.ValidSegment(s) {
				return nil, fmt.Errorf("segment %d %q: a literal segment uses [A-Za-z0-9_.-] and is not . or ..; match any segment with * or capture it with {name}", i+1, s)
			}
			p.segs = append(p.segs, Segment{Literal: s})
			continue
		}
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return nil, fmt.Errorf("segment %d %q: a capture is a whole segment, {name} or {name=**}", i+1, s)
		}
		name, wild, isRest := strings.Cut(s[1:len(s)-1], "=")
		if isRest && wild != "**" {
			return nil, fmt.Errorf("segment %d %q: the only capture form with \"=\" is {name=**}", i+1, s)
		}
		if !IsIdent(name) {
			return nil, fmt.Errorf("segment %d %q: capture name %q is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", i+1, s, name)
		}
		for _, x := range seen {
			if x == name {
				return nil, fmt.Errorf("segment %d %q: duplicate capture name %q", i+1, s, name)
			}
		}
		seen = append(seen, name)
		if isRest {
			if !last {
				return nil, fmt.Errorf("segment %d %q: {name=**} must be the last segment", i+1, s)
			}
			p.rest, p.restName = true, name
			continue
		}
		p.segs = append(p.segs, Segment{Name: name})
	}
	return p, nil
}

// String returns the source of the pattern.
func (p *Pattern) String() string { return p.src }

// Segments returns the number of fixed-width segments (literals, * and
// {name}); a final ** or {name=**} is not counted.
func (p *Pattern) Segments() int { return len(p.segs) }

// Segment returns fixed-width segment i (0-based, i < Segments()).
func (p *Pattern) Segment(i int) Segment { return p.segs[i] }

// HasRest reports whether the pattern ends with ** or {name=**}.
func (p *Pattern) HasRest() bool { return p.rest }

// RestName is the name of the final {name=**} capture; "" when there is none
// (also for a bare **).
func (p *Pattern) RestName() string { return p.restName }

// Names returns the capture names in pattern order.
func (p *Pattern) Names() []string {
	var ns []string
	for _, s := range p.segs {
		if s.Name != "" {
			ns = append(ns, s.Name)
		}
	}
	if p.restName != "" {
		ns = append(ns, p.restName)
	}
	return ns
}

// lengthOK reports whether a path of n segments has the right length.
func (p *Pattern) lengthOK(n int) bool {
	if p.rest {
		return n > len(p.segs)
	}
	return n == len(p.segs)
}

// Match reports whether the pattern consumes all of path, whose segments are
// segs (Split(nil, path)). The captures are appended to caps, in pattern
// order. An empty path segment never matches anything.
func (p *Pattern) Match(path string, segs []string, caps []Capture) ([]Capture, bool) {
	if !p.lengthOK(len(segs)) {
		return caps, false
	}
	off := 0 // byte offset of segs[i] in path
	for i, s := range p.segs {
		v := segs[i]
		if v == "" {
			return caps, false
		}
		switch {
		case s.Name != "":
			caps = append(caps, Capture{s.Name, v})
		case !s.Wild && v != s.Literal:
			return caps, false
		}
		off += len(v) + 1
	}
	if p.rest {
		for _, v := range segs[len(p.segs):] {
			if v == "" {
				return caps, false
			}
		}
		if p.restName != "" {
			caps = append(caps, Capture{p.restName, path[off:]})
		}
	}
	return caps, true
}

// MayMatch reports whether the pattern could match some path whose segments
// are segs, where a "*" segment in segs stands for any one segment.
func (p *Pattern) MayMatch(segs []string) bool {
	if !p.lengthOK(len(segs)) {
		return false
	}
	for i, v := range segs {
		if v == "" {
			return false
		}
		if i < len(p.segs) && v != "*" && p.segs[i].Literal != "" && p.segs[i].Literal != v {
			return false
		}
	}
	return true
}

// MustMatch reports whether the pattern matches every path whose segments
// are segs, a "*" segment in segs standing for any one segment: the
// pattern has the right length for it and each "*" falls on a capture, a
// wildcard or the final **. MustMatch implies MayMatch.
func (p *Pattern) MustMatch(segs []string) bool {
	if !p.lengthOK(len(segs)) {
		return false
	}
	for i, v := range segs {
		if v == "" {
			return false
		}
		if i >= len(p.segs) {
			continue // under the final **: any segment
		}
		if lit := p.segs[i].Literal; lit != "" && lit != v {
			return false // a literal never matches every segment ("*" included)
		}
	}
	return true
}

// IsIdent reports whether s is an identifier: [A-Za-z_][A-Za-z0-9_]*.
func IsIdent(s string) bool {
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

// Split splits path on "/" into buf (reused when large enough).
func Split(buf []string, path string) []string {
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
