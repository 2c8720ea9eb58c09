package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/loomdb/loom/collections"
)

// Console sessions: the web console (server /console/) signs in once, with
// the admin key or the password of a user with the admin role, and then
// holds two things. An opaque session value lives in an HttpOnly cookie the
// page cannot read; it is stored hashed in _console_sessions and is one-use:
// every refresh replaces it. A short-lived access token lives in the page's
// memory; it is an ordinary HS256 access token with a "console" claim, so
// it works wherever an admin's token works and is checked statelessly.
//
// A session ends at the earliest of its absolute end (SessionTTL after
// sign-in), its idle end (IdleTTL after the last refresh), a logout, a
// revocation (the user's roles were set, or RevokeAllConsoleSessions), and
// the reuse of a replaced value: a value presented after it was replaced
// was copied, so the whole session is ended. A user's session also ends
// when the user is deleted or loses the admin role, an admin-key session
// when the admin key changes (both checked at refresh).

// Defaults of ConsoleConfig.
const (
	DefaultConsoleSessionTTL = 8 * time.Hour
	DefaultConsoleIdleTTL    = 30 * time.Minute
	DefaultConsoleTokenTTL   = 10 * time.Minute
)

// ConsoleRole is the role a user needs to open a console session.
const ConsoleRole = "admin"

// KindConsoleAdminKey is the Identity kind of a console session opened with
// the admin key. It is the same string as access.KindAdminKey on purpose:
// such a session acts as the admin key (the same caller for security rules,
// rate limits and sealed query cursors), with the token's expiry.
const KindConsoleAdminKey = "admin-key"

const (
	colConsoleSessions = "_console_sessions"
	// The console claim of session access tokens.
	claimConsole        = "console"
	consoleKindUser     = "user"
	consoleKindAdminKey = "admin-key"
	// consoleAdminSubject is the sub of admin-key session tokens. "@" is
	// not allowed in document ids, so no user uid (a _users id) can be
	// it; verifyAccess checks it together with the claim.
	consoleAdminSubject = "@admin-key"
	// consoleAdminLimitKey is the login limiter's username key for admin
	// key guesses. A space is not a username character, so no username
	// shares its counters.
	consoleAdminLimitKey = " admin-key"
	// ConsoleCookiePrefix starts every session cookie value: "lcs_", the
	// session id, ".", the secret (both base64url).
	ConsoleCookiePrefix = "lcs_"
	consoleIDBytes      = 16
	// consoleReuseGrace is how long after a rotation the replaced value
	// still mints an access token (without rotating again): two tabs of one
	// browser share the cookie and may refresh at the same moment (a laptop
	// waking up fires every tab's timer); the later request must not end
	// the session the earlier one just renewed.
	consoleReuseGrace = 20 * time.Second
	// consoleRotateAttempts bounds the retries of a refresh that lost a
	// race with another refresh of the same session.
	consoleRotateAttempts = 3
)

// Fields of the _console_sessions documents (uid, createdAt and expiresAt
// are shared with the other auth documents; expiresAt is the earlier of the
// idle and the absolute end, what the purge looks at).
const (
	fieldKind       = "kind"
	fieldEndsAt     = "endsAt"
	fieldSecret     = "secret"
	fieldPrevSecret = "prevSecret"
	fieldRotatedAt  = "rotatedAt"
	fieldKeyTag     = "keyTag"
)

var (
	consoleIDLength     = base64.RawURLEncoding.EncodedLen(consoleIDBytes)
	consoleSecretLength = base64.RawURLEncoding.EncodedLen(secretTokenBytes)
	// ConsoleCookieLength is the length of every session cookie value;
	// anything else is refused before it is hashed or looked up.
	ConsoleCookieLength = len(ConsoleCookiePrefix) + consoleIDLength + 1 + consoleSecretLength
)

// Errors of the console session API.
var (
	// ErrConsoleNotAdmin: the password is right but the user lacks
	// ConsoleRole.
	ErrConsoleNotAdmin = errors.New("auth: the console needs the admin role")
	// ErrInvalidAdminKey: a console sign-in with a wrong admin key. It
	// wraps ErrInvalidCredentials, so the login limiter counts it.
	ErrInvalidAdminKey = fmt.Errorf("auth: wrong admin key: %w", ErrInvalidCredentials)
)

