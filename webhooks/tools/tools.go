// Package tools is the agent runtime's tool registry: built-in Go tools and
// http tools, with JSON-schema-checked arguments.
//
// A tool is described by a [Def] (from [Builtins], the `[[tool]]` tables of
// loom.toml, which package app converts, or a tools.json file read by
// [LoadFile]). [New] validates every
// definition and compiles its input schema with
// github.com/santhosh-tekuri/jsonschema/v6; [Registry.Run] validates the
// model's arguments against that schema before running the tool. Argument
// problems (unknown tool, bad JSON, schema violations, bad values) are
// reported as errors wrapping [ErrInvalidArgs] whose message tells the model
// exactly what to fix; everything else is an execution failure.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/loomdb/loom/collections"
)

// Execution types.
const (
	ExecBuiltin = "builtin"
	ExecHTTP    = "http"
	// ExecClient is a tool the client app runs: the server never runs it
	// (see clienttools.go).
	ExecClient = "client"
)

// Visibility values: whether a tool call and its result are mirrored into
// the user's chat.
const (
	VisibilityVisible    = "visible"
	VisibilityHidden     = "hidden"
	VisibilityResultOnly = "result-only"
)

// Def describes one tool.
type Def struct {
	Name          string         `json:"name"`                 // [A-Za-z0-9_-]{1,64}
	Description   string         `json:"description"`          //
	InputSchema   map[string]any `json:"inputSchema"`          // JSON schema, type object
	ExecutionType string         `json:"executionType"`        // builtin | http | client
	Visibility    string         `json:"visibility,omitempty"` // visible (default) | hidden | result-only
	Execution     *HTTPExecution `json:"execution,omitempty"`
	// ClientTimeout is how long a client tool's call waits for the client
	// app's result, in milliseconds (client tools only; 0: the default,
	// DefaultClientTimeout; else MinClientTimeoutMillis..MaxClientTimeoutMillis).
	ClientTimeout int64 `json:"clientTimeout,omitempty"`
}

// HTTPExecution is how an http tool is called.
type HTTPExecution struct {
	URL     string            `json:"url"`               // may contain {{input.field}} (URL-escaped when substituted into the URL)
	Method  string            `json:"method"`            // GET (default) | POST | PUT | PATCH | DELETE
	Headers map[string]string `json:"headers,omitempty"` // values may contain {{input.field}}
	Body    string            `json:"body,omitempty"`    // optional template; default for non-GET: the args as JSON
	Timeout int               `json:"timeout,omitempty"` // milliseconds, default 10000, max 120000
}

// Call is who a tool runs for.
type Call struct {
	UserID string // the user whose agent runs the tool: query_documents is confined to users/{UserID}/...
}

// QueryFunc runs a document query (the handlers pass Docs.Query).
type QueryFunc func(ctx context.Context, q collections.Query) ([]*collections.Document, error)

// Deps are the outside services the built-in and http tools use.
type Deps struct {
	Query     QueryFunc         // for query_documents (nil: the tool is not registered)
	Transport http.RoundTripper // SSRF-guarded, for http_get and http tools (nil: http.DefaultTransport — tests only)
	Now       func() time.Time  // for current_time (nil: time.Now)
}

// ErrInvalidArgs is wrapped by every error [Registry.Run] returns for an
// unknown tool, arguments that are not a JSON object, arguments that violate
// the tool's schema, or argument values the tool refuses.
var ErrInvalidArgs = errors.New("invalid tool arguments")

// ErrClientTool is wrapped by the error [Registry.Run] returns for a client
// tool: the client app runs it, never the server.
var ErrClientTool = errors.New("client tool")

// Limits.
const (
	// DefaultHTTPTimeout is an http tool's timeout when none is set, and
	// http_get's timeout.
	DefaultHTTPTimeout = 10 * time.Second
	// MaxHTTPTimeoutMillis bounds HTTPExecution.Timeout.
	MaxHTTPTimeoutMillis = 120000
	// MaxResponseBody is how much of a response body a tool returns.
	MaxResponseBody = 8 << 10
	// MaxArgsBytes bounds the arguments text of one call.
	MaxArgsBytes = 1 << 20
)

type runFunc func(ctx context.Context, args map[string]any, call Call) (any, error)

type tool struct {
	def    Def
	schema *jsonschema.Schema
	run    runFunc
}

