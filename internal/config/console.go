package config

import (
	"fmt"
	"time"
)

// Console configures the web console at /console/ and its sign-in sessions
// ([console]; docs/console.md, "Session and serving API").
type Console struct {
	// Enabled serves the console and its session API (default true;
	// LOOM_CONSOLE=0 turns it off: every /console route answers 404).
	Enabled bool `toml:"enabled"`
	// SessionTTL is the absolute lifetime of a console sign-in (default
	// 8h); refreshing never extends it.
	SessionTTL Duration `toml:"session_ttl"`
	// IdleTTL ends a session whose page has not refreshed it for this long
	// (default 30m, at most session_ttl).
	IdleTTL Duration `toml:"idle_ttl"`
	// TokenTTL is the lifetime of the access tokens the page holds (default
	// 10m, at most idle_ttl).
	TokenTTL Duration `toml:"token_ttl"`
}

// Console session defaults and bounds (the auth service applies the same
// defaults to zero values).
const (
	DefaultConsoleSessionTTL = 8 * time.Hour
	DefaultConsoleIdleTTL    = 30 * time.Minute
	DefaultConsoleTokenTTL   = 10 * time.Minute
	MinConsoleTTL            = time.Minute
	MaxConsoleSessionTTL     = 30 * 24 * time.Hour
)

// TTLs returns the session, idle and token lifetimes in force: the set
// ones, the defaults for the others (a default never exceeds the longer
// lifetime it sits under).
func (c Console) TTLs() (session, idle, token time.Duration) {
	session = c.SessionTTL.Duration
	if session == 0 {
		session = DefaultConsoleSessionTTL
	}
	idle = c.IdleTTL.Duration
	if idle == 0 {
		idle = min(DefaultConsoleIdleTTL, session)
	}
	token = c.TokenTTL.Duration
	if token == 0 {
		token = min(DefaultConsoleTokenTTL, idle)
	}
	return session, idle, token
}

func (c Console) validate() error {
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"session_ttl", c.SessionTTL.Duration}, {"idle_ttl", c.IdleTTL.Duration}, {"token_ttl", c.TokenTTL.Duration}} {
		if d.v != 0 && d.v < MinConsoleTTL {
			return fmt.Errorf("config: [console] %s must be at least %v (or unset for the default), got %v", d.key, MinConsoleTTL, d.v)
		}
	}
	session, idle, token := c.TTLs()
	if session > MaxConsoleSessionTTL {
		return fmt.Errorf("config: [console] session_ttl must be at most %v, got %v", MaxConsoleSessionTTL, session)
	}
	if idle > session {
		return fmt.Errorf("config: [console] idle_ttl (%v) must not exceed session_ttl (%v)", idle, session)
	}
	if token > idle {
		return fmt.Errorf("config: [console] token_ttl (%v) must not exceed idle_ttl (%v): a page refreshing its token would find its session gone", token, idle)
	}
	return nil
}
