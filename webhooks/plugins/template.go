package plugins

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/parser"
)

// Template is a compiled Jinja template (a maintained Jinja2-compatible
// engine, github.com/nikolalohinski/gonja/v2): the seed's messages render
// unchanged, e.g. {{ (context.turn.token_usage * 100) | int }}.
type Template struct {
	src  string
	name string
	t    *exec.Template
}

// maxRender bounds what one rendering may write.
const maxRender = 64 << 10

// maxRangeItems bounds how many items range() may produce in one rendering,
// across all its calls: nested loops over range() are the one way a short
// template can spin without writing (output is bounded by maxRender).
const maxRangeItems = 10000

// maxTemplateSource bounds a template's source (they come from rule files,
// themselves bounded, but a Value tree may hold many).
const maxTemplateSource = 16 << 10

// budgetVar is the context variable holding the rendering's range() budget.
// Its name cannot be written as a Jinja identifier's first use by accident.
const budgetVar = "__loom_render_budget"

// errTemplateFiles is what a template reaching for a file gets.
var errTemplateFiles = errors.New("templates cannot read files")

// refuseLoader serves the template's own source and refuses every other
// path: rule templates render data, they never read the server's disk.
type refuseLoader struct {
	id  string
	src string
}

func (l *refuseLoader) Read(path string) (io.Reader, error) {
	if path == l.id {
		return strings.NewReader(l.src), nil
	}
	return nil, errTemplateFiles
}

func (l *refuseLoader) Resolve(path string) (string, error) {
	if path == l.id {
		return path, nil
	}
	return "", errTemplateFiles
}

func (l *refuseLoader) Inherit(string) (loaders.Loader, error) { return nil, errTemplateFiles }

// templateEnv is the environment every rule template renders in: Jinja's
// filters and tests, but only the control structures that cannot reach
// other templates (include, import, from, extends, block) or recurse
// (macro, call: a recursive macro would overflow the goroutine's stack,
// which Go cannot recover from).
var templateEnv = newTemplateEnv()

// templateConfig is gonja's default configuration (no autoescaping: the
// output is a prompt, not HTML).
var templateConfig = config.New()

func newTemplateEnv() *exec.Environment {
	allowed := []string{"if", "for", "set", "with", "filter", "raw", "do", "break", "continue", "autoescape"}
	cs := map[string]parser.ControlStructureParser{}
	for _, name := range allowed {
		p, ok := builtins.ControlStructures.Get(name)
		if !ok {
			panic("plugins: gonja lacks control structure " + name)
		}
		cs[name] = p
	}
	globals := exec.NewContext(map[string]any{"range": boundedRange})
	for _, name := range []string{"dict", "namespace", "joiner", "cycler"} {
		v, ok := builtins.GlobalFunctions.Get(name)
		if !ok {
			panic("plugins: gonja lacks global " + name)
		}
		globals.Set(name, v)
	}
	return &exec.Environment{
		Context:           globals,
		Filters:           templateFilters(),
		Tests:             builtins.Tests,
		ControlStructures: exec.NewControlStructureSet(cs),
		Methods:           templateMethods(),
	}
}

// renderBudget is one rendering's remaining range() items.
type renderBudget struct{ rangeItems int }

// boundedRange is Jinja's range() returning a list (gonja's streams through
// a goroutine that leaks when a loop breaks early) within the rendering's
// budget.
func boundedRange(e *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	var start, stop, step = 0, 0, 1
	args := params.Args
	for _, a := range args {
		if !a.IsInteger() {
			return nil, errors.New("range: arguments must be integers")
		}
	}
	switch len(args) {
	case 1:
		stop = args[0].Integer()
	case 2:
		start, stop = args[0].Integer(), args[1].Integer()
	case 3:
		start, stop, step = args[0].Integer(), args[1].Integer(), args[2].Integer()
	default:
		return nil, errors.New("range: expected [start, ]stop[, step]")
	}
	if step == 0 {
		return nil, errors.New("range: step cannot be 0")
	}
	var n int
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		n = (start - stop - step - 1) / -step
	}
	b, _ := e.Environment.Context.Get(budgetVar)
	budget, ok := b.(*renderBudget)
	if !ok {
		return nil, errors.New("range: no budget")
	}
	if n < 0 || n > budget.rangeItems {
		return nil, fmt.Errorf("range: more than %d items in one rendering", maxRangeItems)
	}
	budget.rangeItems -= n
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// compileTemplate parses src (name is where it comes from, for errors).
func compileTemplate(name, src string) (*Template, error) {
	if len(src) > maxTemplateSource {
		return nil, fmt.Errorf("template of %d bytes is above the limit of %d", len(src), maxTemplateSource)
	}
	id := "template:" + name
	var t *exec.Template
	err := safely(func() error {
		var err error
		t, err = exec.NewTemplate(id, templateConfig, &refuseLoader{id: id, src: src}, templateEnv)
		return err
	})
	if err != nil {
		return nil, templateError(err, src)
	}
	return &Template{src: src, name: name, t: t}, nil
}

// templateError shortens gonja's errors, which quote the whole source.
func templateError(err error, src string) error {
	msg := err.Error()
	if src != "" {
		msg = strings.ReplaceAll(msg, "'"+src+"'", "template")
	}
	return errors.New(clipN(msg, 300))
}

// Render renders the template with `context` = c.Map() (m, when the caller
// built it already). Output beyond maxRender is an error. The template
// can change m's lists in place (list.reverse()): pass a copy of
// anything shared, as Action.render does.
func (t *Template) Render(m map[string]any) (string, error) {
	var w limitedWriter
	err := safely(func() error {
		data := exec.NewContext(map[string]any{
			"context": m,
			budgetVar: &renderBudget{rangeItems: maxRangeItems},
		})
		return t.t.Execute(&w, data)
	})
	if w.over {
		return "", fmt.Errorf("template %s: output above %d bytes", t.name, maxRender)
	}
	if err != nil {
		return "", fmt.Errorf("template %s: %w", t.name, templateError(err, t.src))
	}
	return w.b.String(), nil
}

// Source returns the template's text.
func (t *Template) Source() string { return t.src }

// errOutputLimit stops a rendering that wrote too much.
var errOutputLimit = errors.New("output limit reached")

// limitedWriter keeps up to maxRender bytes and fails past them, which
// stops gonja's renderer at the next write.
type limitedWriter struct {
	b    strings.Builder
	over bool
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.over || w.b.Len()+len(p) > maxRender {
		w.over = true
		return 0, errOutputLimit
	}
	return w.b.Write(p)
}

// safely runs f, turning a panic (gonja panics on some inputs, e.g. a
// negative string repetition) into an error: a rule file must not take
// the runtime down.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template engine failed: %v", r)
		}
	}()
	return f()
}
