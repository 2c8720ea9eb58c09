package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

func mustNew(t *testing.T, extra []Def, deps Deps) *Registry {
	t.Helper()
	r, err := New(extra, deps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func run(t *testing.T, r *Registry, name, args string, call Call) (string, error) {
	t.Helper()
	v, err := r.Run(context.Background(), name, args, call)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("result not JSON-serializable: %v", err)
	}
	return string(b), nil
}

func wantInvalid(t *testing.T, err error, substrs ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidArgs) {
		t.Fatalf("err = %v, want ErrInvalidArgs", err)
	}
	for _, s := range substrs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("err = %q, want it to mention %q", err, s)
		}
	}
}

func TestNamesAndGet(t *testing.T) {
	r := mustNew(t, nil, Deps{})
	if got := strings.Join(r.Names(), ","); got != "current_time,calculator,http_get" {
		t.Fatalf("names without Query = %s", got)
	}
	r = mustNew(t, []Def{{Name: "calculator", ExecutionType: "builtin", Description: "math", Visibility: "hidden"}},
		Deps{Query: func(context.Context, collections.Query) ([]*collections.Document, error) { return nil, nil }})
	if got := strings.Join(r.Names(), ","); got != "current_time,calculator,query_documents,http_get" {
		t.Fatalf("names = %s", got)
	}
	d, ok := r.Get("calculator")
	if !ok || d.Description != "math" || d.Visibility != "hidden" || d.InputSchema["type"] != "object" {
		t.Fatalf("override: %+v", d)
	}
	d, _ = r.Get("current_time")
	if d.Visibility != "visible" {
		t.Fatalf("default visibility %q", d.Visibility)
	}
	if _, ok := r.Get("nope"); ok {
		t.Fatal("Get(nope)")
	}
}

func TestSchemaErrors(t *testing.T) {
	r := mustNew(t, nil, Deps{})
	_, err := run(t, r, "calculator", `{}`, Call{})
	wantInvalid(t, err, "calculator", "missing property", "expression")
	_, err = run(t, r, "calculator", `{"expression": 42}`, Call{})
	wantInvalid(t, err, `"/expression"`, "want string")
	_, err = run(t, r, "calculator", `{"expression": "1", "extra": true}`, Call{})
	wantInvalid(t, err, "extra")
	_, err = run(t, r, "calculator", `{"expression": `, Call{})
	wantInvalid(t, err, "not valid JSON")
	_, err = run(t, r, "calculator", `{"expression": "1"} x`, Call{})
	wantInvalid(t, err, "not valid JSON")
	_, err = run(t, r, "calculator", `[1]`, Call{})
	wantInvalid(t, err, "JSON object")
	_, err = run(t, r, "nope", `{}`, Call{})
	wantInvalid(t, err, `unknown tool "nope"`, "calculator")
	if _, err := run(t, r, "current_time", ``, Call{}); err != nil {
		t.Fatalf("empty args: %v", err)
	}

	// An http tool's own schema, with a nested field and an integer.
	r = mustNew(t, []Def{{
		Name: "weather", ExecutionType: "http",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string"},
			"opts": map[string]any{"type": "object", "properties": map[string]any{"days": map[string]any{"type": "integer", "maximum": 7}}},
		}, "required": []any{"city"}},
		Execution: &HTTPExecution{URL: "https://example.com/?q={{input.city}}"},
	}}, Deps{})
	_, err = run(t, r, "weather", `{"city": "x", "opts": {"days": 1.5}}`, Call{})
	wantInvalid(t, err, `"/opts/days"`, "want integer")
	_, err = run(t, r, "weather", `{"city": "x", "opts": {"days": 8}}`, Call{})
	wantInvalid(t, err, `"/opts/days"`, "7")
	_, err = run(t, r, "weather", `{"opts": {}}`, Call{})
	wantInvalid(t, err, "missing property", "city")
}