// ConsoleConfig sets the lifetimes of console sessions ([console] in
// loom.toml).
type ConsoleConfig struct {
	// SessionTTL is the absolute lifetime of a session (default
	// DefaultConsoleSessionTTL): refreshing never extends it.
	SessionTTL time.Duration
	// IdleTTL ends a session not refreshed for this long (default
	// DefaultConsoleIdleTTL); at most SessionTTL.
	IdleTTL time.Duration
	// TokenTTL is the lifetime of a session's access tokens (default
	// DefaultConsoleTokenTTL); at most IdleTTL, or a page refreshing just
	// before its token expires would find its session gone.
	TokenTTL time.Duration
}

func (c *ConsoleConfig) withDefaults() error {
	if c.SessionTTL <= 0 {
		c.SessionTTL = DefaultConsoleSessionTTL
	}
	if c.IdleTTL <= 0 {
		c.IdleTTL = min(DefaultConsoleIdleTTL, c.SessionTTL)
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = min(DefaultConsoleTokenTTL, c.IdleTTL)
	}
	if c.IdleTTL > c.SessionTTL {
		return fmt.Errorf("auth: the console idle TTL (%v) exceeds the session TTL (%v)", c.IdleTTL, c.SessionTTL)
	}
	if c.TokenTTL > c.IdleTTL {
		return fmt.Errorf("auth: the console token TTL (%v) exceeds the idle TTL (%v)", c.TokenTTL, c.IdleTTL)
	}
	return nil
}

// ConsoleSession is what a sign-in or refresh answers: the JSON part is the
// response body; Cookie, when not "", is the new cookie value, valid until
// CookieExpires.
type ConsoleSession struct {
	AccessToken string   `json:"access_token"`
	ExpiresIn   int      `json:"expires_in"` // seconds
	Username    string   `json:"username"`
	Roles       []string `json:"roles"`

	Cookie        string    `json:"-"`
	CookieExpires time.Time `json:"-"`
}

// consolePrincipal is who a session is for.
type consolePrincipal struct {
	kind     string // consoleKindUser or consoleKindAdminKey
	uid      string // the user's uid, or consoleAdminSubject
	username string
	roles    []string
}

var consoleAdmin = consolePrincipal{kind: consoleKindAdminKey, uid: consoleAdminSubject, username: "admin", roles: []string{ConsoleRole}}

// consoleAdminIdentity is the identity of an admin-key session token.
func consoleAdminIdentity(sub string, claims map[string]any) (*Identity, error) {
	if sub != consoleAdminSubject {
		return nil, fmt.Errorf("%w: a console admin token with another subject", ErrInvalidToken)
	}
	return &Identity{Username: consoleAdmin.username, Roles: slices.Clone(consoleAdmin.roles), Claims: claims, Kind: KindConsoleAdminKey}, nil
}

// StartConsoleSessionWithAdminKey opens a session for the admin key:
// presented must be the key whose SHA-256 is adminKey (compared in constant
// time, by fixed-size hashes, so neither content nor length leaks). Wrong
// keys count against the login limiter like passwords (per address, and
// over all addresses as one "username"). The session remembers which key
// opened it (a tag keyed by the signing secret): once the admin key is
// changed, its refresh fails.
func (s *Service) StartConsoleSessionWithAdminKey(ctx context.Context, presented string, adminKey [32]byte, clientAddr string) (ConsoleSession, error) {
	var out ConsoleSession
	err := s.limitedLogin(consoleAdminLimitKey, clientAddr, func() error {
		h := sha256.Sum256([]byte(presented))
		if subtle.ConstantTimeCompare(h[:], adminKey[:]) != 1 {
			return ErrInvalidAdminKey
		}
		var err error
		out, err = s.newConsoleSession(ctx, consoleAdmin, s.adminKeyTag(adminKey))
		return err
	})
	return out, err
}

