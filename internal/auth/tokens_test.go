package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/internal/auth"
)

func TestService_AccessTokenExpiry(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	tok := MustSignup(t, s, "frank")
	clk.Advance(auth.DefaultAccessTTL - time.Second)
	MustAuthenticate(t, s, tok.AccessToken)
	clk.Advance(time.Second)
	expectInvalidToken(t, s, "expired access token", tok.AccessToken)
}

func TestService_AccessTokenTTLConfig(t *testing.T) {
	s, _, clk := MustNew(t, func(c *auth.Config) { c.AccessTTL = time.Minute })
	tok := MustSignup(t, s, "grace")
	if tok.ExpiresIn != 60 {
		t.Errorf("ExpiresIn=%d, want 60", tok.ExpiresIn)
	}
	clk.Advance(time.Minute)
	expectInvalidToken(t, s, "expired access token", tok.AccessToken)
}

func TestService_TokenKindsNotInterchangeable(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	tok := MustSignup(t, s, "heidi")
	expectInvalidToken(t, s, "refresh token as bearer", tok.RefreshToken)
	expectInvalidToken(t, s, "refresh token as bearer with scheme", "Bearer "+tok.RefreshToken)
	if _, err := s.Refresh(ctx, tok.AccessToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("Refresh(access token) err=%v, want ErrInvalidToken", err)
	}
	// The refresh token is still good after being misused as a bearer.
	if _, err := s.Refresh(ctx, tok.RefreshToken); err != nil {
		t.Errorf("Refresh: %v", err)
	}
}

// sign signs claims with HS256 and key.
func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

func TestService_ForgedAccessTokens(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	tok := MustSignup(t, s, "ivan")
	id := MustAuthenticate(t, s, tok.AccessToken)
	now := clk.Now()
	valid := jwt.MapClaims{
		"sub": id.UID, "username": "ivan", "roles": []string{"user"}, "typ": "access",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": "x",
	}
	// Sanity: the test builds tokens the service accepts.
	MustAuthenticate(t, s, sign(t, jwt.SigningMethodHS256, testSecret, valid))

	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for key, val := range valid {
			c[key] = val
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	parts := strings.Split(tok.AccessToken, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	claims["roles"] = []string{"admin"}
	tamperedPayload, _ := json.Marshal(claims)
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	noneToken, err := jwt.NewWithClaims(jwt.SigningMethodNone, valid).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}

	for name, bearer := range map[string]string{
		"payload tampered (roles admin)": parts[0] + "." + base64.RawURLEncoding.EncodeToString(tamperedPayload) + "." + parts[2],
		"signature cut":                  parts[0] + "." + parts[1] + ".",
		"signature of another token":     parts[0] + "." + parts[1] + "." + strings.Split(sign(t, jwt.SigningMethodHS256, testSecret, valid), ".")[2],
		"alg none":                       noneToken,
		"alg none, original payload":     noneHeader + "." + parts[1] + ".",
		"wrong key":                      sign(t, jwt.SigningMethodHS256, []byte("another secret of at least 32 bytes!"), valid),
		"HS512 with our key":             sign(t, jwt.SigningMethodHS512, testSecret, valid),
		"typ refresh":                    sign(t, jwt.SigningMethodHS256, testSecret, with("typ", "refresh")),
		"no typ":                         sign(t, jwt.SigningMethodHS256, testSecret, with("typ", nil)),
		"no exp":                         sign(t, jwt.SigningMethodHS256, testSecret, with("exp", nil)),
		"expired":                        sign(t, jwt.SigningMethodHS256, testSecret, with("exp", now.Add(-time.Second).Unix())),
		"issued in the future":           sign(t, jwt.SigningMethodHS256, testSecret, with("iat", now.Add(time.Hour).Unix())),
		"no sub":                         sign(t, jwt.SigningMethodHS256, testSecret, with("sub", nil)),
		"RS256 without OIDC":             parts[0][:0] + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + parts[1] + "." + parts[2],
		"empty":                          "",
		"garbage":                        "not a token",
		"two dots":                       "..",
		"header not json":                base64.RawURLEncoding.EncodeToString([]byte("{")) + ".e30.",
	} {
		expectInvalidToken(t, s, name, bearer)
	}
}

func TestService_RefreshRotation(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	first := MustSignup(t, s, "judy")
	uid := MustAuthenticate(t, s, first.AccessToken).UID

	second, err := s.Refresh(ctx, first.RefreshToken)
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if second.RefreshToken == first.RefreshToken || second.AccessToken == first.AccessToken {
		t.Fatalf("Refresh returned the same tokens")
	}
	if id := MustAuthenticate(t, s, second.AccessToken); id.UID != uid || id.Username != "judy" {
		t.Errorf("refreshed identity=%+v, want uid %s", id, uid)
	}
	if _, err := s.Refresh(ctx, first.RefreshToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("second use of a refresh token err=%v, want ErrInvalidToken", err)
	}
	if _, err := s.Refresh(ctx, second.RefreshToken); err != nil {
		t.Errorf("Refresh(new token): %v", err)
	}
	// Only the hash is stored.
	for _, d := range allDocs(t, st, "_refresh_tokens") {
		b, _ := d.MarshalJSON()
		if strings.Contains(string(b), "lr_") {
			t.Errorf("stored refresh token doc contains a raw token: %s", b)
		}
	}
	for _, bad := range []string{"", "lr_", "lr_short", first.AccessToken, "lk_" + first.RefreshToken[3:], first.RefreshToken + "x"} {
		if _, err := s.Refresh(ctx, bad); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("Refresh(%q) err=%v, want ErrInvalidToken", bad, err)
		}
	}
}