func TestCurrentTime(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600))
	r := mustNew(t, nil, Deps{Now: func() time.Time { return now }})
	got, err := run(t, r, "current_time", `{}`, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"time":"2026-03-04T04:06:07Z","unix":1772597167}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestCalculator(t *testing.T) {
	r := mustNew(t, nil, Deps{})
	for _, c := range []struct{ expr, want string }{
		{"6*7", `{"result":42}`},
		{"2+3*4", `{"result":14}`},
		{"(2+3)*4", `{"result":20}`},
		{"10-4-3", `{"result":3}`},
		{"100/10/5", `{"result":2}`},
		{"-3+5", `{"result":2}`},
		{"-(2+3)*-2", `{"result":10}`},
		{"--4", `{"result":4}`},
		{"1.5*2", `{"result":3}`},
		{"0.1+0.2", `{"result":0.30000000000000004}`},
		{"7/2", `{"result":3.5}`},
		{".5 + 1", `{"result":1.5}`},
		{"17 % 5", `{"result":2}`},
		{" ( ( 1 ) ) ", `{"result":1}`},
		{"-0", `{"result":0}`},
	} {
		got, err := run(t, r, "calculator", `{"expression":`+jsonString(c.expr)+`}`, Call{})
		if err != nil || got != c.want {
			t.Errorf("%q = %s, %v; want %s", c.expr, got, err, c.want)
		}
	}
	for _, c := range []struct{ expr, want string }{
		{"1/0", "division by zero"},
		{"5 % (2-2)", "division by zero"},
		{"2+", "unexpected end"},
		{"2 3", "unexpected '3'"},
		{"abc", "unexpected 'a'"},
		{"(1+2", "missing )"},
		{"1+2)", "unexpected ')'"},
		{"1..2", "unexpected '.'"},
		{".", "bad number"},
		{"2^3", "unexpected '^'"},
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), "nested"},
		{strings.Repeat("9", 400), "bad number"},
	} {
		_, err := run(t, r, "calculator", `{"expression":`+jsonString(c.expr)+`}`, Call{})
		wantInvalid(t, err, c.want)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func FuzzCalculator(f *testing.F) {
	for _, s := range []string{"6*7", "-(1.5+2)%3", "1/0", "((((", "9999999999999999999999*99999999999999999", "--.5", ")"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Calculate(s)
		if err == nil {
			if _, jerr := json.Marshal(map[string]any{"result": numberResult(v)}); jerr != nil {
				t.Fatalf("%q: %v", s, jerr)
			}
		}
	})
}

