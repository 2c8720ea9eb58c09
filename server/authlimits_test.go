package server_test

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/server"
)

// Abuse resistance of /auth/v1 on a real server: client addresses are
// simulated with X-Forwarded-For from loopback, which the server trusts only
// when 127.0.0.1 is in Config.TrustedProxies.

const rightPassword = "correct horse battery"

// from is an anonymous request whose X-Forwarded-For is xff.
func from(xff string) map[string]string {
	return map[string]string{"Authorization": "", "X-Forwarded-For": xff}
}

func (e *testEnv) login(t *testing.T, name, password string, headers map[string]string) *response {
	t.Helper()
	return e.Do(t, "POST", "/auth/v1/login", fmt.Sprintf(`{"username":%q,"password":%q}`, name, password), headers)
}

func (e *testEnv) signupFrom(t *testing.T, name string, headers map[string]string) *response {
	t.Helper()
	return e.Do(t, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":%q,"password":%q}`, name, rightPassword), headers)
}

// wantRateLimited checks a 429 RATE_LIMITED with a Retry-After.
func wantRateLimited(t *testing.T, what string, r *response) {
	t.Helper()
	wantStatus(t, what, r, http.StatusTooManyRequests)
	if r.JSON(t)["code"] != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("%s: 429 without RATE_LIMITED or Retry-After: %v %s", what, r.Header, r.Body)
	}
}

// An attacker hammering a username from one address throttles that
// (username, address) pair only: the owner logs in from another address, and
// the attacker cannot choose its address by prepending to X-Forwarded-For.
func TestAuthAPI_AttackerDoesNotLockOutOwner(t *testing.T) {
	env := newAuthEnvWith(t, nil, server.Config{TrustedProxies: []string{"127.0.0.1"}})
	env.signup(t, "victim")
	env.signup(t, "bystander")
	const attacker, owner = "198.51.100.7", "203.0.113.5"

	for i := range auth.DefaultLoginFailures {
		// The client sent "X-Forwarded-For: 203.0.113.5"; the proxy
		// appended the address it saw.
		r := env.login(t, "victim", fmt.Sprintf("guess %d", i), from(owner+", "+attacker))
		wantStatus(t, "attacker's guess", r, http.StatusUnauthorized)
	}
	wantRateLimited(t, "attacker's next guess", env.login(t, "victim", "one more guess", from(attacker)))
	wantRateLimited(t, "right password from the attacker's pair", env.login(t, "victim", rightPassword, from(attacker)))

	wantStatus(t, "owner from her own address", env.login(t, "victim", rightPassword, from(owner)), http.StatusOK)
	wantStatus(t, "owner through X-Real-IP", env.login(t, "victim", rightPassword,
		map[string]string{"Authorization": "", "X-Real-IP": "203.0.113.6"}), http.StatusOK)
	wantStatus(t, "another user behind the attacker's address", env.login(t, "bystander", rightPassword, from(attacker)), http.StatusOK)
	// The attacker's pair is still throttled after the owner's success.
	wantRateLimited(t, "attacker after the owner's login", env.login(t, "victim", "guess", from(attacker)))
}

// A username guessed from many addresses is slowed down — each address gets
// only three failures once the username passed UserFailures — but its owner,
// from an address that has not failed, still logs in.
func TestAuthAPI_DistributedGuessingNeverLocksOutOwner(t *testing.T) {
	env := newAuthEnvWith(t, func(c *auth.Config) { c.LoginLimit = auth.Limit{UserFailures: 12} },
		server.Config{TrustedProxies: []string{"127.0.0.0/8"}})
	env.signup(t, "victim")
	for i := range 12 {
		wantStatus(t, "guess from a botnet address", env.login(t, "victim", "guess", from(fmt.Sprintf("192.0.2.%d", i))), http.StatusUnauthorized)
	}
	// Under attack: 192.0.2.0 has two more guesses, not nine.
	for range 2 {
		wantStatus(t, "guess while under attack", env.login(t, "victim", "guess", from("192.0.2.0")), http.StatusUnauthorized)
	}
	wantRateLimited(t, "4th guess from one address while under attack", env.login(t, "victim", "guess", from("192.0.2.0")))
	wantStatus(t, "owner from a fresh address", env.login(t, "victim", rightPassword, from("203.0.113.5")), http.StatusOK)
}

