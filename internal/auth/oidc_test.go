package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/internal/auth"
)

const (
	testIssuer   = "https://idp.example.com/"
	testAudience = "loom-test"
)

// idp is a fake identity provider: a real HTTP server serving a JWK Set of
// keys the test signs with.
type idp struct {
	srv     *httptest.Server
	fetches atomic.Int64

	mu   sync.Mutex
	keys map[string]crypto.Signer // kid → key; all served
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{keys: map[string]crypto.Signer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serveJWKS))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) url() string { return p.srv.URL + "/.well-known/jwks.json" }

func (p *idp) add(kid string, key crypto.Signer) {
	p.mu.Lock()
	p.keys[kid] = key
	p.mu.Unlock()
}

func (p *idp) serveJWKS(w http.ResponseWriter, r *http.Request) {
	p.fetches.Add(1)
	b64 := base64.RawURLEncoding.EncodeToString
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []map[string]string
	for kid, k := range p.keys {
		switch pub := k.Public().(type) {
		case *rsa.PublicKey:
			keys = append(keys, map[string]string{
				"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
				"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
			})
		case *ecdsa.PublicKey:
			raw, err := pub.Bytes() // 0x04 || X || Y, each 32 bytes for P-256
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			// No "use" and no "alg": both are optional in a JWK.
			keys = append(keys, map[string]string{
				"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:]),
			})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"keys": keys})
}

func mustRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// idToken signs claims with key under kid ("" = no kid header).
func idToken(t *testing.T, key crypto.Signer, kid string, claims jwt.MapClaims) string {
	t.Helper()
	method := jwt.SigningMethod(jwt.SigningMethodRS256)
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		method = jwt.SigningMethodES256
	}
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

func TestService_OIDC(t *testing.T) {
	p := newIDP(t)
	rsaKey, ecKey := mustRSAKey(t), mustECKey(t)
	p.add("rsa-1", rsaKey)
	p.add("ec-1", ecKey)
	s, _, clk := MustNew(t, func(c *auth.Config) {
		c.JWKSURL, c.Issuer, c.Audience = p.url(), testIssuer, testAudience
		c.HTTPClient = p.srv.Client()
	})
	if n := p.fetches.Load(); n != 1 {
		t.Fatalf("JWK Set fetched %d times at New, want 1", n)
	}
	now := clk.Now()
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{
			"iss": testIssuer, "aud": testAudience, "sub": "oidc|1234",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
			"preferred_username": "walter", "roles": []string{"editor", "user"},
		}
		if edit != nil {
			edit(c)
		}
		return c
	}

	t.Run("RS256", func(t *testing.T) {
		id := MustAuthenticate(t, s, idToken(t, rsaKey, "rsa-1", claims(nil)))
		if id.Kind != auth.KindOIDC || id.UID != "oidc|1234" || id.Username != "walter" || !slices.Equal(id.Roles, []string{"editor", "user"}) {
			t.Errorf("identity=%+v", id)
		}
		if id.Claims["iss"] != testIssuer {
			t.Errorf("claims=%v, want the token's claims", id.Claims)
		}
	})
	t.Run("ES256", func(t *testing.T) {
		id := MustAuthenticate(t, s, idToken(t, ecKey, "ec-1", claims(func(c jwt.MapClaims) {
			c["aud"] = []string{"other", testAudience}
			c["roles"] = []any{"user", 7} // not a list of strings: no roles
			delete(c, "preferred_username")
			c["email"] = "walter@example.com"
		})))
		if id.Kind != auth.KindOIDC || id.UID != "oidc|1234" || id.Username != "walter@example.com" || len(id.Roles) != 0 {
			t.Errorf("identity=%+v", id)
		}
	})

	otherRSA := mustRSAKey(t)
	for name, bearer := range map[string]string{
		"wrong issuer":          idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com/" })),
		"no issuer":             idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { delete(c, "iss") })),
		"wrong audience":        idToken(t, ecKey, "ec-1", claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"no audience":           idToken(t, ecKey, "ec-1", claims(func(c jwt.MapClaims) { delete(c, "aud") })),
		"expired":               idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Second).Unix() })),
		"no exp":                idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { delete(c, "exp") })),
		"no sub":                idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { delete(c, "sub") })),
		"not yet valid":         idToken(t, rsaKey, "rsa-1", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })),
		"no kid":                idToken(t, rsaKey, "", claims(nil)),
		"signed by another key": idToken(t, otherRSA, "rsa-1", claims(nil)),
		"EC token, RSA kid":     idToken(t, ecKey, "rsa-1", claims(nil)),
		// Algorithm confusion: HS256 keyed with the provider's public key.
		"HS256 with public key": sign(t, jwt.SigningMethodHS256, rsaKey.PublicKey.N.Bytes(), claims(nil)),
		"RS512":                 mustSignWith(t, jwt.SigningMethodRS512, rsaKey, "rsa-1", claims(nil)),
	} {
		expectInvalidToken(t, s, name, bearer)
	}

	// The token expires with the clock.
	tok := idToken(t, rsaKey, "rsa-1", claims(nil))
	clk.Advance(time.Hour)
	expectInvalidToken(t, s, "expired by the clock", tok)
}

