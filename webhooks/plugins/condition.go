package plugins

import (
	"context"
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