// adminKeyTag names an admin key in its sessions without storing anything
// a key could be guessed from offline (an HMAC under the signing secret,
// which every node shares).
func (s *Service) adminKeyTag(adminKey [32]byte) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("loom console admin key\x00"))
	m.Write(adminKey[:])
	return hex.EncodeToString(m.Sum(nil))
}

// StartConsoleSession opens a session for a user with ConsoleRole, checking
// the password under the login limiter as Login does (but issuing no
// refresh token). A right password of a user without the role is
// ErrConsoleNotAdmin.
func (s *Service) StartConsoleSession(ctx context.Context, username, password, clientAddr string) (ConsoleSession, error) {
	var u *user
	err := s.limitedLogin(loginKey(username), clientAddr, func() error {
		var err error
		u, err = s.verifyPassword(ctx, username, password)
		return err
	})
	if err != nil {
		return ConsoleSession{}, err
	}
	if !slices.Contains(u.roles, ConsoleRole) {
		return ConsoleSession{}, ErrConsoleNotAdmin
	}
	return s.newConsoleSession(ctx, consolePrincipal{kind: consoleKindUser, uid: u.uid, username: u.username, roles: u.roles}, "")
}

// newConsoleSession stores a new session for p (keyTag: the admin key's,
// for admin-key sessions) and returns its first token and cookie.
func (s *Service) newConsoleSession(ctx context.Context, p consolePrincipal, keyTag string) (ConsoleSession, error) {
	now := s.now()
	id, secret := newConsoleCookie()
	ends := now.Add(s.console.SessionTTL)
	w := collections.Write{
		Type: collections.WriteCreate,
		Path: consoleSessionPath(id),
		Data: map[string]any{
			fieldUID:        p.uid,
			fieldKind:       p.kind,
			fieldCreatedAt:  now.UnixMilli(),
			fieldEndsAt:     ends.UnixMilli(),
			fieldExpiresAt:  s.consoleIdleEnd(now, ends).UnixMilli(),
			fieldSecret:     hashToken(secret),
			fieldPrevSecret: "",
			fieldRotatedAt:  now.UnixMilli(),
			fieldKeyTag:     keyTag,
		},
	}
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{}); err != nil {
		return ConsoleSession{}, fmt.Errorf("auth: console session: %w", err)
	}
	return s.consoleAnswer(p, now, ConsoleCookiePrefix+id+"."+secret, ends)
}

// consoleIdleEnd is when a session refreshed at now ends unless refreshed
// again: IdleTTL later, never past its absolute end.
func (s *Service) consoleIdleEnd(now, ends time.Time) time.Time {
	if idle := now.Add(s.console.IdleTTL); idle.Before(ends) {
		return idle
	}
	return ends
}

// consoleAnswer signs a token for p; cookie "" keeps the current cookie.
// The token lives TokenTTL, but never past the session's absolute end
// (ends): the session TTL bounds what one sign-in grants.
func (s *Service) consoleAnswer(p consolePrincipal, now time.Time, cookie string, ends time.Time) (ConsoleSession, error) {
	ttl := min(s.console.TokenTTL, ends.Sub(now))
	tok, err := s.signAccess(p.uid, p.username, p.roles, p.kind, ttl, now)
	if err != nil {
		return ConsoleSession{}, err
	}
	roles := p.roles
	if roles == nil {
		roles = []string{}
	}
	return ConsoleSession{
		AccessToken:   tok,
		ExpiresIn:     max(1, int((ttl+time.Second-1)/time.Second)), // rounded up: 0 would read as "unknown"
		Username:      p.username,
		Roles:         roles,
		Cookie:        cookie,
		CookieExpires: ends,
	}, nil
}

