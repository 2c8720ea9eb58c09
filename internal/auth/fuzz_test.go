package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/internal/auth"
)

// FuzzAuthenticate: no bearer string panics or authenticates. No service key
// exists, and the only access tokens in the corpus are signed with other
// keys or broken, so every input must be refused.
func FuzzAuthenticate(f *testing.F) {
	s, _, clk := MustNew(f, nil)
	tok := MustSignup(f, s, "fuzzer")
	parts := strings.Split(tok.AccessToken, ".")
	otherKey, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "u", "typ": "access", "exp": clk.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte("not the service's secret, 32+ bytes"))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		"", " ", "Bearer ", "bearer", "..", "a.b.c", "lk_", "lr_", "lk_" + strings.Repeat("A", 43),
		tok.RefreshToken, // refresh tokens are never bearer credentials
		parts[0] + "." + parts[1] + ".",
		parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-2],
		parts[0] + ".." + parts[2],
		otherKey,
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".",
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + parts[1] + "." + parts[2],
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":["x"]}`)) + "." + parts[1] + "." + parts[2],
		"\x00\xff", strings.Repeat("a.", 10000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bearer string) {
		if strings.Contains(bearer, tok.AccessToken) {
			t.Skip("the one valid token")
		}
		id, err := s.Authenticate(context.Background(), bearer)
		if err == nil || id != nil {
			t.Fatalf("Authenticate(%q)=(%+v, %v), want an error", bearer, id, err)
		}
	})
}

// FuzzRefresh: no refresh-token string panics or yields tokens, except the
// valid one.
func FuzzRefresh(f *testing.F) {
	s, _, _ := MustNew(f, nil)
	tok := MustSignup(f, s, "fuzzer")
	for _, seed := range []string{"", "lr_", "lk_" + strings.Repeat("A", 43), "lr_" + strings.Repeat("A", 43), tok.AccessToken, tok.RefreshToken[:len(tok.RefreshToken)-1]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rt string) {
		if rt == tok.RefreshToken {
			t.Skip("the one valid token")
		}
		if got, err := s.Refresh(context.Background(), rt); err == nil {
			t.Fatalf("Refresh(%q)=%+v, want an error", rt, got)
		}
		if err := s.Logout(context.Background(), rt); err != nil {
			t.Fatalf("Logout(%q)=%v, want nil", rt, err)
		}
	})
}

// FuzzConsoleCookie: no session cookie value panics or refreshes but the
// valid one; whatever parses has exactly the cookie's length; logging out
// with anything is harmless.
func FuzzConsoleCookie(f *testing.F) {
	s, _, _ := MustNew(f, nil)
	key := sha256.Sum256([]byte("k"))
	cs, err := s.StartConsoleSessionWithAdminKey(context.Background(), "k", key, "")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{"", auth.ConsoleCookiePrefix, cs.Cookie[:len(cs.Cookie)-1], cs.Cookie + "A", "lr_" + cs.Cookie[4:], strings.ReplaceAll(cs.Cookie, ".", "_")} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if strings.Contains(v, cs.Cookie[len(auth.ConsoleCookiePrefix):len(auth.ConsoleCookiePrefix)+22]) {
			t.Skip("the valid session's id: a wrong secret ends it on purpose")
		}
		if _, _, ok := auth.ParseConsoleCookie(v); ok && len(v) != auth.ConsoleCookieLength {
			t.Fatalf("ParseConsoleCookie(%q) accepted %d bytes", v, len(v))
		}
		if got, err := s.RefreshConsoleSession(context.Background(), v, key); err == nil {
			t.Fatalf("RefreshConsoleSession(%q)=%+v, want an error", v, got)
		}
		if err := s.EndConsoleSession(context.Background(), v); err != nil {
			t.Fatalf("EndConsoleSession(%q)=%v", v, err)
		}
	})
}
