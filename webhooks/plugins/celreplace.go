package plugins

import (
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// maxCELReplace bounds the result of one replace() in a condition: the
// cost limit stops far below it anyway (a string's cost is a tenth of its
// size), but only once the result is built.
const maxCELReplace = 1 << 20

// boundReplace is a decorator that swaps ext.Strings' replace for one
// that computes the size of its result before building it: the result
// grows with the product of the string's and the replacement's sizes
// (s.replace('a', s)), and both may be a user's; the cost limit, counted
// after the call, let a 20 KB message allocate 400 MB first. The overload
// ids stay, so the cost tracking of replace does too.
func boundReplace(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok || call.Function() != "replace" {
		return i, nil
	}
	switch call.OverloadID() {
	case "string_replace_string_string", "string_replace_string_string_int":
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), celReplace), nil
	}
	return i, nil
}

// celReplace is s.replace(old, new[, n]) as ext.Strings has it
// (strings.Replace; n < 0 replaces all), refusing a result above
// maxCELReplace.
func celReplace(args ...ref.Val) ref.Val {
	if len(args) != 3 && len(args) != 4 {
		return types.NoSuchOverloadErr()
	}
	s, ok1 := args[0].(types.String)
	old, ok2 := args[1].(types.String)
	repl, ok3 := args[2].(types.String)
	if !ok1 || !ok2 || !ok3 {
		return types.NoSuchOverloadErr()
	}
	n := -1
	if len(args) == 4 {
		i, ok := args[3].(types.Int)
		if !ok {
			return types.NoSuchOverloadErr()
		}
		n = int(max(min(i, types.Int(len(s)+1)), -1))
	}
	count := strings.Count(string(s), string(old))
	if n >= 0 {
		count = min(count, n)
	}
	if size := len(s) + count*(len(repl)-len(old)); size > maxCELReplace {
		return types.NewErr("replace: a result of %d bytes, above the limit of %d", size, maxCELReplace)
	}
	return types.String(strings.Replace(string(s), string(old), string(repl), n))
}
