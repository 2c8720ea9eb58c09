package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/collections"
)

// Trigger tokens are the preIssuedToken of a webhook delivered in the
// Syntrix format (triggers, "format": "syntrix"): a short-lived HS256
// token that lets the receiving handler write back through
// /trigger/v1/databases/{db}/... and nowhere else, within a scope of path
// patterns.
//
// They are kept apart from access tokens three ways, so that no mistake in
// one check turns one into the other: they are signed with a key derived
// from the secret for this purpose only (an access-token verifier fails on
// the signature), their typ is "trigger" (verifyAccess wants "access"),
// and only VerifyTriggerToken reads them. Authenticate, which every other
// surface (REST, WebSocket, SSE, RxDB) uses, refuses them.
const (
	// KindTriggerToken names the caller a trigger token authenticates.
	KindTriggerToken = "trigger-token"
	// MaxTriggerTokenTTL bounds a trigger token's lifetime.
	MaxTriggerTokenTTL = 15 * time.Minute
	// MaxTriggerScope bounds the path patterns of one token.
	MaxTriggerScope = 32

	tokenTypeTrigger = "trigger"
	// triggerUIDPrefix starts the uid of a trigger token's caller.
	triggerUIDPrefix = "trigger:"
)

// TriggerGrant is what a trigger token allows: the database, and the path
// patterns (internal/pathpattern syntax, captures already bound) every
// document read, written or queried must match.
type TriggerGrant struct {
	TriggerID string
	Database  string
	Scope     []string
	// Delivery names the delivery the token was minted for (logged,
	// never trusted for access).
	Delivery string
	// Expires is when the token stops being valid (set by
	// VerifyTriggerToken; IssueTriggerToken takes a ttl).
	Expires time.Time
}

// UID is the uid of the caller the grant authenticates: "trigger:<id>".
func (g *TriggerGrant) UID() string { return triggerUIDPrefix + g.TriggerID }

type triggerClaims struct {
	Typ      string   `json:"typ"`
	DB       string   `json:"db"`
	Scope    []string `json:"scope"`
	Delivery string   `json:"did,omitempty"`
	jwt.RegisteredClaims
}

// triggerKey is the HMAC key of trigger tokens: derived from the signing
// secret, distinct from the key of access tokens.
func triggerKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("loom trigger token v1"))
	return m.Sum(nil)
}

// IssueTriggerToken mints a trigger token for g that expires after ttl
// (at most MaxTriggerTokenTTL).
func (s *Service) IssueTriggerToken(g TriggerGrant, ttl time.Duration) (string, error) {
	if err := checkGrant(&g); err != nil {
		return "", err
	}
	if ttl <= 0 || ttl > MaxTriggerTokenTTL {
		return "", fmt.Errorf("auth: trigger token lifetime %s outside (0, %s]", ttl, MaxTriggerTokenTTL)
	}
	now := s.now()
	claims := triggerClaims{
		Typ:      tokenTypeTrigger,
		DB:       g.Database,
		Scope:    g.Scope,
		Delivery: g.Delivery,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   g.UID(),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        collections.NewID(),
		},
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.triggerSecret)
	if err != nil {
		return "", fmt.Errorf("auth: sign trigger token: %w", err)
	}
	return tok, nil
}

// VerifyTriggerToken checks a trigger token (with or without "Bearer "):
// signature, expiry, typ, and a well-formed grant. Anything else is
// ErrInvalidToken.
func (s *Service) VerifyTriggerToken(bearer string) (*TriggerGrant, error) {
	tok, ok := bearerToken(bearer)
	if !ok {
		return nil, ErrInvalidToken
	}
	var claims triggerClaims
	if _, err := s.access.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return s.triggerSecret, nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if claims.Typ != tokenTypeTrigger {
		return nil, fmt.Errorf("%w: not a trigger token", ErrInvalidToken)
	}
	id, ok := strings.CutPrefix(claims.Subject, triggerUIDPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: not a trigger token", ErrInvalidToken)
	}
	g := &TriggerGrant{TriggerID: id, Database: claims.DB, Scope: claims.Scope, Delivery: claims.Delivery}
	if claims.ExpiresAt != nil {
		g.Expires = claims.ExpiresAt.Time
	}
	if err := checkGrant(g); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return g, nil
}

// errBadGrant: a grant without a trigger, a valid database or a scope.
var errBadGrant = errors.New("auth: bad trigger grant")

func checkGrant(g *TriggerGrant) error {
	switch {
	case g.TriggerID == "" || len(g.TriggerID) > 64:
		return fmt.Errorf("%w: trigger id", errBadGrant)
	case !collections.ValidDatabase(g.Database):
		return fmt.Errorf("%w: database", errBadGrant)
	case len(g.Scope) == 0 || len(g.Scope) > MaxTriggerScope:
		return fmt.Errorf("%w: a scope has 1 to %d patterns", errBadGrant, MaxTriggerScope)
	}
	for _, p := range g.Scope {
		if p == "" || len(p) > collections.MaxPathBytes {
			return fmt.Errorf("%w: scope pattern", errBadGrant)
		}
	}
	return nil
}
