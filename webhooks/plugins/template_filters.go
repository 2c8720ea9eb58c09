package plugins

import (
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// sizedFilters are the filters that allocate in proportion to an integer
// argument (a width, an indent, a batch size), with the names of those
// arguments, positional ones in order. Templates come from operators, but
// the argument may come from data a user controls (a plugin setting, a
// tool's arguments): center(context.settings.width) with a width of 1e8
// allocated 470 MB, batch(1e8, 0) 9.6 GB, before the output bound could
// refuse the result.
var sizedFilters = map[string][]string{
	"center": {"width"},
	"indent": {"width"},
	"batch":  {"linecount"},
	"tojson": {"indent"},
}

// templateFilters is Jinja's filters with sizedFilters refusing, before
// they run, a size above maxRender (its result could only be refused),
// and replace refusing a result above maxRender: it grows with the
// product of the text's and the replacement's sizes, both possibly a
// user's (a tool's result, a setting).
//
// Not bounded here, because gonja gives no hook for them: the string
// repetition operator ('-' * n) and Python string methods' widths
// ('{:>99999999}'.format(x)). A template must not take their count or
// width from data; operators are trusted with that.
func templateFilters() *exec.FilterSet {
	fs := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	for name, args := range sizedFilters {
		orig, ok := fs.Get(name)
		if !ok {
			panic("plugins: gonja lacks filter " + name)
		}
		if err := fs.Replace(name, boundedFilter(name, args, orig)); err != nil {
			panic(err)
		}
	}
	orig, ok := fs.Get("replace")
	if !ok {
		panic("plugins: gonja lacks filter replace")
	}
	if err := fs.Replace("replace", boundedReplaceFilter(orig)); err != nil {
		panic(err)
	}
	return fs
}

// boundedReplaceFilter computes the size of replace's result (old and new
// are positional, count a keyword, as gonja takes them) before running it.
func boundedReplaceFilter(orig exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		if len(params.Args) == 2 && !in.IsError() {
			s, old, repl := in.String(), params.Args[0].String(), params.Args[1].String()
			n := strings.Count(s, old)
			if c, ok := params.KwArgs["count"]; ok && c.IsInteger() && c.Integer() >= 0 {
				n = min(n, c.Integer())
			}
			if size := len(s) + n*(len(repl)-len(old)); size > maxRender {
				return exec.AsValue(fmt.Errorf("replace: a result of %d bytes, above %d", size, maxRender))
			}
		}
		return orig(e, in, params)
	}
}

func boundedFilter(name string, args []string, orig exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		for i, arg := range args {
			v := params.KwArgs[arg]
			if i < len(params.Args) {
				v = params.Args[i]
			}
			if v != nil && (v.IsInteger() || v.IsFloat()) && v.Float() > maxRender {
				return exec.AsValue(fmt.Errorf("%s: %s %v is above %d", name, arg, v.Interface(), maxRender))
			}
		}
		return orig(e, in, params)
	}
}
