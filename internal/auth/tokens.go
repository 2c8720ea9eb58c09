package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/collections"
)

// Opaque credentials are a prefix plus 32 random bytes, base64url without
// padding. The prefix tells the kinds apart (and makes leaked keys easy to
// grep for); the shape check rejects garbage before any store lookup.
const (
	refreshTokenPrefix = "lr_"
	serviceKeyPrefix   = "lk_"
	secretTokenBytes   = 32
	tokenTypeAccess    = "access"
	fieldExpiresAt     = "expiresAt"
)

var secretTokenLength = base64.RawURLEncoding.EncodedLen(secretTokenBytes)

// newSecretToken returns a fresh opaque credential and the hex SHA-256 under
// which it is stored.
func newSecretToken(prefix string) (token, hash string) {
	b := make([]byte, secretTokenBytes)
	rand.Read(b) // never fails (crypto/rand crashes the program instead)
	token = prefix + base64.RawURLEncoding.EncodeToString(b)
	return token, hashToken(token)
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// wellFormed reports whether token has the shape newSecretToken produces.
func wellFormed(token, prefix string) bool {
	return len(token) == len(prefix)+secretTokenLength && strings.HasPrefix(token, prefix) && base64URL(token[len(prefix):])
}

// base64URL reports whether s holds only characters of unpadded base64url
// (what newSecretToken and newConsoleCookie encode with).
func base64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// accessClaims are the claims of our access tokens.
type accessClaims struct {
	Username string   `json:"username"`
	Roles    []string `json:"roles"`
	Typ      string   `json:"typ"`
	// Console is set on console session tokens only (consoleKindUser or
	// consoleKindAdminKey, see console.go).
	Console string `json:"console,omitempty"`
	jwt.RegisteredClaims
}

func (s *Service) issueAccess(u *user, now time.Time) (string, error) {
	return s.signAccess(u.uid, u.username, u.roles, "", s.accessTTL, now)
}

// signAccess signs an access token for subject sub living ttl; console is
// the console claim ("" on ordinary tokens).
func (s *Service) signAccess(sub, username string, roles []string, console string, ttl time.Duration, now time.Time) (string, error) {
	if roles == nil {
		roles = []string{}
	}
	claims := accessClaims{
		Username: username,
		Roles:    roles,
		Typ:      tokenTypeAccess,
		Console:  console,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   sub,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        collections.NewID(),
		},
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign access token: %w", err)
	}
	return tok, nil
}

// tokens signs an access token for u and pairs it with refresh.
func (s *Service) tokens(u *user, refresh string, now time.Time) (Tokens, error) {
	access, err := s.issueAccess(u, now)
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{
		AccessToken:  access,
		RefreshToken: refresh,
		ExpiresIn:    int(s.accessTTL / time.Second),
		TokenType:    "Bearer",
	}, nil
}

// verifyAccess checks one of our access tokens: HS256 with our secret, not
// expired, typ "access", with a subject.
func (s *Service) verifyAccess(tok string) (*Identity, error) {
	claims := jwt.MapClaims{}
	if _, err := s.access.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return s.secret, nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if typ, _ := claims["typ"].(string); typ != tokenTypeAccess {
		return nil, fmt.Errorf("%w: not an access token", ErrInvalidToken)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return nil, fmt.Errorf("%w: no subject", ErrInvalidToken)
	}
	var id *Identity
	if console, _ := claims[claimConsole].(string); console == consoleKindAdminKey {
		var err error
		if id, err = consoleAdminIdentity(sub, claims); err != nil {
			return nil, err
		}
	} else {
		username, _ := claims["username"].(string)
		roles := stringList(claims["roles"])
		if roles == nil {
			roles = []string{}
		}
		id = &Identity{UID: sub, Username: username, Roles: roles, Claims: claims, Kind: KindUser}
	}
	s.verified.put(tok, validity(claims, id))
	return id, nil
}

// validity is the cache entry of an accepted token: its identity (a copy,
// so the caller's is its own) and the window the validator accepts it in.
func validity(claims jwt.MapClaims, id *Identity) verifiedEntry {
	cp := *id
	e := verifiedEntry{id: &cp}
	// The parse succeeded, so these do not fail and exp is set.
	if exp, _ := claims.GetExpirationTime(); exp != nil {
		e.exp = exp.Time
	}
	if iat, _ := claims.GetIssuedAt(); iat != nil {
		e.from = iat.Time
	}
	if nbf, _ := claims.GetNotBefore(); nbf != nil && nbf.After(e.from) {
		e.from = nbf.Time
	}
	return e
}

