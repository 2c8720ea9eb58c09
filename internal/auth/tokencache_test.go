package auth_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/internal/auth"
)

// tokenClaims are the claims of an access token of uid valid from iat to
// exp (as the service signs them).
func tokenClaims(uid string, iat, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"sub": uid, "username": "u-" + uid, "roles": []string{"user"}, "typ": "access",
		"iat": iat.Unix(), "exp": exp.Unix(), "jti": uid,
	}
}

// authenticateTwice authenticates bearer twice (a miss, then a cache hit)
// and returns the second identity.
func authenticateTwice(t *testing.T, s *auth.Service, bearer string) *auth.Identity {
	t.Helper()
	first := MustAuthenticate(t, s, bearer)
	second := MustAuthenticate(t, s, bearer)
	if first.UID != second.UID || first.Username != second.Username || first.Kind != second.Kind {
		t.Fatalf("cached identity %+v differs from the verified one %+v", second, first)
	}
	return second
}

// A cached token is refused from its exp on, like an uncached one.
func TestVerifiedCache_ExpiredTokenRefused(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	tok := MustSignup(t, s, "olga")
	authenticateTwice(t, s, tok.AccessToken)
	if n := auth.VerifiedCacheLen(s); n != 1 {
		t.Fatalf("%d cached tokens, want 1", n)
	}
	clk.Advance(auth.DefaultAccessTTL - time.Second)
	MustAuthenticate(t, s, tok.AccessToken)
	clk.Advance(time.Second)
	expectInvalidToken(t, s, "expired cached access token", tok.AccessToken)
	expectInvalidToken(t, s, "expired cached access token, again", tok.AccessToken)
	if n := auth.VerifiedCacheLen(s); n != 0 {
		t.Errorf("%d cached tokens after expiry, want 0", n)
	}

	// A console session token too (its own, shorter, exp).
	cs := mustAdminKeySession(t, s)
	authenticateTwice(t, s, cs.AccessToken)
	clk.Advance(auth.DefaultConsoleTokenTTL)
	expectInvalidToken(t, s, "expired cached console token", cs.AccessToken)
}

// The cache keeps the validator's lower bounds: a clock before iat or nbf
// refuses a token that was accepted (and cached) later.
func TestVerifiedCache_NotBeforeIssuedAtOrNbf(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	now := clk.Now()
	tok := sign(t, jwt.SigningMethodHS256, testSecret, tokenClaims("iat-user", now, now.Add(time.Hour)))
	authenticateTwice(t, s, tok)
	clk.Advance(-time.Second)
	expectInvalidToken(t, s, "cached token before its iat", tok)
	clk.Advance(time.Second)
	MustAuthenticate(t, s, tok)

	c := tokenClaims("nbf-user", now.Add(-time.Hour), now.Add(time.Hour))
	c["nbf"] = now.Unix()
	tok = sign(t, jwt.SigningMethodHS256, testSecret, c)
	authenticateTwice(t, s, tok)
	clk.Advance(-time.Second)
	expectInvalidToken(t, s, "cached token before its nbf", tok)
}