func mustSignWith(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestService_OIDCUnknownKID(t *testing.T) {
	p := newIDP(t)
	first := mustECKey(t)
	p.add("k1", first)
	s, _, clk := MustNew(t, func(c *auth.Config) {
		c.JWKSURL = p.url() // no issuer or audience configured: not checked
		c.HTTPClient = p.srv.Client()
	})
	claims := jwt.MapClaims{"sub": "u1", "exp": clk.Now().Add(time.Hour).Unix(), "iss": "anyone"}
	MustAuthenticate(t, s, idToken(t, first, "k1", claims))
	if n := p.fetches.Load(); n != 1 {
		t.Fatalf("fetches=%d, want 1 (known kid served from cache)", n)
	}

	// The provider rotates in a new key: the first token with its kid
	// triggers one re-fetch and verifies.
	second := mustRSAKey(t)
	p.add("k2", second)
	MustAuthenticate(t, s, idToken(t, second, "k2", claims))
	if n := p.fetches.Load(); n != 2 {
		t.Fatalf("fetches=%d, want 2 (one re-fetch for the new kid)", n)
	}

	// Unknown kids right after are refused without another fetch: at most
	// one re-fetch per minute.
	for range 5 {
		expectInvalidToken(t, s, "unknown kid", idToken(t, mustECKey(t), "nope", claims))
	}
	if n := p.fetches.Load(); n != 2 {
		t.Errorf("fetches=%d after unknown kids, want still 2 (rate limited)", n)
	}
	// Known kids keep working meanwhile.
	MustAuthenticate(t, s, idToken(t, first, "k1", claims))
}

func TestService_OIDCProviderDown(t *testing.T) {
	// A provider that fails at startup does not keep New from succeeding;
	// its tokens are refused until the JWK Set can be fetched.
	var up atomic.Bool
	p := newIDP(t)
	key := mustRSAKey(t)
	p.add("k", key)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.serveJWKS(w, r)
	}))
	defer srv.Close()
	s, _, clk := MustNew(t, func(c *auth.Config) { c.JWKSURL = srv.URL; c.HTTPClient = srv.Client() })
	claims := jwt.MapClaims{"sub": "u1", "exp": clk.Now().Add(time.Hour).Unix()}
	expectInvalidToken(t, s, "provider down", idToken(t, key, "k", claims))
	// Once up, the next unknown-kid re-fetch is at most a minute away; the
	// limiter allows none yet, so the token stays refused now.
	up.Store(true)
	expectInvalidToken(t, s, "provider up, re-fetch rate limited", idToken(t, key, "k", claims))
}

func TestService_OIDCNotConfigured(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	key := mustRSAKey(t)
	tok := idToken(t, key, "k", jwt.MapClaims{"sub": "u1", "exp": clk.Now().Add(time.Hour).Unix()})
	_, err := s.Authenticate(context.Background(), tok)
	if !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("RS256 token without OIDC err=%v, want ErrInvalidToken", err)
	}
}
