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

// An attacker's failures throttle the attacker's (username, address) pair,
// not the account: the owner logs in from another address meanwhile.
func TestService_LoginRateLimitPerPair(t *testing.T) {
	s, _, clk := MustNew(t, nil) // default: 10 failures per pair per 15 minutes
	ctx := context.Background()
	MustSignup(t, s, "quentin")
	const attacker = "198.51.100.7"
	// Failures one minute apart count against the pair, whatever the
	// username's case.
	for i := range auth.DefaultLoginFailures {
		name := "quentin"
		if i%2 == 1 {
			name = "QUENTIN"
		}
		if _, err := s.Login(ctx, name, "wrong password", attacker); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d: err=%v, want ErrInvalidCredentials", i, err)
		}
		clk.Advance(time.Minute)
	}
	// The pair is refused, unchecked, even with the right password.
	_, err := s.Login(ctx, "quentin", password, attacker)
	// The first failure was 10 minutes ago; it leaves the window in 5.
	expectRateLimited(t, "11th attempt from the pair", err, 5*time.Minute)
	// The owner, from another address, is not affected; nor is another
	// username from the attacker's address (under the address ceiling).
	if _, err := s.Login(ctx, "quentin", password, "203.0.113.9"); err != nil {
		t.Fatalf("owner from another address: %v", err)
	}
	MustSignup(t, s, "rupert")
	if _, err := s.Login(ctx, "rupert", password, attacker); err != nil {
		t.Errorf("other user from the attacker's address: %v", err)
	}

	clk.Advance(5*time.Minute - time.Second)
	_, err = s.Login(ctx, "quentin", password, attacker)
	expectRateLimited(t, "just before the window frees", err, time.Second)
	clk.Advance(time.Second)
	if _, err := s.Login(ctx, "quentin", password, attacker); err != nil {
		t.Fatalf("login once the oldest failure left the window: %v", err)
	}
	// Success forgot the pair's failures: ten more are allowed.
	for i := range auth.DefaultLoginFailures {
		if _, err := s.Login(ctx, "quentin", "wrong password", attacker); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d after success: err=%v, want ErrInvalidCredentials", i, err)
		}
	}
	_, err = s.Login(ctx, "quentin", password, attacker)
	expectRateLimited(t, "after ten new failures", err, 15*time.Minute)
}

// Guessing one username from many addresses: past UserFailures each pair
// may fail only three times, but an address that has not failed still gets
// its password checked — the owner is never refused.
func TestService_LoginUsernameUnderAttack(t *testing.T) {
	s, _, clk := MustNew(t, func(c *auth.Config) { c.LoginLimit = auth.Limit{UserFailures: 6} })
	ctx := context.Background()
	MustSignup(t, s, "victor")
	fail := func(ip string) {
		t.Helper()
		if _, err := s.Login(ctx, "victor", "wrong password", ip); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("guess from %s: err=%v, want ErrInvalidCredentials", ip, err)
		}
	}
	// Three addresses fail twice each: six failures for the username.
	for i := range 3 {
		for range 2 {
			fail(fmt.Sprintf("192.0.2.%d", i))
		}
	}
	clk.Advance(time.Minute)
	// Each pair now has one more guess (3 in all), not eight.
	fail("192.0.2.0")
	_, err := s.Login(ctx, "victor", "wrong password", "192.0.2.0")
	expectRateLimited(t, "4th guess from a pair while under attack", err, 14*time.Minute)
	// A fresh address always gets its password checked: the owner logs in.
	if _, err := s.Login(ctx, "victor", password, "203.0.113.50"); err != nil {
		t.Fatalf("owner from a fresh address: %v", err)
	}
	fail("203.0.113.51")
	// Other usernames are not under attack: more than three guesses per
	// pair, even from an address throttled for victor.
	MustSignup(t, s, "walter")
	for range 5 {
		if _, err := s.Login(ctx, "walter", "wrong password", "192.0.2.0"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("guess at another user: err=%v", err)
		}
	}
}

// Credential stuffing from one address: past AddressFailures over all
// usernames that address is refused; others are not.
func TestService_LoginRateLimitPerAddress(t *testing.T) {
	s, _, clk := MustNew(t, func(c *auth.Config) {
		c.LoginLimit = auth.Limit{Failures: 5, AddressFailures: 3, Window: time.Minute}
	})
	ctx := context.Background()
	MustSignup(t, s, "sybil")
	const ip = "2001:db8::1"
	// Guesses at different (even unknown or invalid) usernames from one address.
	for i, name := range []string{"victim1", "victim2", "x"} {
		if _, err := s.Login(ctx, name, "wrong password", ip); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("failure %d: err=%v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	_, err := s.Login(ctx, "sybil", password, ip)
	expectRateLimited(t, "4th attempt from the address", err, 30*time.Second)
	// The same user from another address, and logins without an address, are fine.
	if _, err := s.Login(ctx, "sybil", password, "2001:db8::2"); err != nil {
		t.Errorf("other address: %v", err)
	}
	if _, err := s.Login(ctx, "sybil", password, ""); err != nil {
		t.Errorf("no address: %v", err)
	}
	// A success does not clear the address's failures (or one account could be
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
