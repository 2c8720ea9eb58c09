package collections

import "strings"

// Path limits, as the README states them under Documents.
const (
	MaxPathBytes = 1024
	MaxIDBytes   = 128
)

// ValidSegment reports whether s is a legal path segment: [A-Za-z0-9_.-]+,
// and not "." or "..".
func ValidSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// countSegments validates the common rules and returns the number of
// segments. It walks the path in place: validation runs for every request
// path, so it allocates nothing unless the path is invalid.
func countSegments(p string, allowWildcard bool) (int, error) {
	if p == "" {
		return 0, invalidPath("empty path")
	}
	if len(p) > MaxPathBytes {
		return 0, invalidPath("path longer than %d bytes", MaxPathBytes)
	}
	i := 0
	for rest := p; ; i++ {
		s, next, more := strings.Cut(rest, "/")
		if !(allowWildcard && s == "*") {
			if !ValidSegment(s) {
				if s == "" {
					return 0, invalidPath("empty segment in %q", p)
				}
				return 0, invalidPath("segment %d %q in %q: use [A-Za-z0-9_.-], not . or ..", i+1, s, p)
			}
			if i%2 == 1 && len(s) > MaxIDBytes {
				return 0, invalidPath("document id longer than %d bytes", MaxIDBytes)
			}
		}
		if !more {
			return i + 1, nil
		}
		rest = next
	}
}

// ValidateDocPath checks a document path (even number of segments).
func ValidateDocPath(p string) error {
	n, err := countSegments(p, false)
	if err != nil {
		return err
	}
	if n%2 != 0 {
		return invalidPath("%q names a collection, not a document", p)
	}
	return nil
}

// ValidateCollectionPath checks a concrete collection path (odd number of
// segments, no wildcard).
func ValidateCollectionPath(p string) error {
	n, err := countSegments(p, false)
	if err != nil {
		return err
	}
	if n%2 != 1 {
		return invalidPath("%q names a document, not a collection", p)
	}
	return nil
}

// ValidateCollectionPattern checks a collection path that may use "*" for
// whole segments (a collection group such as "users/*/orch-chats/*/tasks").
func ValidateCollectionPattern(p string) error {
	n, err := countSegments(p, true)
	if err != nil {
		return err
	}
	if n%2 != 1 {
		return invalidPath("%q names a document, not a collection", p)
	}
	return nil
}

// SplitDocPath returns the collection path and id of a valid document path.
func SplitDocPath(p string) (collection, id string) {
	i := strings.LastIndexByte(p, '/')
	return p[:i], p[i+1:]
}

// IsSystemPath reports whether p lies in a system collection (first segment
// starts with "_").
func IsSystemPath(p string) bool { return strings.HasPrefix(p, "_") }

// IsLogged reports whether a write to the document at p appends a change
// to the log: true for every non-system path and for "_triggers/...", the
// trigger state every node follows ("Several nodes" in
// docs/architecture.md). Engines log exactly these writes. _triggers holds
// signing secrets: every other consumer of the log skips system paths
// (IsSystemPath).
func IsLogged(p string) bool {
	return !IsSystemPath(p) || strings.HasPrefix(p, "_triggers/")
}

// WildRoot reports whether a pattern's first segment is "*". Such a
// pattern never selects system collections (MatchCollection); every engine
// must exclude them where it selects documents, not only in Go.
func WildRoot(pattern string) bool {
	return pattern == "*" || strings.HasPrefix(pattern, "*/")
}

// IsPattern reports whether a collection path contains a wildcard segment.
func IsPattern(p string) bool {
	return p == "*" || strings.HasPrefix(p, "*/") || strings.HasSuffix(p, "/*") || strings.Contains(p, "/*/")
}

// Shape replaces every document-id segment (odd positions) of a collection
// path or pattern by "*": "users/u1/orch-chats/c1/tasks" and
// "users/*/orch-chats/*/tasks" both have shape "users/*/orch-chats/*/tasks".
// Engines index it to answer collection-group queries.
func Shape(collection string) string {
	if !strings.Contains(collection, "/") {
		return collection
	}
	segs := strings.Split(collection, "/")
	for i := 1; i < len(segs); i += 2 {
		segs[i] = "*"
	}
	return strings.Join(segs, "/")
}

// MatchCollection reports whether a concrete collection path matches a
// pattern whose "*" segments match exactly one segment each. A wildcard
// first segment never matches a system collection: Loom's own state
// (password hashes, keys, refresh tokens, outbox) is reached only by
// naming it, so no pattern a client sends — query, subscription, trigger —
// can select it. Engines apply the same rule when they select documents.
func MatchCollection(pattern, collection string) bool {
	if pattern == collection {
		return true
	}
	if WildRoot(pattern) && IsSystemPath(collection) {
		return false
	}
	for {
		pi := strings.IndexByte(pattern, '/')
		ci := strings.IndexByte(collection, '/')
		if (pi < 0) != (ci < 0) {
			return false
		}
		pseg, cseg := pattern, collection
		if pi >= 0 {
			pseg, cseg = pattern[:pi], collection[:ci]
		}
		if pseg != "*" && pseg != cseg {
			return false
		}
		if pi < 0 {
			return true
		}
		pattern, collection = pattern[pi+1:], collection[ci+1:]
	}
}
