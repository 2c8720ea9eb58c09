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
// Not bounded, because gonja gives no hook for them: the string
// repetition operator ('-' * n) and widths written in a format string
// literal ('{:>99999999}'.format(x), '%99999d' | format(x): Go's fmt caps
// a width at 1e6). A template must not take a repetition count from data,
// and its literals are the operator's: operators are trusted with both.
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

// strMethods are the Python string methods templates may call (gonja's,
// but expandtabs, whose result grows with the tabs in the data times a
// tab size, and which prompts do not need).
var strMethods = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "find", "format",
	"format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
	"isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
	"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip",
	"split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
}

// sizedStrMethods are the string methods that pad to an integer argument
// (the first, positional); format may take widths from any argument
// ('{:>{}}'.format(x, width)). Like sizedFilters, a size above maxRender
// is refused before the method allocates it: '...'.center(1e8) was 100 MB
// a call.
var sizedStrMethods = map[string]bool{"center": true, "ljust": true, "rjust": true, "zfill": true, "format": true}

// templateMethods is gonja's methods with the string methods bounded.
func templateMethods() exec.Methods {
	m := builtins.Methods
	str := make(map[string]exec.Method[string], len(strMethods))
	for _, name := range strMethods {
		fn, ok := builtins.Methods.Str.Get(name)
		if !ok {
			panic("plugins: gonja lacks string method " + name)
		}
		switch {
		case name == "replace":
			fn = boundedReplaceMethod(fn)
		case sizedStrMethods[name]:
			fn = boundedStrMethod(name, fn)
		}
		str[name] = fn
	}
	m.Str = exec.NewMethodSet(str)
	return m
}

func boundedStrMethod(name string, orig exec.Method[string]) exec.Method[string] {
	return func(self string, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		check := args.Args
		if name != "format" && len(check) > 1 {
			check = check[:1]
		}
		for _, v := range check {
			if (v.IsInteger() || v.IsFloat()) && v.Float() > maxRender {
				return nil, fmt.Errorf("%s: width %v is above %d", name, v.Interface(), maxRender)
			}
		}
		if name == "format" {
			for k, v := range args.KwArgs {
				if (v.IsInteger() || v.IsFloat()) && v.Float() > maxRender {
					return nil, fmt.Errorf("format: %s %v is above %d", k, v.Interface(), maxRender)
				}
			}
		}
		return orig(self, selfValue, args)
	}
}

// boundedReplaceMethod is str.replace(old, new[, count]) refusing a
// result above maxRender before building it.
func boundedReplaceMethod(orig exec.Method[string]) exec.Method[string] {
	return func(self string, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) >= 2 {
			old, repl := args.Args[0].String(), args.Args[1].String()
			n := strings.Count(self, old)
			if len(args.Args) >= 3 && args.Args[2].IsInteger() && args.Args[2].Integer() >= 0 {
				n = min(n, args.Args[2].Integer())
			}
			if size := len(self) + n*(len(repl)-len(old)); size > maxRender {
				return nil, fmt.Errorf("replace: a result of %d bytes, above %d", size, maxRender)
			}
		}
		return orig(self, selfValue, args)
	}
}
