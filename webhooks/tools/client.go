package tools

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Client tools: the model calls them like any tool, but the client app (the
// user's) runs them and writes the result into the tool-call document; the
// agent runtime only waits for it, at most the tool's client timeout.
const (
	// DefaultClientTimeout is how long a client tool's call waits for the
	// client's result when the tool sets no clientTimeout.
	DefaultClientTimeout = 10 * time.Minute
	// MinClientTimeoutMillis and MaxClientTimeoutMillis bound clientTimeout
	// (1 s .. 24 h).
	MinClientTimeoutMillis = 1000
	MaxClientTimeoutMillis = 24 * 60 * 60 * 1000
)

// checkClient validates a client tool's definition: no execution table, a
// client timeout in bounds (the default filled in).
func checkClient(d *Def) error {
	if d.Execution != nil {
		return errors.New("execution is not allowed for a client tool (the client app runs it)")
	}
	switch {
	case d.ClientTimeout == 0:
		d.ClientTimeout = DefaultClientTimeout.Milliseconds()
	case d.ClientTimeout < MinClientTimeoutMillis || d.ClientTimeout > MaxClientTimeoutMillis:
		return fmt.Errorf("clientTimeout (client_timeout) %d: must be %d..%d milliseconds (1 s to 24 h)",
			d.ClientTimeout, MinClientTimeoutMillis, MaxClientTimeoutMillis)
	}
	return nil
}

// runClient is a client tool's runner in the registry: it never runs.
// (Registry.Run refuses a client tool before it gets here; this keeps a
// client tool from running even if that check were bypassed.)
func runClient(name string) runFunc {
	return func(context.Context, map[string]any, Call) (any, error) {
		return nil, fmt.Errorf("%w: %s is executed by the client app, not by the server", ErrClientTool, name)
	}
}

// IsClient reports whether d is a client tool.
func (d Def) IsClient() bool { return d.ExecutionType == ExecClient }

// ClientTimeoutDuration is a client tool's timeout (the default when
// unset).
func (d Def) ClientTimeoutDuration() time.Duration {
	if d.ClientTimeout <= 0 {
		return DefaultClientTimeout
	}
	return time.Duration(d.ClientTimeout) * time.Millisecond
}
