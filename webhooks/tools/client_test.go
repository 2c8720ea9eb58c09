package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func clientDef(mod func(*Def)) []Def {
	d := Def{Name: "pick_file", Description: "Let the user pick a file", ExecutionType: ExecClient,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"accept": map[string]any{"type": "string"}}, "required": []any{"accept"}}}
	if mod != nil {
		mod(&d)
	}
	return []Def{d}
}

func TestClientTool_RegisteredNeverRun(t *testing.T) {
	r := mustNew(t, clientDef(func(d *Def) { d.Visibility = VisibilityResultOnly }), Deps{})
	d, ok := r.Get("pick_file")
	if !ok || !d.IsClient() || d.Visibility != VisibilityResultOnly || d.ClientTimeout != DefaultClientTimeout.Milliseconds() {
		t.Fatalf("def = %+v", d)
	}
	if d.ClientTimeoutDuration() != DefaultClientTimeout {
		t.Fatalf("timeout %v", d.ClientTimeoutDuration())
	}
	if got := r.Names(); got[len(got)-1] != "pick_file" {
		t.Fatalf("names %v", got)
	}
	// Run refuses it, with valid arguments or not.
	for _, args := range []string{`{"accept":"image/*"}`, `{}`, `nope`} {
		v, err := r.Run(context.Background(), "pick_file", args, Call{UserID: "u1"})
		if !errors.Is(err, ErrClientTool) || errors.Is(err, ErrInvalidArgs) || v != nil {
			t.Fatalf("Run(%s) = %v, %v; want ErrClientTool", args, v, err)
		}
		if !strings.Contains(err.Error(), "pick_file is executed by the client app") {
			t.Fatalf("message %q", err)
		}
	}
	// Check validates the arguments against its schema without running it.
	if err := r.Check("pick_file", `{"accept":"image/*"}`); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, r.Check("pick_file", `{"accept": 3}`), "pick_file", `"/accept"`)
	wantInvalid(t, r.Check("pick_file", `[1]`), "JSON object")
	wantInvalid(t, r.Check("nope", `{}`), "unknown tool")
	// and the server tools as Run would.
	wantInvalid(t, r.Check("calculator", `{}`), "expression")
	if err := r.Check("calculator", `{"expression":"1+1"}`); err != nil {
		t.Fatal(err)
	}
	// The runner behind it refuses too.
	if _, err := r.tools["pick_file"].run(context.Background(), nil, Call{}); !errors.Is(err, ErrClientTool) {
		t.Fatalf("runner: %v", err)
	}
}

func TestClientTool_Timeout(t *testing.T) {
	r := mustNew(t, clientDef(func(d *Def) { d.ClientTimeout = 1500 }), Deps{})
	if d, _ := r.Get("pick_file"); d.ClientTimeoutDuration() != 1500*time.Millisecond {
		t.Fatalf("timeout %v", d.ClientTimeoutDuration())
	}
	for _, ms := range []int64{MinClientTimeoutMillis, MaxClientTimeoutMillis} {
		mustNew(t, clientDef(func(d *Def) { d.ClientTimeout = ms }), Deps{})
	}
}

func TestClientTool_BadDefinitions(t *testing.T) {
	for _, c := range []struct {
		name  string
		defs  []Def
		wants []string
	}{
		{"timeout too short", clientDef(func(d *Def) { d.ClientTimeout = 999 }), []string{`tool "pick_file"`, "clientTimeout (client_timeout) 999", "1000..86400000"}},
		{"timeout too long", clientDef(func(d *Def) { d.ClientTimeout = MaxClientTimeoutMillis + 1 }), []string{"clientTimeout"}},
		{"negative timeout", clientDef(func(d *Def) { d.ClientTimeout = -1 }), []string{"clientTimeout"}},
		{"with execution", clientDef(func(d *Def) { d.Execution = &HTTPExecution{URL: "https://x/"} }), []string{`tool "pick_file"`, "execution is not allowed"}},
		{"bad visibility", clientDef(func(d *Def) { d.Visibility = "secret" }), []string{`tool "pick_file"`, "visibility"}},
		{"bad schema", clientDef(func(d *Def) { d.InputSchema = map[string]any{"type": "array"} }), []string{`tool "pick_file"`, `"type": "object"`}},
		{"bad name", clientDef(func(d *Def) { d.Name = "a b" }), []string{"name"}},
		{"shadows builtin", clientDef(func(d *Def) { d.Name = "calculator" }), []string{`tool "calculator"`, "duplicate"}},
		{"duplicate", append(clientDef(nil), clientDef(nil)...), []string{"duplicate"}},
		{"timeout on http", []Def{{Name: "h", ExecutionType: ExecHTTP, ClientTimeout: 5000, Execution: &HTTPExecution{URL: "https://x/"}}}, []string{`tool "h"`, "clientTimeout", `only for executionType "client"`}},
		{"timeout on builtin", []Def{{Name: "calculator", ExecutionType: ExecBuiltin, ClientTimeout: 5000}}, []string{"clientTimeout"}},
		{"execution type list", clientDef(func(d *Def) { d.ExecutionType = "gateway" }), []string{`"client"`}},
	} {
		_, err := New(c.defs, Deps{})
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", c.name, err, w)
			}
		}
	}
}

func TestClientTool_LoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tools.json")
	os.WriteFile(p, []byte(`[{"name": "pick_file", "description": "d", "executionType": "client", "clientTimeout": 60000,
  "visibility": "hidden", "inputSchema": {"type": "object"}}]`), 0o600)
	defs, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r := mustNew(t, defs, Deps{})
	d, _ := r.Get("pick_file")
	if !d.IsClient() || d.ClientTimeout != 60000 || d.Visibility != VisibilityHidden {
		t.Fatalf("%+v", d)
	}
}
