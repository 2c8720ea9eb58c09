package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/rules"
)

// MustParse compiles src or fails the test.
func MustParse(t testing.TB, src string) *rules.Set {
	t.Helper()
	s, err := rules.Parse([]byte(src), "test.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func TestParse_Errors(t *testing.T) {
	const ok = "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"true\"\n"
	tests := []struct {
		name, src string
		want      string // the whole error, or a prefix ending in "…"
	}{
		{"undeclared", ok + `[[rule]]
match = "users/{uid}"
allow = ["read"]
if = "foo == uid"
`, `test.toml: rule 2 (match "users/{uid}"): if: ERROR: <input>:1:1: undeclared reference to 'foo'…`},
		{"syntax", `[[rule]]
match = "users/{uid}"
allow = ["read"]
if = "request.auth.uid =="
`, `test.toml: rule 1 (match "users/{uid}"): if: ERROR: <input>:1:20: Syntax error…`},
		{"not bool", `[[rule]]
match = "users/{uid}"
allow = ["read"]
if = "uid + 'x'"
`, `test.toml: rule 1 (match "users/{uid}"): if: expression has type string, want bool`},
		{"int", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"1 + 2\"\n",
			`test.toml: rule 1 (match "a/{b}"): if: expression has type int, want bool`},
		{"missing if", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\n",
			`test.toml: rule 1 (match "a/{b}"): if: missing (write if = "true" to allow unconditionally)`},
		{"empty if", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"  \"\n",
			`test.toml: rule 1 (match "a/{b}"): if: empty expression…`},
		{"if not string", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = true\n",
			`test.toml: rule 1 (match "a/{b}"): if: must be a string, not a boolean`},
		{"bad allow value", ok + ok + "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\", \"reed\"]\nif = \"true\"\n",
			`test.toml: rule 3 (match "a/{b}"): allow: unknown operation "reed" (want read, write, get, list, create, update, delete)`},
		{"allow not list", "[[rule]]\nmatch = \"a/{b}\"\nallow = \"read\"\nif = \"true\"\n",
			`test.toml: rule 1 (match "a/{b}"): allow: must be a list of strings such as ["read"], not a string`},
		{"allow not strings", "[[rule]]\nmatch = \"a/{b}\"\nallow = [1]\nif = \"true\"\n",
			`test.toml: rule 1 (match "a/{b}"): allow: 1 is an integer…`},
		{"allow empty", "[[rule]]\nmatch = \"a/{b}\"\nallow = []\nif = \"true\"\n",
			`test.toml: rule 1 (match "a/{b}"): allow: empty list…`},
		{"allow missing", "[[rule]]\nmatch = \"a/{b}\"\nif = \"true\"\n",
			`test.toml: rule 1 (match "a/{b}"): allow: missing…`},
		{"match missing", "[[rule]]\nallow = [\"read\"]\nif = \"true\"\n",
			`test.toml: rule 1: match: missing`},
		{"match not string", "[[rule]]\nmatch = 3\nallow = [\"read\"]\nif = \"true\"\n",
			`test.toml: rule 1: match: must be a string, not an integer`},
		{"bad pattern", ok + "[[rule]]\nmatch = \"users/{uid\"\nallow = [\"read\"]\nif = \"true\"\n",
			`test.toml: rule 2 (match "users/{uid"): match: segment 2 "{uid": a capture is a whole segment…`},
		{"collection pattern", "[[rule]]\nmatch = \"users\"\nallow = [\"read\"]\nif = \"true\"\n",
			`test.toml: rule 1 (match "users"): match: pattern has 1 segments and so names a collection…`},
		{"duplicate capture", "[[rule]]\nmatch = \"a/{x}/b/{x}\"\nallow = [\"read\"]\nif = \"true\"\n",
			`test.toml: rule 1 (match "a/{x}/b/{x}"): match: segment 4 "{x}": duplicate capture name "x"`},
		{"unknown rule key", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"true\"\niff = \"x\"\n",
			`test.toml: rule 1 (match "a/{b}"): unknown key "iff" (a rule has match, allow and if)`},
		{"unknown top-level key", "version = 2\n" + ok,
			`test.toml: unknown key "version" (a rules file holds only [[rule]] tables)`},
		{"unknown table", ok + "[[rules]]\nmatch = \"a/{b}\"\n",
			`test.toml: unknown key "rules…`},
		{"toml syntax", "[[rule]\nmatch = 1\n", `test.toml: toml: …`},
		{"rule not table", "rule = 1\n", `test.toml: toml: …`},
		{"capture out of scope", ok + "[[rule]]\nmatch = \"c/{d}\"\nallow = [\"read\"]\nif = \"b == d\"\n",
			`test.toml: rule 2 (match "c/{d}"): if: ERROR: <input>:1:1: undeclared reference to 'b'…`},
		{"get arity", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"get(1) == null\"\n",
			`test.toml: rule 1 (match "a/{b}"): if: ERROR: <input>:1:4: found no matching overload for 'get' applied to '(int)'…`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse([]byte(tt.src), "test.toml")
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tt.want)
			}
			if !errors.Is(err, rules.ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid)=false for %v", err)
			}
			var re *rules.Error
			if !errors.As(err, &re) {
				t.Errorf("err is %T, want *rules.Error", err)
			}
			got := err.Error()
			if prefix, ok := strings.CutSuffix(tt.want, "…"); ok {
				if !strings.HasPrefix(got, prefix) {
					t.Fatalf("err=%q, want prefix %q", got, prefix)
				}
			} else if got != tt.want {
				t.Fatalf("err=%q, want %q", got, tt.want)
			}
		})
	}
}

func TestParse_Valid(t *testing.T) {
	tests := []struct {
		name, src string
		n         int
	}{
		{"empty", "", 0},
		{"comments only", "# nothing here\n", 0},
		{"default", rules.DefaultSource(), 9},
		{"all ops", `[[rule]]
match = "a/{b}"
allow = ["get", "list", "create", "update", "delete", "read", "write"]
if = "true"

[[rule]]
match = "{all=**}"
allow = ["read"]
if = "false"
`, 2},
		{"dyn result", "[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"request.auth.claims.ok\"\n", 1},
		{"functions", `[[rule]]
match = "teams/{t}/docs/{d}"
allow = ["read"]
if = "exists('teams/' + t) && get('teams/' + t).data.open == true && [1, 2].exists(x, x == 2)"
`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MustParse(t, tt.src).Len(); got != tt.n {
				t.Fatalf("Len=%d, want %d", got, tt.n)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	good := filepath.Join(dir, "security.toml")
	if err := os.WriteFile(good, []byte(rules.DefaultSource()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := rules.Load(good)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Len() != rules.Default().Len() {
		t.Fatalf("Len=%d, want %d", s.Len(), rules.Default().Len())
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[[rule]]\nmatch = \"users/{uid}\"\nallow = [\"read\"]\nif = \"foo\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = rules.Load(bad)
	if want := bad + `: rule 1 (match "users/{uid}"): if: ERROR: <input>:1:1: undeclared reference to 'foo'`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err=%v, want prefix %q", err, want)
	}

	_, err = rules.Load(filepath.Join(dir, "missing.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err=%v, want os.ErrNotExist", err)
	}
}

func TestDefault(t *testing.T) {
	if rules.Default() != rules.Default() {
		t.Fatal("Default returned two different Sets")
	}
	if n := rules.Default().Len(); n != 9 {
		t.Fatalf("Len=%d, want 9", n)
	}
}