// A token signed with another secret is refused even when the same claims,
// signed with the service's secret, are cached; and a token cached by one
// service is not accepted by a service with another secret.
func TestVerifiedCache_OtherSecret(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	other, _, _ := MustNew(t, func(c *auth.Config) { c.Secret = []byte("another secret, 32 bytes or more!") })
	now := clk.Now()
	claims := tokenClaims("mallory", now, now.Add(time.Hour))
	good := sign(t, jwt.SigningMethodHS256, testSecret, claims)
	forged := sign(t, jwt.SigningMethodHS256, []byte("another secret, 32 bytes or more!"), claims)
	authenticateTwice(t, s, good)
	expectInvalidToken(t, s, "same claims, another secret", forged)
	expectInvalidToken(t, other, "a token another service cached", good)
	authenticateTwice(t, other, forged)
	expectInvalidToken(t, s, "same claims, another secret, cached by the other service", forged)
	// Trigger tokens are signed with a derived key: refused, never cached.
	trig, err := s.IssueTriggerToken(auth.TriggerGrant{TriggerID: "t1", Database: "default", Scope: []string{"a/*"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expectInvalidToken(t, s, "trigger token", trig)
	expectInvalidToken(t, s, "trigger token, again", trig)
	if n := auth.VerifiedCacheLen(s); n != 1 {
		t.Errorf("%d cached tokens, want 1 (failures are never cached)", n)
	}
}

// Each caller gets its own Identity: changing one does not change what the
// next request of the same token sees.
func TestVerifiedCache_IdentityIsACopy(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	tok := MustSignup(t, s, "peggy")
	id := MustAuthenticate(t, s, tok.AccessToken)
	uid := id.UID
	id.UID, id.Username, id.Kind = "someone-else", "x", auth.KindServiceKey
	id2 := MustAuthenticate(t, s, tok.AccessToken)
	id2.UID = "another"
	if id3 := MustAuthenticate(t, s, tok.AccessToken); id3.UID != uid || id3.Username != "peggy" || id3.Kind != auth.KindUser {
		t.Errorf("identity %+v after callers changed theirs", id3)
	}
}

// Service keys are looked up on every request (revocation takes effect at
// once) and never enter the cache.
func TestVerifiedCache_ServiceKeysNotCached(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	key, err := s.CreateServiceKey(ctx, "svc", nil)
	if err != nil {
		t.Fatal(err)
	}
	authenticateTwice(t, s, key)
	if err := s.RevokeServiceKey(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	expectInvalidToken(t, s, "revoked service key", key)
	if n := auth.VerifiedCacheLen(s); n != 0 {
		t.Errorf("%d cached tokens, want 0", n)
	}
}

// OIDC tokens are verified against the JWK Set every time and never enter
// the cache.
func TestVerifiedCache_OIDCNotCached(t *testing.T) {
	p := newIDP(t)
	key := mustRSAKey(t)
	p.add("rsa-1", key)
	s, _, clk := MustNew(t, func(c *auth.Config) {
		c.JWKSURL, c.Issuer, c.Audience = p.url(), testIssuer, testAudience
		c.HTTPClient = p.srv.Client()
	})
	now := clk.Now()
	tok := idToken(t, key, "rsa-1", jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "sub": "oidc|1",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	authenticateTwice(t, s, tok)
	if n := auth.VerifiedCacheLen(s); n != 0 {
		t.Errorf("%d cached tokens, want 0", n)
	}
}

// The cache never holds more than its bound, and tokens evicted from it
// are still accepted (verified again).
func TestVerifiedCache_Bounded(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	auth.SetVerifiedCacheSize(s, 8)
	now := clk.Now()
	var toks []string
	for i := range 50 {
		toks = append(toks, sign(t, jwt.SigningMethodHS256, testSecret, tokenClaims(fmt.Sprint("u", i), now, now.Add(time.Hour))))
	}
	for round := range 3 {
		for i, tok := range toks {
			if id := MustAuthenticate(t, s, tok); id.UID != fmt.Sprint("u", i) {
				t.Fatalf("round %d: token %d authenticated as %q", round, i, id.UID)
			}
			if n := auth.VerifiedCacheLen(s); n > 8 {
				t.Fatalf("%d cached tokens, bound 8", n)
			}
		}
	}
	if n := auth.VerifiedCacheLen(s); n != 8 {
		t.Errorf("%d cached tokens, want 8 (full)", n)
	}
}

// Many goroutines authenticate valid and expired tokens through a small
// cache (so entries are evicted and re-added all the time): every valid
// token is accepted as its own subject, every expired one refused.
func TestVerifiedCache_Concurrent(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	auth.SetVerifiedCacheSize(s, 5)
	now := clk.Now()
	type token struct {
		bearer, uid string
		valid       bool
	}
	var toks []token
	for i := range 20 {
		uid := fmt.Sprint("u", i)
		exp := now.Add(time.Hour)
		if i%4 == 0 {
			exp = now // expired at now
		}
		toks = append(toks, token{sign(t, jwt.SigningMethodHS256, testSecret, tokenClaims(uid, now.Add(-time.Hour), exp)), uid, i%4 != 0})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				tk := toks[(g*7+i)%len(toks)]
				id, err := s.Authenticate(context.Background(), "Bearer "+tk.bearer)
				switch {
				case tk.valid && (err != nil || id.UID != tk.uid):
					errs <- fmt.Errorf("valid token of %s: (%+v, %v)", tk.uid, id, err)
					return
				case !tk.valid && (!errors.Is(err, auth.ErrInvalidToken) || id != nil):
					errs <- fmt.Errorf("expired token of %s: (%+v, %v)", tk.uid, id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := auth.VerifiedCacheLen(s); n > 5 {
		t.Errorf("%d cached tokens, bound 5", n)
	}
}