func TestService_RefreshRace(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	tok := MustSignup(t, s, "mallory")
	const n = 20
	var wg sync.WaitGroup
	results := make([]auth.Tokens, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Refresh(context.Background(), tok.RefreshToken)
		})
	}
	close(start)
	wg.Wait()
	var winner auth.Tokens
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
			winner = results[i]
		case !errors.Is(err, auth.ErrInvalidToken):
			t.Errorf("refresh %d: %v, want nil or ErrInvalidToken", i, err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent refreshes succeeded, want exactly 1", ok)
	}
	if docs := allDocs(t, st, "_refresh_tokens"); len(docs) != 1 {
		t.Errorf("%d live refresh tokens, want 1 (the winner's)", len(docs))
	}
	if _, err := s.Refresh(context.Background(), winner.RefreshToken); err != nil {
		t.Errorf("Refresh(winner's token): %v", err)
	}
}

func TestService_RefreshExpiry(t *testing.T) {
	s, st, clk := MustNew(t, func(c *auth.Config) { c.RefreshTTL = time.Hour })
	ctx := context.Background()
	tok := MustSignup(t, s, "niaj")
	clk.Advance(59 * time.Minute)
	next, err := s.Refresh(ctx, tok.RefreshToken)
	if err != nil {
		t.Fatalf("Refresh before expiry: %v", err)
	}
	// The rotated token gets a fresh lifetime.
	clk.Advance(59 * time.Minute)
	next, err = s.Refresh(ctx, next.RefreshToken)
	if err != nil {
		t.Fatalf("Refresh of the rotated token: %v", err)
	}
	clk.Advance(time.Hour)
	if _, err := s.Refresh(ctx, next.RefreshToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("Refresh after expiry err=%v, want ErrInvalidToken", err)
	}
	if docs := allDocs(t, st, "_refresh_tokens"); len(docs) != 0 {
		t.Errorf("%d refresh tokens left, want the expired one deleted", len(docs))
	}
}

func TestService_Logout(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	tok := MustSignup(t, s, "olivia")
	other, err := s.Login(ctx, "olivia", password, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Logout(ctx, tok.RefreshToken); err != nil {
		t.Fatalf("Logout: %v", err)
	}
	if _, err := s.Refresh(ctx, tok.RefreshToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("Refresh after logout err=%v, want ErrInvalidToken", err)
	}
	// Idempotent, and garbage is not an error.
	for _, rt := range []string{tok.RefreshToken, "", "garbage", tok.AccessToken} {
		if err := s.Logout(ctx, rt); err != nil {
			t.Errorf("Logout(%.20q): %v, want nil", rt, err)
		}
	}
	// Other sessions of the same user are untouched.
	if _, err := s.Refresh(ctx, other.RefreshToken); err != nil {
		t.Errorf("Refresh of another session: %v", err)
	}
}

func TestService_PurgeExpired(t *testing.T) {
	s, st, clk := MustNew(t, func(c *auth.Config) { c.RefreshTTL = time.Hour })
	ctx := context.Background()
	MustSignup(t, s, "peggy")
	for range 3 {
		if _, err := s.Login(ctx, "peggy", password, ""); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(30 * time.Minute)
	fresh, err := s.Login(ctx, "peggy", password, "")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeExpired(ctx); err != nil || n != 0 {
		t.Fatalf("PurgeExpired before expiry=(%d, %v), want 0", n, err)
	}
	clk.Advance(30 * time.Minute)
	if n, err := s.PurgeExpired(ctx); err != nil || n != 4 {
		t.Fatalf("PurgeExpired=(%d, %v), want 4", n, err)
	}
	if docs := allDocs(t, st, "_refresh_tokens"); len(docs) != 1 {
		t.Errorf("%d refresh tokens left, want 1", len(docs))
	}
	if _, err := s.Refresh(ctx, fresh.RefreshToken); err != nil {
		t.Errorf("Refresh of the unexpired token: %v", err)
	}
}