// X-Forwarded-For and X-Real-IP from a peer that is not a trusted proxy are
// ignored: rotating them does not escape a per-address limit.
func TestAuthAPI_UntrustedForwardedForIgnored(t *testing.T) {
	for name, proxies := range map[string][]string{"no proxies": nil, "other proxies": {"10.0.0.0/8", "::1"}} {
		t.Run(name, func(t *testing.T) {
			env := newAuthEnvWith(t, nil, server.Config{TrustedProxies: proxies, SignupRate: 1, SignupBurst: 3})
			spoof := func(i int) map[string]string {
				return map[string]string{"Authorization": "", "X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i), "X-Real-IP": fmt.Sprintf("203.0.113.%d", i)}
			}
			for i := range 3 {
				wantStatus(t, "signup", env.signupFrom(t, fmt.Sprintf("user%d", i), spoof(i)), http.StatusOK)
			}
			wantRateLimited(t, "signup with yet another forged address", env.signupFrom(t, "user3", spoof(3)))

			for i := range auth.DefaultLoginFailures {
				wantStatus(t, "guess", env.login(t, "user0", "guess", spoof(10+i)), http.StatusUnauthorized)
			}
			wantRateLimited(t, "guess with yet another forged address", env.login(t, "user0", "guess", spoof(99)))
		})
	}
}

// Signups are limited per client address (IPv6 per /64); another address
// can still sign up.
func TestAuthAPI_SignupLimitedPerAddress(t *testing.T) {
	env := newAuthEnvWith(t, nil, server.Config{TrustedProxies: []string{"127.0.0.1"}, SignupRate: 1, SignupBurst: 3})
	for i := range 3 {
		wantStatus(t, "signup within the burst", env.signupFrom(t, fmt.Sprintf("flood%d", i), from("198.51.100.7")), http.StatusOK)
	}
	r := env.signupFrom(t, "flood3", from("198.51.100.7"))
	wantRateLimited(t, "signup over the burst", r)
	if ra := r.Header.Get("Retry-After"); ra != "60" {
		t.Errorf("Retry-After=%q, want 60 (one signup per minute)", ra)
	}
	// A refused signup created nothing.
	wantStatus(t, "login as the refused signup", env.login(t, "flood3", rightPassword, from("203.0.113.9")), http.StatusUnauthorized)
	wantStatus(t, "signup from another address", env.signupFrom(t, "flood3", from("203.0.113.5")), http.StatusOK)

	for i, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:aaaa::3"} {
		wantStatus(t, "IPv6 signup within the burst", env.signupFrom(t, fmt.Sprintf("six%d", i), from(ip)), http.StatusOK)
	}
	wantRateLimited(t, "another address of the same /64", env.signupFrom(t, "six3", from("2001:db8:1:2:ffff::4")))
	wantStatus(t, "another /64", env.signupFrom(t, "six3", from("2001:db8:1:3::1")), http.StatusOK)
}