// jwtHeader is the part of a JWT header used to pick a verifier.
type jwtHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

// peekHeader decodes the (unverified) header of a compact JWT. The verifier
// it selects re-checks the algorithm itself.
func peekHeader(tok string) (jwtHeader, bool) {
	if strings.Count(tok, ".") != 2 {
		return jwtHeader{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok[:strings.IndexByte(tok, '.')])
	if err != nil {
		return jwtHeader{}, false
	}
	var h jwtHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return jwtHeader{}, false
	}
	return h, true
}

// newRefreshToken returns a new refresh token for uid and the write that
// stores it (hashed).
func (s *Service) newRefreshToken(uid string, now time.Time) (string, collections.Write) {
	tok, hash := newSecretToken(refreshTokenPrefix)
	return tok, collections.Write{
		Type: collections.WriteCreate,
		Path: docPath(colRefresh, hash),
		Data: map[string]any{
			fieldUID:       uid,
			fieldExpiresAt: now.Add(s.refreshTTL).UnixMilli(),
		},
	}
}

// Refresh exchanges a refresh token for a new pair. The old token is deleted
// in the same commit that stores the new one, on the condition that it is
// still the version just read; so of two concurrent refreshes of one token
// exactly one wins, and a second use fails with ErrInvalidToken. The new
// access token carries the user's current roles.
func (s *Service) Refresh(ctx context.Context, refreshToken string) (Tokens, error) {
	if !wellFormed(refreshToken, refreshTokenPrefix) {
		return Tokens{}, ErrInvalidToken
	}
	path := docPath(colRefresh, hashToken(refreshToken))
	d, err := s.store.Get(ctx, s.db, path)
	if errors.Is(err, collections.ErrNotFound) {
		return Tokens{}, fmt.Errorf("%w: unknown or revoked refresh token", ErrInvalidToken)
	}
	if err != nil {
		return Tokens{}, fmt.Errorf("auth: refresh: %w", err)
	}
	del := collections.Write{
		Type:    collections.WriteDelete,
		Path:    path,
		IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(d.Version, 10))}},
	}
	now := s.now()
	if exp, ok := int64Field(d.Data, fieldExpiresAt); !ok || now.UnixMilli() >= exp {
		// Best effort: an expired token is useless, drop it now.
		if _, err := s.store.Commit(ctx, s.db, []collections.Write{del}, collections.CommitOptions{}); err != nil && !isGone(err) {
			s.log.Warn("delete expired refresh token", "error", err)
		}
		return Tokens{}, fmt.Errorf("%w: refresh token expired", ErrInvalidToken)
	}
	uid, _ := d.Data[fieldUID].(string)
	u, err := s.userByUID(ctx, uid)
	if err != nil {
		return Tokens{}, fmt.Errorf("auth: refresh: %w", err)
	}
	if u == nil {
		return Tokens{}, fmt.Errorf("%w: the user no longer exists", ErrInvalidToken)
	}
	refresh, create := s.newRefreshToken(uid, now)
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{del, create}, collections.CommitOptions{}); err != nil {
		if isGone(err) {
			return Tokens{}, fmt.Errorf("%w: refresh token already used", ErrInvalidToken)
		}
		return Tokens{}, fmt.Errorf("auth: refresh: %w", err)
	}
	return s.tokens(u, refresh, now)
}

// Logout revokes a refresh token. Unknown, malformed or already revoked
// tokens are not an error, so logging out twice is harmless. Access tokens
// already issued stay valid until they expire.
func (s *Service) Logout(ctx context.Context, refreshToken string) error {
	if !wellFormed(refreshToken, refreshTokenPrefix) {
		return nil
	}
	w := collections.Write{Type: collections.WriteDelete, Path: docPath(colRefresh, hashToken(refreshToken))}
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{}); err != nil && !isGone(err) {
		return fmt.Errorf("auth: logout: %w", err)
	}
	return nil
}

// int64Field reads an integer field of stored data.
func int64Field(data map[string]any, name string) (int64, bool) {
	return collections.Int64(data[name])
}