// RefreshConsoleSession exchanges a session cookie value for a new access
// token and a new value (the old one is replaced in the same conditional
// write, so of two refreshes racing, one rotates and the other sees the
// replaced value). Within consoleReuseGrace of a rotation the replaced
// value still mints a token, without a new cookie; after it, presenting
// the replaced value ends the session. A user's session re-reads the user:
// deleted, or without ConsoleRole, ends the session; an admin-key session
// opened with another admin key than adminKey (the SHA-256 of the current
// one) ends too. Every refusal is ErrInvalidToken.
func (s *Service) RefreshConsoleSession(ctx context.Context, cookie string, adminKey [32]byte) (ConsoleSession, error) {
	id, secret, ok := ParseConsoleCookie(cookie)
	if !ok {
		return ConsoleSession{}, fmt.Errorf("%w: malformed console session", ErrInvalidToken)
	}
	path := consoleSessionPath(id)
	presented := hashToken(secret)
	for attempt := 0; ; attempt++ {
		d, err := s.store.Get(ctx, s.db, path)
		if errors.Is(err, collections.ErrNotFound) {
			return ConsoleSession{}, fmt.Errorf("%w: unknown or ended console session", ErrInvalidToken)
		}
		if err != nil {
			return ConsoleSession{}, fmt.Errorf("auth: console refresh: %w", err)
		}
		now := s.now()
		row := consoleRowOf(d)
		if now.UnixMilli() >= row.expiresAt {
			s.endConsoleRow(ctx, path, "expired")
			return ConsoleSession{}, fmt.Errorf("%w: console session expired", ErrInvalidToken)
		}
		var rotate bool
		switch {
		case sameHash(presented, row.secret):
			rotate = true
		case sameHash(presented, row.prevSecret) && now.Before(time.UnixMilli(row.rotatedAt).Add(consoleReuseGrace)):
			rotate = false
		default:
			s.endConsoleRow(ctx, path, "replaced value reused")
			return ConsoleSession{}, fmt.Errorf("%w: a replaced console session value was presented; the session is ended", ErrInvalidToken)
		}
		p, err := s.consolePrincipalOf(ctx, row, s.adminKeyTag(adminKey))
		if err != nil {
			return ConsoleSession{}, fmt.Errorf("auth: console refresh: %w", err)
		}
		if p == nil {
			s.endConsoleRow(ctx, path, "user gone or not admin")
			return ConsoleSession{}, fmt.Errorf("%w: the user no longer exists or lost the %s role, or the admin key changed", ErrInvalidToken, ConsoleRole)
		}
		ends := time.UnixMilli(row.endsAt)
		if !rotate {
			return s.consoleAnswer(*p, now, "", ends)
		}
		_, newSecret := newConsoleCookie()
		data := maps.Clone(d.Data)
		data[fieldPrevSecret] = row.secret
		data[fieldSecret] = hashToken(newSecret)
		data[fieldRotatedAt] = now.UnixMilli()
		data[fieldExpiresAt] = s.consoleIdleEnd(now, ends).UnixMilli()
		w := collections.Write{Type: collections.WriteReplace, Path: path, Data: data, IfMatch: []collections.Filter{versionIs(d.Version)}}
		_, err = s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{})
		if err == nil {
			return s.consoleAnswer(*p, now, ConsoleCookiePrefix+id+"."+newSecret, ends)
		}
		if !isGone(err) {
			return ConsoleSession{}, fmt.Errorf("auth: console refresh: %w", err)
		}
		// Another refresh (or a logout) got there first: look again.
		if attempt+1 == consoleRotateAttempts {
			return ConsoleSession{}, fmt.Errorf("%w: the console session changed concurrently", ErrInvalidToken)
		}
	}
}

// EndConsoleSession deletes the session of a cookie value (logout). An
// unknown, malformed or ended session is not an error. Any value of the
// session (current or replaced) ends it: whoever holds one may log out.
func (s *Service) EndConsoleSession(ctx context.Context, cookie string) error {
	id, _, ok := ParseConsoleCookie(cookie)
	if !ok {
		return nil
	}
	w := collections.Write{Type: collections.WriteDelete, Path: consoleSessionPath(id)}
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{}); err != nil && !isGone(err) {
		return fmt.Errorf("auth: console logout: %w", err)
	}
	return nil
}

// RevokeConsoleSessions ends every console session of the user and returns
// how many. Access tokens already issued stay valid until they expire.
func (s *Service) RevokeConsoleSessions(ctx context.Context, uid string) (int, error) {
	f := collections.Filter{Field: fieldUID, Op: collections.OpEq, Value: uid}
	n, err := s.deleteMatching(ctx, colConsoleSessions, &f)
	if err != nil {
		return n, fmt.Errorf("auth: revoke console sessions: %w", err)
	}
	return n, nil
}

