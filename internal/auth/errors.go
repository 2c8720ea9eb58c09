package auth

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers test them with errors.Is; the returned error may
// wrap them with a detail meant for logs, not for clients.
var (
	// ErrInvalidUsername: not 3–64 characters of [A-Za-z0-9_.@-].
	ErrInvalidUsername = errors.New("auth: invalid username")
	// ErrWeakPassword: shorter than the configured minimum
	// (Config.MinPasswordLength characters), or longer than the 72 bytes
	// bcrypt can hash. Signup returns it as a *WeakPasswordError, which
	// names the bounds.
	ErrWeakPassword = errors.New("auth: password too short or too long")
	// ErrUserExists: the username is taken (compared case-insensitively).
	ErrUserExists = errors.New("auth: username already exists")
	// ErrInvalidCredentials is the one answer for an unknown user and a wrong
	// password, so a login never tells which usernames exist.
	ErrInvalidCredentials = errors.New("auth: invalid username or password")
	// ErrInvalidToken: a bearer credential or refresh token that is malformed,
	// forged, expired, revoked or of the wrong kind.
	ErrInvalidToken = errors.New("auth: invalid or expired token")
	// ErrRateLimited is wrapped by *RateLimitError.
	ErrRateLimited = errors.New("auth: too many failed logins")
	// ErrBusy: every password hashing slot stayed busy for Config.HashWait;
	// the caller may retry shortly.
	ErrBusy = errors.New("auth: too many password checks in progress")
	// ErrServiceKeyExists: CreateServiceKey with a name already in use.
	ErrServiceKeyExists = errors.New("auth: service key name already exists")
)

// WeakPasswordError is a password outside the length policy: at least Min
// characters, at most Max bytes. It wraps ErrWeakPassword.
type WeakPasswordError struct {
	Min, Max int
}

func (e *WeakPasswordError) Error() string {
	return fmt.Sprintf("auth: the password must be at least %d characters (and at most %d bytes)", e.Min, e.Max)
}

func (e *WeakPasswordError) Unwrap() error { return ErrWeakPassword }

// RateLimitError is returned by Login when too many logins failed recently for
// the (username, client address) pair or the client address (see Limit). RetryAfter is how long until an attempt is
// allowed again (the server sends it as Retry-After).
type RateLimitError struct {
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	secs := (e.RetryAfter + time.Second - 1) / time.Second // round up: never "retry after 0s"
	return fmt.Sprintf("%v; retry after %ds", ErrRateLimited, secs)
}

func (e *RateLimitError) Unwrap() error { return ErrRateLimited }