// Registry holds the tools an agent may call. It is safe for concurrent use
// once built.
type Registry struct {
	tools map[string]*tool
	names []string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// New builds a registry of the built-ins plus extra. An extra with a
// built-in's name and executionType builtin replaces that built-in's
// description (when not empty) and visibility; its inputSchema and execution
// are ignored, and an extra naming no built-in is an error. An http extra
// whose name is already taken (by a built-in or another extra) is an error.
// query_documents is registered only when deps.Query is set. Every schema is
// compiled; errors name the tool.
func New(extra []Def, deps Deps) (*Registry, error) {
	if deps.Transport == nil {
		deps.Transport = http.DefaultTransport
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	r := &Registry{tools: map[string]*tool{}}
	impls := builtinImpls(deps)
	for _, d := range Builtins() {
		run, ok := impls[d.Name]
		if !ok {
			continue // query_documents without deps.Query
		}
		if err := r.add(d, run); err != nil {
			return nil, err
		}
	}
	builtinNames := map[string]bool{}
	for _, d := range Builtins() {
		builtinNames[d.Name] = true
	}
	for i, d := range extra {
		label := d.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i+1)
		}
		if !nameRE.MatchString(d.Name) {
			return nil, fmt.Errorf("tool %q: name must be 1-64 characters of A-Z a-z 0-9 _ -", label)
		}
		switch d.ExecutionType {
		case ExecBuiltin:
			if d.ClientTimeout != 0 {
				return nil, fmt.Errorf("tool %q: clientTimeout (client_timeout) is only for executionType %q", d.Name, ExecClient)
			}
			if !builtinNames[d.Name] {
				return nil, fmt.Errorf("tool %q: executionType builtin, but there is no built-in tool of that name (built-ins: %s)", d.Name, strings.Join(builtinList(), ", "))
			}
			vis, err := checkVisibility(d.Visibility)
			if err != nil {
				return nil, fmt.Errorf("tool %q: %w", d.Name, err)
			}
			t, ok := r.tools[d.Name]
			if !ok {
				continue // a built-in not enabled by deps
			}
			if d.Description != "" {
				t.def.Description = d.Description
			}
			t.def.Visibility = vis
		case ExecClient:
			if _, dup := r.tools[d.Name]; dup || builtinNames[d.Name] {
				return nil, fmt.Errorf("tool %q: duplicate tool name", d.Name)
			}
			if err := checkClient(&d); err != nil {
				return nil, fmt.Errorf("tool %q: %w", d.Name, err)
			}
			if err := r.add(d, runClient(d.Name)); err != nil {
				return nil, err
			}
		case ExecHTTP:
			if d.ClientTimeout != 0 {
				return nil, fmt.Errorf("tool %q: clientTimeout (client_timeout) is only for executionType %q", d.Name, ExecClient)
			}
			if _, dup := r.tools[d.Name]; dup || builtinNames[d.Name] {
				return nil, fmt.Errorf("tool %q: duplicate tool name", d.Name)
			}
			run, err := httpTool(d, deps.Transport)
			if err != nil {
				return nil, fmt.Errorf("tool %q: %w", d.Name, err)
			}
			if err := r.add(d, run); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("tool %q: executionType %q: use %q, %q or %q", d.Name, d.ExecutionType, ExecBuiltin, ExecHTTP, ExecClient)
		}
	}
	return r, nil
}

func builtinList() []string {
	var out []string
	for _, d := range Builtins() {
		out = append(out, d.Name)
	}
	return out
}

func checkVisibility(v string) (string, error) {
	switch v {
	case "":
		return VisibilityVisible, nil
	case VisibilityVisible, VisibilityHidden, VisibilityResultOnly:
		return v, nil
	}
	return "", fmt.Errorf("visibility %q: use %s, %s or %s", v, VisibilityVisible, VisibilityHidden, VisibilityResultOnly)
}

