package collections

import (
	"strings"
	"testing"
)

// splitPathReference is the validation countSegments replaced (strings.Split,
// then each segment): the two must agree on every path, error text included.
func splitPathReference(p string, allowWildcard bool) (int, error) {
	if p == "" {
		return 0, invalidPath("empty path")
	}
	if len(p) > MaxPathBytes {
		return 0, invalidPath("path longer than %d bytes", MaxPathBytes)
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if allowWildcard && s == "*" {
			continue
		}
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
	return len(segs), nil
}

func checkCountSegments(t *testing.T, p string) {
	t.Helper()
	for _, wild := range []bool{false, true} {
		n, err := countSegments(p, wild)
		wn, werr := splitPathReference(p, wild)
		if n != wn || (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("countSegments(%q, %v) = %d, %v; the reference says %d, %v", p, wild, n, err, wn, werr)
		}
	}
}

func TestCountSegmentsMatchesSplit(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	for _, p := range []string{
		"", "/", "//", "a", "a/", "/a", "a//b", "a/b", "a/b/c", "a/*", "*/b", "*", "a/*/c/*",
		"a/.", "a/..", "./a", "a/b c", "users/u1/items/x-1_2.3", "a/" + long, long + "/b",
		"a/b/c/" + long, strings.Repeat("a/", MaxPathBytes/2) + "a", "a/\x00", "a/é",
	} {
		checkCountSegments(t, p)
	}
}

func FuzzCountSegments(f *testing.F) {
	for _, p := range []string{"a/b", "a//b", "*/x", "a/" + strings.Repeat("y", MaxIDBytes+1), "a/b/"} {
		f.Add(p)
	}
	f.Fuzz(checkCountSegments)
}

// Validating a valid path allocates nothing: it runs on every request.
func TestValidatePathAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		_ = ValidateDocPath("users/u1/items/01a2109d-d797-7e21-8511-0db519dfe664")
		_ = ValidateCollectionPath("users/u1/items")
		_ = ValidateCollectionPattern("users/*/items")
	}); n != 0 {
		t.Fatalf("%v allocations per validation", n)
	}
}
