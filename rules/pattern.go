package rules

import (
	"fmt"

	"github.com/loomdb/loom/internal/pathpattern"
)

// pattern is a compiled match pattern such as "users/{userId}/{rest=**}".
type pattern = pathpattern.Pattern

// capture is one bound path variable.
type capture = pathpattern.Capture

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

// compilePattern parses a match pattern (see pathpattern.Compile) with the
// rules' restrictions: no * or bare ** (every variable segment is captured,
// so conditions can refer to it), no reserved capture names, and a pattern
// without {name=**} must have an even number of segments: rules apply to
// documents, and an odd count names a collection.
func compilePattern(src string) (*pattern, error) {
	p, err := pathpattern.Compile(src)
	if err != nil {
		return nil, err
	}
	n := p.Segments()
	for i := 0; i < n; i++ {
		s := p.Segment(i)
		if s.Wild {
			return nil, fmt.Errorf("segment %d \"*\": rules do not use *; capture a segment with {name}", i+1)
		}
		if reservedNames[s.Name] {
			return nil, fmt.Errorf("segment %d \"{%s}\": capture name %q is reserved", i+1, s.Name, s.Name)
		}
	}
	if p.HasRest() {
		rest := p.RestName()
		if rest == "" {
			return nil, fmt.Errorf("segment %d \"**\": rules do not use a bare **; capture the rest with {name=**}", n+1)
		}
		if reservedNames[rest] {
			return nil, fmt.Errorf("segment %d \"{%s=**}\": capture name %q is reserved", n+1, rest, rest)
		}
	} else if n%2 != 0 {
		return nil, fmt.Errorf("pattern has %d segments and so names a collection; rules match documents (an even number of segments, or end with {name=**})", n)
	}
	return p, nil
}