// add validates d (name, visibility, schema) and registers it.
func (r *Registry) add(d Def, run runFunc) error {
	if !nameRE.MatchString(d.Name) {
		return fmt.Errorf("tool %q: name must be 1-64 characters of A-Z a-z 0-9 _ -", d.Name)
	}
	vis, err := checkVisibility(d.Visibility)
	if err != nil {
		return fmt.Errorf("tool %q: %w", d.Name, err)
	}
	d.Visibility = vis
	if d.InputSchema == nil {
		d.InputSchema = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	sch, err := compileSchema(d.Name, d.InputSchema)
	if err != nil {
		return fmt.Errorf("tool %q: inputSchema: %w", d.Name, err)
	}
	r.tools[d.Name] = &tool{def: d, schema: sch, run: run}
	r.names = append(r.names, d.Name)
	return nil
}

// noLoader refuses every external schema reference: a tool schema must be
// self-contained (no file or network access while compiling).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

func compileSchema(name string, schema map[string]any) (*jsonschema.Schema, error) {
	if t, _ := schema["type"].(string); t != "object" {
		return nil, errors.New(`must have "type": "object"`)
	}
	// Round-trip through JSON so that numbers from any decoder (float64,
	// int64 from TOML, json.Number) reach the compiler as json.Number.
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	loc := "loom-tool:///" + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// Get returns the definition of the named tool, with Visibility filled in.
func (r *Registry) Get(name string) (Def, bool) {
	t, ok := r.tools[name]
	if !ok {
		return Def{}, false
	}
	return t.def, true
}

// Names returns the registered tool names: the built-ins, then the extras,
// in definition order.
func (r *Registry) Names() []string {
	return append([]string(nil), r.names...)
}

// Run validates args (JSON text from the model) against the tool's schema and
// runs it. The result is JSON-serializable. An unknown tool, invalid JSON or
// a schema violation is an error wrapping ErrInvalidArgs whose message says
// exactly what is wrong; execution failures are other errors. Empty args
// mean {}.
//
// A client tool is never run here: Run returns an error wrapping
// ErrClientTool (its arguments unchecked).
func (r *Registry) Run(ctx context.Context, name string, args string, call Call) (any, error) {
	t, obj, err := r.check(name, args)
	if err != nil {
		return nil, err
	}
	return t.run(ctx, obj, call)
}

// Check validates args (JSON text from the model) against the named
// tool's schema, as Run does, without running the tool: for a client tool,
// whose arguments the client app receives. Its errors wrap ErrInvalidArgs.
func (r *Registry) Check(name string, args string) error {
	t, ok := r.tools[name]
	if !ok {
		return r.unknown(name)
	}
	_, err := validateArgs(t, name, args)
	return err
}

func (r *Registry) unknown(name string) error {
	return fmt.Errorf("%w: unknown tool %q (available: %s)", ErrInvalidArgs, name, strings.Join(r.names, ", "))
}

// check finds the tool and validates args for Run.
func (r *Registry) check(name string, args string) (*tool, map[string]any, error) {
	t, ok := r.tools[name]
	if !ok {
		return nil, nil, r.unknown(name)
	}
	if t.def.ExecutionType == ExecClient {
		return nil, nil, fmt.Errorf("%w: %s is executed by the client app, not by the server", ErrClientTool, name)
	}
	obj, err := validateArgs(t, name, args)
	return t, obj, err
}

// validateArgs parses args and validates them against t's schema.
func validateArgs(t *tool, name, args string) (map[string]any, error) {
	if len(args) > MaxArgsBytes {
		return nil, invalidf(name, "arguments are longer than %d bytes", MaxArgsBytes)
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		return nil, invalidf(name, "arguments are not valid JSON: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalidf(name, "arguments must be a JSON object")
	}
	if err := t.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, invalidf(name, "%s", describe(ve))
		}
		return nil, invalidf(name, "%v", err)
	}
	return obj, nil
}

func invalidf(tool, format string, args ...any) error {
	return fmt.Errorf("%w for %s: %s", ErrInvalidArgs, tool, fmt.Sprintf(format, args...))
}

var printer = message.NewPrinter(language.English)

// describe flattens a validation error into its leaf messages, each with the
// JSON pointer of the offending value: `at "/city": got number, want string;
// missing property 'units'`.
func describe(ve *jsonschema.ValidationError) string {
	var msgs []string
	seen := map[string]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		m := e.ErrorKind.LocalizedString(printer)
		if len(e.InstanceLocation) > 0 {
			m = fmt.Sprintf("at %q: %s", "/"+strings.Join(e.InstanceLocation, "/"), m)
		}
		if !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	walk(ve)
	if len(msgs) == 0 {
		return ve.Error()
	}
	return strings.Join(msgs, "; ")
}

// LoadFile reads tools.json: a JSON array of Def. Unknown keys (outside
// inputSchema) are an error.
func LoadFile(path string) ([]Def, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var defs []Def
	if err := dec.Decode(&defs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: unexpected data after the tool array", path)
	}
	return defs, nil
}