// RevokeAllConsoleSessions ends every console session (admin-key ones
// included: what to do after rotating the admin key) and returns how many.
func (s *Service) RevokeAllConsoleSessions(ctx context.Context) (int, error) {
	n, err := s.deleteMatching(ctx, colConsoleSessions, nil)
	if err != nil {
		return n, fmt.Errorf("auth: revoke console sessions: %w", err)
	}
	return n, nil
}

// ParseConsoleCookie splits a session cookie value into its id and secret;
// false unless it has exactly the shape newConsoleCookie makes (checked
// before anything is hashed or looked up).
func ParseConsoleCookie(v string) (id, secret string, ok bool) {
	if len(v) != ConsoleCookieLength || v[:len(ConsoleCookiePrefix)] != ConsoleCookiePrefix {
		return "", "", false
	}
	rest := v[len(ConsoleCookiePrefix):]
	if rest[consoleIDLength] != '.' {
		return "", "", false
	}
	id, secret = rest[:consoleIDLength], rest[consoleIDLength+1:]
	if !base64URL(id) || !base64URL(secret) {
		return "", "", false
	}
	return id, secret, true
}

// newConsoleCookie returns a fresh session id and secret.
func newConsoleCookie() (id, secret string) {
	b := make([]byte, consoleIDBytes+secretTokenBytes)
	rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b[:consoleIDBytes]), base64.RawURLEncoding.EncodeToString(b[consoleIDBytes:])
}

// consoleSessionPath is the document of a session id: stored under its
// hash, so the store holds nothing a cookie can be rebuilt from.
func consoleSessionPath(id string) string { return docPath(colConsoleSessions, hashToken(id)) }

// consoleRow is a loaded session document.
type consoleRow struct {
	uid, kind, secret, prevSecret, keyTag string
	endsAt, expiresAt, rotatedAt          int64
}

func consoleRowOf(d *collections.Document) consoleRow {
	var r consoleRow
	r.uid, _ = d.Data[fieldUID].(string)
	r.kind, _ = d.Data[fieldKind].(string)
	r.secret, _ = d.Data[fieldSecret].(string)
	r.prevSecret, _ = d.Data[fieldPrevSecret].(string)
	r.keyTag, _ = d.Data[fieldKeyTag].(string)
	r.endsAt, _ = int64Field(d.Data, fieldEndsAt)
	r.expiresAt, _ = int64Field(d.Data, fieldExpiresAt)
	r.rotatedAt, _ = int64Field(d.Data, fieldRotatedAt)
	return r
}

// consolePrincipalOf is who the session is for now: nil when its user is
// gone or lost ConsoleRole, when it was opened with another admin key than
// the one keyTag names, or when the row is not one this package wrote.
func (s *Service) consolePrincipalOf(ctx context.Context, r consoleRow, keyTag string) (*consolePrincipal, error) {
	switch r.kind {
	case consoleKindAdminKey:
		if !sameHash(r.keyTag, keyTag) {
			return nil, nil
		}
		p := consoleAdmin
		return &p, nil
	case consoleKindUser:
		u, err := s.userByUID(ctx, r.uid)
		if err != nil || u == nil || !slices.Contains(u.roles, ConsoleRole) {
			return nil, err
		}
		return &consolePrincipal{kind: consoleKindUser, uid: u.uid, username: u.username, roles: u.roles}, nil
	}
	return nil, nil
}

// endConsoleRow deletes a session document, whatever its version: a
// session being ended must not survive because a refresh raced the
// delete. Best effort on store errors (the refusal is what matters; the
// purge removes expired rows).
func (s *Service) endConsoleRow(ctx context.Context, path, why string) {
	w := collections.Write{Type: collections.WriteDelete, Path: path}
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{}); err != nil && !isGone(err) {
		s.log.Warn("end console session", "why", why, "error", err)
	}
}

// sameHash compares two hex hashes in constant time; "" never matches.
func sameHash(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func versionIs(v int64) collections.Filter {
	return collections.Filter{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(v, 10))}
}
