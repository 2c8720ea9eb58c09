package rules

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// ErrInvalid is wrapped by every *Error: the rules source is not valid.
var ErrInvalid = errors.New("invalid security rules")

// Error is a problem in a rules source. It names the source, the rule
// (1-based, 0 for problems with the file as a whole) and what is wrong:
//
//	rules/security.toml: rule 2 (match "users/{uid}"): if: ERROR: <input>:1:5: undeclared reference to 'foo'
type Error struct {
	Name  string // the name given to Parse, or the file Load read
	Rule  int    // 1-based index of the [[rule]]; 0 when no rule is at fault
	Match string // the rule's match, when it has a string one
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Name != "" {
		b.WriteString(e.Name)
		b.WriteString(": ")
	}
	if e.Rule > 0 {
		fmt.Fprintf(&b, "rule %d", e.Rule)
		if e.Match != "" {
			fmt.Fprintf(&b, " (match %q)", e.Match)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

// Operation names accepted in allow, with the operations they grant.
var allowNames = map[string]opMask{
	"read":   maskOf(OpGet) | maskOf(OpList),
	"write":  maskOf(OpCreate) | maskOf(OpUpdate) | maskOf(OpDelete),
	"get":    maskOf(OpGet),
	"list":   maskOf(OpList),
	"create": maskOf(OpCreate),
	"update": maskOf(OpUpdate),
	"delete": maskOf(OpDelete),
}

const allowList = "read, write, get, list, create, update, delete"

// Load reads and parses a rules file; errors are named after path.
func Load(path string) (*Set, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err) // *PathError names the file
	}
	return Parse(src, path)
}

// Parse compiles a TOML rules source. name (usually the file name) prefixes
// every error. The source is a list of [[rule]] tables, each with exactly
// the keys match (a path pattern), allow (a non-empty list of operation
// names) and if (a CEL expression of type bool; "true" allows
// unconditionally). A source with no rules is valid and allows nothing.
// Errors are *Error, wrapping ErrInvalid; the first problem is reported.
func Parse(src []byte, name string) (*Set, error) {
	var doc struct {
		Rule []map[string]any `toml:"rule"`
	}
	md, err := toml.Decode(string(src), &doc)
	if err != nil {
		return nil, &Error{Name: name, Msg: err.Error()}
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, &Error{Name: name, Msg: fmt.Sprintf("unknown key %q (a rules file holds only [[rule]] tables)", und[0].String())}
	}
	s := &Set{rules: make([]*rule, 0, len(doc.Rule))}
	for i, raw := range doc.Rule {
		r, err := parseRule(raw)
		if err != nil {
			e := &Error{Name: name, Rule: i + 1, Msg: err.Error()}
			if m, ok := raw["match"].(string); ok {
				e.Match = m
			}
			return nil, e
		}
		s.rules = append(s.rules, r)
	}
	s.decisions = newDecisionCache(s.rules)
	s.mays = newMayCache(s.rules)
	return s, nil
}

// parseRule compiles one [[rule]] table.
func parseRule(raw map[string]any) (*rule, error) {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "match" && k != "allow" && k != "if" {
			return nil, fmt.Errorf("unknown key %q (a rule has match, allow and if)", k)
		}
	}

	r := &rule{}
	match, err := stringKey(raw, "match")
	if err != nil {
		return nil, err
	}
	if r.pat, err = compilePattern(match); err != nil {
		return nil, fmt.Errorf("match: %v", err)
	}

	av, ok := raw["allow"]
	if !ok {
		return nil, fmt.Errorf("allow: missing (a list of %s)", allowList)
	}
	list, ok := av.([]any)
	if !ok {
		return nil, fmt.Errorf("allow: must be a list of strings such as [\"read\"], not %s", tomlType(av))
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("allow: empty list (want some of %s)", allowList)
	}
	for _, v := range list {
		op, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("allow: %v is %s, not an operation name (want %s)", v, tomlType(v), allowList)
		}
		m, ok := allowNames[op]
		if !ok {
			return nil, fmt.Errorf("allow: unknown operation %q (want %s)", op, allowList)
		}
		r.ops |= m
	}

	if _, ok := raw["if"]; !ok {
		return nil, fmt.Errorf("if: missing (write if = \"true\" to allow unconditionally)")
	}
	r.src, err = stringKey(raw, "if")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.src) == "" {
		return nil, fmt.Errorf("if: empty expression (write \"true\" to allow unconditionally)")
	}
	prg, partial, a, err := compileExpr(r.src, r.pat.Names())
	if err != nil {
		return nil, fmt.Errorf("if: %v", err)
	}
	r.prg, r.partial = prg, partial
	r.refs = refsOf(a, r.pat.Names())
	if v, ok := literalBool(a); ok {
		r.constant = constFalse
		if v {
			r.constant = constTrue
		}
	}
	return r, nil
}

// stringKey returns the string value of a required key.
func stringKey(raw map[string]any, key string) (string, error) {
	v, ok := raw[key]
	if !ok {
		return "", fmt.Errorf("%s: missing", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: must be a string, not %s", key, tomlType(v))
	}
	return s, nil
}

// tomlType names the TOML type of a decoded value for error messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}
