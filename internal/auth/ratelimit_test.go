package auth_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/internal/auth"
)

// expectRateLimited fails unless err is a *RateLimitError with RetryAfter
// equal to want.
func expectRateLimited(t *testing.T, name string, err error, want time.Duration) {
	t.Helper()
	var rl *auth.RateLimitError
	if !errors.Is(err, auth.ErrRateLimited) || !errors.As(err, &rl) {
		t.Fatalf("%s: err=%v, want *RateLimitError", name, err)
	}
	if rl.RetryAfter != want {
		t.Errorf("%s: RetryAfter=%v, want %v", name, rl.RetryAfter, want)
	}
}

func TestService_LoginRateLimitPerUsername(t *testing.T) {
	s, _, clk := MustNew(t, nil) // default: 10 failures per 15 minutes
	ctx := context.Background()
	MustSignup(t, s, "quentin")
	// Failures from ten different IPs, one minute apart, all count against
	// the username (whatever its case).
	for i := range auth.DefaultLoginFailures {
		name := "quentin"
		if i%2 == 1 {
			name = "QUENTIN"
		}
		if _, err := s.Login(ctx, name, "wrong password", fmt.Sprintf("198.51.100.%d", i)); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d: err=%v, want ErrInvalidCredentials", i, err)
		}
		clk.Advance(time.Minute)
	}
	// Now even the right password from a fresh IP is refused, unchecked.
	_, err := s.Login(ctx, "quentin", password, "203.0.113.9")
	// The first failure was 10 minutes ago; it leaves the window in 5.
	expectRateLimited(t, "11th attempt", err, 5*time.Minute)
	if err.Error() != "auth: too many failed logins; retry after 300s" {
		t.Errorf("message=%q", err.Error())
	}
	// Other usernames are not affected.
	MustSignup(t, s, "rupert")
	if _, err := s.Login(ctx, "rupert", password, "203.0.113.9"); err != nil {
		t.Errorf("other user: %v", err)
	}

	clk.Advance(5*time.Minute - time.Second)
	_, err = s.Login(ctx, "quentin", password, "203.0.113.9")
	expectRateLimited(t, "just before the window frees", err, time.Second)
	clk.Advance(time.Second)
	if _, err := s.Login(ctx, "quentin", password, "203.0.113.9"); err != nil {
		t.Fatalf("login once the oldest failure left the window: %v", err)
	}
	// Success forgot the username's failures: ten more are allowed.
	for i := range auth.DefaultLoginFailures {
		if _, err := s.Login(ctx, "quentin", "wrong password", fmt.Sprintf("192.0.2.%d", i)); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d after success: err=%v, want ErrInvalidCredentials", i, err)
		}
	}
	_, err = s.Login(ctx, "quentin", password, "192.0.2.200")
	expectRateLimited(t, "after ten new failures", err, 15*time.Minute)
}

func TestService_LoginRateLimitPerIP(t *testing.T) {
	s, _, clk := MustNew(t, func(c *auth.Config) { c.LoginLimit = auth.Limit{Failures: 3, Window: time.Minute} })
	ctx := context.Background()
	MustSignup(t, s, "sybil")
	const ip = "2001:db8::1"
	// Guesses at different (even unknown or invalid) usernames from one IP.
	for i, name := range []string{"victim1", "victim2", "x"} {
		if _, err := s.Login(ctx, name, "wrong password", ip); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d: err=%v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	_, err := s.Login(ctx, "sybil", password, ip)
	expectRateLimited(t, "4th attempt from the IP", err, 30*time.Second)
	// The same user from another IP, and logins without an IP, are fine.
	if _, err := s.Login(ctx, "sybil", password, "2001:db8::2"); err != nil {
		t.Errorf("other IP: %v", err)
	}
	if _, err := s.Login(ctx, "sybil", password, ""); err != nil {
		t.Errorf("no IP: %v", err)
	}
	// A success does not clear the IP's failures (or one account could be
	// used to reset the counter between guesses).
	clk.Advance(30 * time.Second)
	if _, err := s.Login(ctx, "sybil", password, ip); err != nil {
		t.Fatalf("login after the first failure expired: %v", err)
	}
	_, err = s.Login(ctx, "victim3", "wrong password", ip)
	if !errors.Is(err, auth.ErrInvalidCredentials) {
		t.Fatalf("err=%v, want ErrInvalidCredentials", err)
	}
	_, err = s.Login(ctx, "sybil", password, ip)
	expectRateLimited(t, "after a success and one more failure", err, 10*time.Second)
}

func TestService_LoginRateLimitConcurrent(t *testing.T) {
	// Concurrent guesses cannot overshoot the limit: attempts in flight
	// count until they finish.
	s, _, _ := MustNew(t, func(c *auth.Config) { c.LoginLimit = auth.Limit{Failures: 5, Window: time.Hour} })
	MustSignup(t, s, "trent")
	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	checked := 0
	for range n {
		wg.Go(func() {
			_, err := s.Login(context.Background(), "trent", "wrong password", "")
			switch {
			case errors.Is(err, auth.ErrInvalidCredentials):
				mu.Lock()
				checked++
				mu.Unlock()
			case !errors.Is(err, auth.ErrRateLimited):
				t.Errorf("err=%v", err)
			}
		})
	}
	wg.Wait()
	if checked > 5 {
		t.Errorf("%d passwords were checked, want at most 5", checked)
	}
}

func TestService_LoginRateLimitDisabled(t *testing.T) {
	s, _, _ := MustNew(t, func(c *auth.Config) { c.LoginLimit = auth.Limit{Failures: -1} })
	MustSignup(t, s, "uma")
	for i := range 30 {
		if _, err := s.Login(context.Background(), "uma", "wrong password", "192.0.2.1"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("attempt %d: err=%v, want ErrInvalidCredentials", i, err)
		}
	}
}
