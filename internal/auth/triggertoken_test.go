package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/internal/auth"
)

var grant = auth.TriggerGrant{TriggerID: "sx", Database: "default", Scope: []string{"users/u1/inbox/**"}, Delivery: "dlv_1"}

func TestTriggerToken_RoundTripAndExpiry(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	tok, err := s.IssueTriggerToken(grant, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.VerifyTriggerToken("Bearer " + tok)
	if err != nil {
		t.Fatal(err)
	}
	if g.TriggerID != "sx" || g.Database != "default" || strings.Join(g.Scope, ",") != "users/u1/inbox/**" || g.Delivery != "dlv_1" ||
		g.UID() != "trigger:sx" || !g.Expires.Equal(clk.Now().Add(5*time.Minute).Truncate(time.Second)) {
		t.Fatalf("grant %+v", g)
	}
	clk.Advance(5*time.Minute - time.Second)
	if _, err := s.VerifyTriggerToken(tok); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := s.VerifyTriggerToken(tok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("at expiry: %v", err)
	}
}

// Authenticate — what REST, WebSocket, SSE and RxDB use — never accepts a
// trigger token, and VerifyTriggerToken never accepts an access token.
func TestTriggerToken_NotAnAccessToken(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	tok, err := s.IssueTriggerToken(grant, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expectInvalidToken(t, s, "trigger token", tok)
	expectInvalidToken(t, s, "trigger token with scheme", "Bearer "+tok)

	pair := MustSignup(t, s, "mallory")
	if _, err := s.VerifyTriggerToken(pair.AccessToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("access token as trigger token: %v", err)
	}
	// Claims of a trigger token signed with the access-token key (the raw
	// secret): refused, the key is not the trigger key; and the same claims
	// as an access token: refused, the typ is not "access".
	now := clk.Now()
	claims := jwt.MapClaims{"typ": "trigger", "db": "default", "scope": []string{"**"}, "sub": "trigger:sx",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
	forged := sign(t, jwt.SigningMethodHS256, testSecret, claims)
	if _, err := s.VerifyTriggerToken(forged); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("trigger claims under the access key: %v", err)
	}
	expectInvalidToken(t, s, "trigger claims under the access key", forged)

	// Another secret's trigger token.
	other, _, _ := MustNew(t, func(c *auth.Config) { c.Secret = []byte("another secret of at least 32 bytes!") })
	otok, err := other.IssueTriggerToken(grant, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.VerifyTriggerToken(otok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("another secret's trigger token: %v", err)
	}
	parts := strings.Split(tok, ".")
	if _, err := s.VerifyTriggerToken(parts[0] + "." + parts[1] + "."); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("signature cut: %v", err)
	}
}

func TestTriggerToken_Bounds(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	for name, c := range map[string]struct {
		g   auth.TriggerGrant
		ttl time.Duration
	}{
		"ttl over 15m":   {grant, auth.MaxTriggerTokenTTL + time.Second},
		"zero ttl":       {grant, 0},
		"no trigger":     {auth.TriggerGrant{Database: "default", Scope: grant.Scope}, time.Minute},
		"bad database":   {auth.TriggerGrant{TriggerID: "x", Database: "no/such", Scope: grant.Scope}, time.Minute},
		"no scope":       {auth.TriggerGrant{TriggerID: "x", Database: "default"}, time.Minute},
		"too many scope": {auth.TriggerGrant{TriggerID: "x", Database: "default", Scope: make([]string, auth.MaxTriggerScope+1)}, time.Minute},
		"empty pattern":  {auth.TriggerGrant{TriggerID: "x", Database: "default", Scope: []string{""}}, time.Minute},
	} {
		if _, err := s.IssueTriggerToken(c.g, c.ttl); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
	if _, err := s.IssueTriggerToken(grant, auth.MaxTriggerTokenTTL); err != nil {
		t.Fatalf("15m: %v", err)
	}
}