// A signup the server refuses for its own content (a weak password, a bad
// username) costs no hashing, so it does not use up the address's signups:
// a person fixing their password is not locked out by the signup limit.
func TestAuthAPI_InvalidSignupsDoNotUseTheLimit(t *testing.T) {
	env := newAuthEnvWith(t, nil, server.Config{TrustedProxies: []string{"127.0.0.1"}, SignupRate: 1, SignupBurst: 1})
	addr := from("198.51.100.8")
	for i := range 5 {
		r := env.Do(t, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":"carol","password":"short%d"}`, i), addr)
		wantError(t, "signup with a weak password", r, http.StatusBadRequest, "BAD_REQUEST")
	}
	wantError(t, "signup with a bad username", env.Do(t, "POST", "/auth/v1/signup", `{"username":"c","password":"correct horse battery"}`, addr), http.StatusBadRequest, "BAD_REQUEST")
	wantStatus(t, "the first valid signup", env.signupFrom(t, "carol", addr), http.StatusOK)
	wantRateLimited(t, "the next one", env.signupFrom(t, "carol2", addr))
}

// Password hashing is bounded: with one hashing slot and no waiting, a
// signup that arrives while another is hashing gets 503 UNAVAILABLE with
// Retry-After, visible in /metrics, and goes through once the slot is free.
func TestAuthAPI_PasswordHashingBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := newAuthEnvWith(t, func(c *auth.Config) {
		c.BcryptCost = 10 // tens of milliseconds: long enough to be seen in flight
		c.MaxConcurrentHashes = 1
		c.HashWait = -1
		c.Registerer = reg
	}, server.Config{Registry: reg, TrustedProxies: []string{"127.0.0.1"}})

	var wg sync.WaitGroup
	var first *response
	wg.Go(func() { first = env.signupFrom(t, "slow", from("198.51.100.1")) })
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, env, "loom_auth_password_hashes_in_flight") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("no password hash was ever seen in flight in /metrics")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := env.signupFrom(t, "second", from("198.51.100.2"))
	wantStatus(t, "signup while the only slot hashes", r, http.StatusServiceUnavailable)
	if r.JSON(t)["code"] != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("503 without UNAVAILABLE or Retry-After: %v %s", r.Header, r.Body)
	}
	wg.Wait()
	wantStatus(t, "the signup that held the slot", first, http.StatusOK)
	if got := metric(t, env, "loom_auth_password_hashes_rejected_total"); got != "1" {
		t.Errorf("rejected_total=%s, want 1", got)
	}
	wantStatus(t, "signup once the slot is free", env.signupFrom(t, "second", from("198.51.100.2")), http.StatusOK)
}

// metric reads one unlabelled sample from /metrics ("" when absent).
func metric(t *testing.T, env *testEnv, name string) string {
	t.Helper()
	r := env.Do(t, "GET", "/metrics", "", nil)
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// X-Forwarded-For arriving while no proxy is trusted is most likely an
// unconfigured reverse proxy (every client behind it would share one
// address and its limits): the server says so in its log, once.
func TestServer_WarnsOfForwardedForWithoutTrustedProxies(t *testing.T) {
	var logs syncBuffer
	env := newAuthEnvWith(t, nil, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 3 {
		env.login(t, "nobody", "guess", from(fmt.Sprintf("198.51.100.%d", i)))
	}
	if n := strings.Count(logs.String(), "trusted_proxies is empty"); n != 1 {
		t.Fatalf("warning logged %d times, want once; logs:\n%s", n, logs.String())
	}

	var logs2 syncBuffer
	env = newAuthEnvWith(t, nil, server.Config{Logger: slog.New(slog.NewTextHandler(&logs2, nil)), TrustedProxies: []string{"10.0.0.0/8"}})
	env.login(t, "nobody", "guess", from("198.51.100.1"))
	if strings.Contains(logs2.String(), "trusted_proxies is empty") {
		t.Fatalf("warned although trusted proxies are configured:\n%s", logs2.String())
	}
}

// Streams per address count the client address behind a trusted proxy:
// two clients behind one proxy do not share one allowance.
func TestRealtime_StreamsPerAddressBehindTrustedProxy(t *testing.T) {
	e := newAuthEnvWith(t, nil, server.Config{TrustedProxies: []string{"127.0.0.1"}, Realtime: server.RealtimeConfig{MaxStreamsPerIP: 1}})
	u := e.signup(t, "streamer")
	via := func(addr string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + u.Access, "X-Forwarded-For": addr}
	}
	e.dialWS(t, "", via("198.51.100.7"))
	if _, res, err := e.tryDialWS("", via("198.51.100.7")); err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second stream from one address: err %v, want 429", err)
	}
	e.dialWS(t, "", via("203.0.113.5"))
}
