package plugins

import (
	"context"
	"errors"
	"time"
)

// Condition is a compiled rule condition: a CEL expression or a Lua script.
// Match is safe for concurrent use. An error (a failed evaluation, a budget
// spent) means no match; the engine records it.
type Condition interface {
	Match(ctx context.Context, c *Context) (bool, error)
}

// LuaLimits bound one run of a Lua script.
type LuaLimits struct {
	// Instructions bounds the VM instructions of one run (default 100000).
	Instructions int64
	// Timeout bounds its wall time (default 50ms).
	Timeout time.Duration
	// MemoryBytes bounds what one run may allocate (default 16 MiB).
	MemoryBytes int64
}

// compileCEL type-checks expr against the rule context (`context`, of
// Context's type) and returns its program, cost-limited. The expression
// must be of type bool.
func compileCEL(expr string) (Condition, error) {
	return nil, errors.New("plugins: CEL conditions not written yet")
}

// compileLua compiles a Lua script (name is its file, for errors) into a
// condition that runs it in a sandbox within limits. The script sees
// `context` as read-only tables and its result is the condition: it must
// return a boolean (return true / return false); anything else is an
// error.
func compileLua(name, source string, limits LuaLimits) (Condition, error) {
	return nil, errors.New("plugins: Lua conditions not written yet")
}