func TestQueryDocuments(t *testing.T) {
	var got []collections.Query
	q := func(_ context.Context, q collections.Query) ([]*collections.Document, error) {
		got = append(got, q)
		return []*collections.Document{{
			Path: "users/u1/notes/n1", Collection: "users/u1/notes", ID: "n1",
			Data: map[string]any{"title": "hi", "id": "spoof"},
		}}, nil
	}
	r := mustNew(t, nil, Deps{Query: q})
	call := Call{UserID: "u1"}

	res, err := run(t, r, "query_documents", `{"collection":"users/u1/notes","filters":[{"field":"n","op":">=","value":3}],"orderBy":[{"field":"n","direction":"desc"}],"limit":500}`, call)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"documents":[{"id":"n1","path":"users/u1/notes/n1","title":"hi"}]}`; res != want {
		t.Fatalf("result %s", res)
	}
	if len(got) != 1 {
		t.Fatalf("queries %v", got)
	}
	g := got[0]
	if g.Collection != "users/u1/notes" || g.Limit != 50 || len(g.Filters) != 1 || g.Filters[0].Op != collections.OpGe ||
		g.Filters[0].Field != "n" || len(g.OrderBy) != 1 || !g.OrderBy[0].Desc() {
		t.Fatalf("query %+v", g)
	}
	if n, ok := g.Filters[0].Value.(json.Number); !ok || n != "3" {
		t.Fatalf("filter value %#v", g.Filters[0].Value)
	}

	if _, err := run(t, r, "query_documents", `{"collection":"users/u1/notes","limit":5}`, call); err != nil || got[1].Limit != 5 {
		t.Fatalf("limit 5: %v %+v", err, got[1])
	}
	if _, err := run(t, r, "query_documents", `{"collection":"users/u1/notes"}`, call); err != nil || got[2].Limit != 50 {
		t.Fatalf("default limit: %v %+v", err, got[2])
	}

	n := len(got)
	for _, coll := range []string{"users/u2/notes", "users/u1", "users/u10/notes", "users/*/notes", "notes", "users/u1x/notes"} {
		_, err := run(t, r, "query_documents", `{"collection":`+jsonString(coll)+`}`, call)
		wantInvalid(t, err, "query_documents reads only your own documents (users/u1/...)")
	}
	_, err = run(t, r, "query_documents", `{"collection":"users/u1/notes/x"}`, call)
	wantInvalid(t, err, "names a document")
	_, err = run(t, r, "query_documents", `{"collection":"users/u1/notes","filters":[{"field":"a","op":"~","value":1}]}`, call)
	wantInvalid(t, err, `"/filters/0/op"`)
	_, err = run(t, r, "query_documents", `{"collection":"users/u1/notes","showDeleted":true}`, call)
	wantInvalid(t, err, "showDeleted")
	if _, err := run(t, r, "query_documents", `{"collection":"users/u1/notes"}`, Call{}); err == nil {
		t.Fatal("no user: no error")
	}
	if len(got) != n {
		t.Fatalf("refused queries reached QueryFunc: %+v", got[n:])
	}

	boom := errors.New("boom")
	r = mustNew(t, nil, Deps{Query: func(context.Context, collections.Query) ([]*collections.Document, error) { return nil, boom }})
	if _, err := run(t, r, "query_documents", `{"collection":"users/u1/notes"}`, call); !errors.Is(err, boom) || errors.Is(err, ErrInvalidArgs) || strings.Contains(err.Error(), "boom") {
		t.Fatalf("query failure: %v (want the cause kept but not quoted: the text reaches the user)", err)
	}
	bad := fmt.Errorf("access: query: %w: field x is not indexed", collections.ErrInvalidQuery)
	r = mustNew(t, nil, Deps{Query: func(context.Context, collections.Query) ([]*collections.Document, error) { return nil, bad }})
	if _, err := run(t, r, "query_documents", `{"collection":"users/u1/notes"}`, call); !errors.Is(err, collections.ErrInvalidQuery) || !strings.Contains(err.Error(), "not indexed") {
		t.Fatalf("invalid query: %v (want its reason quoted: it is about the model's own query)", err)
	}
}

func TestBadDefinitions(t *testing.T) {
	httpDef := func(mod func(*Def)) []Def {
		d := Def{Name: "t", ExecutionType: "http", InputSchema: map[string]any{"type": "object"},
			Execution: &HTTPExecution{URL: "https://example.com/"}}
		mod(&d)
		return []Def{d}
	}
	for _, c := range []struct {
		name  string
		defs  []Def
		wants []string
	}{
		{"bad name", httpDef(func(d *Def) { d.Name = "has space" }), []string{`"has space"`, "name"}},
		{"empty name", httpDef(func(d *Def) { d.Name = "" }), []string{`"#1"`, "name"}},
		{"long name", httpDef(func(d *Def) { d.Name = strings.Repeat("a", 65) }), []string{"name"}},
		{"bad schema", httpDef(func(d *Def) {
			d.InputSchema = map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "strng"}}}
		}), []string{`tool "t"`, "inputSchema"}},
		{"schema not object", httpDef(func(d *Def) { d.InputSchema = map[string]any{"type": "string"} }), []string{`tool "t"`, `"type": "object"`}},
		{"external ref", httpDef(func(d *Def) { d.InputSchema = map[string]any{"type": "object", "$ref": "https://example.com/s.json"} }), []string{`tool "t"`, "inputSchema"}},
		{"http without url", httpDef(func(d *Def) { d.Execution = nil }), []string{`tool "t"`, "execution.url"}},
		{"http empty url", httpDef(func(d *Def) { d.Execution.URL = "" }), []string{"execution.url"}},
		{"relative url", httpDef(func(d *Def) { d.Execution.URL = "/x" }), []string{"execution.url", "absolute"}},
		{"ftp url", httpDef(func(d *Def) { d.Execution.URL = "ftp://x/" }), []string{"execution.url"}},
		{"bad template", httpDef(func(d *Def) { d.Execution.URL = "https://x/{{city}}" }), []string{"{{input.field}}"}},
		{"bad method", httpDef(func(d *Def) { d.Execution.Method = "TRACE" }), []string{"execution.method"}},
		{"get with body", httpDef(func(d *Def) { d.Execution.Body = "x" }), []string{"execution.body"}},
		{"bad timeout", httpDef(func(d *Def) { d.Execution.Timeout = 120001 }), []string{"execution.timeout"}},
		{"bad header", httpDef(func(d *Def) { d.Execution.Headers = map[string]string{"a b": "x"} }), []string{"header name"}},
		{"bad visibility", httpDef(func(d *Def) { d.Visibility = "secret" }), []string{`tool "t"`, `visibility "secret"`, "result-only"}},
		{"bad builtin visibility", []Def{{Name: "calculator", ExecutionType: "builtin", Visibility: "x"}}, []string{`tool "calculator"`, "visibility"}},
		{"bad execution type", httpDef(func(d *Def) { d.ExecutionType = "gateway" }), []string{`executionType "gateway"`}},
		{"unknown builtin", []Def{{Name: "shell", ExecutionType: "builtin"}}, []string{`tool "shell"`, "no built-in"}},
		{"http shadows builtin", httpDef(func(d *Def) { d.Name = "http_get" }), []string{`tool "http_get"`, "duplicate"}},
		{"duplicate http", append(httpDef(func(*Def) {}), httpDef(func(*Def) {})...), []string{`tool "t"`, "duplicate"}},
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

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tools.json")
	os.WriteFile(good, []byte(`[{
  "name": "fetchWeather",
  "description": "Get current weather for a city",
  "executionType": "http",
  "visibility": "visible",
  "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 100}}, "required": ["city"]},
  "execution": {"url": "https://api.weather.com/current?city={{input.city}}", "method": "GET", "timeout": 10000}
}]`), 0o600)
	defs, err := LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || defs[0].Execution.Timeout != 10000 || defs[0].Name != "fetchWeather" {
		t.Fatalf("%+v", defs)
	}
	if _, err := New(defs, Deps{}); err != nil {
		t.Fatal(err)
	}

	for name, body := range map[string]string{
		"top.json":    `[{"name": "x", "executionType": "http", "displayTool": true}]`,
		"nested.json": `[{"name": "x", "executionType": "http", "execution": {"url": "https://x/", "retries": 3}}]`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		_, err := LoadFile(p)
		if err == nil || !strings.Contains(err.Error(), "unknown field") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	p := filepath.Join(dir, "trail.json")
	os.WriteFile(p, []byte(`[] []`), 0o600)
	if _, err := LoadFile(p); err == nil {
		t.Error("trailing data accepted")
	}
}
