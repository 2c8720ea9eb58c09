package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
)

// Account rules (README, "Users, keys and security rules").
const (
	MinUsernameLength = 3
	MaxUsernameLength = 64
	// DefaultMinPasswordLength is the shortest password (in characters) a
	// signup accepts unless Config.MinPasswordLength says otherwise, which
	// may be LowestMinPasswordLength to MaxPasswordBytes.
	DefaultMinPasswordLength = 10
	LowestMinPasswordLength  = 8
	// MaxPasswordBytes is bcrypt's input limit; longer passwords would be
	// silently truncated, so they are refused.
	MaxPasswordBytes = 72
)

// Fields of the _users and _usernames documents.
const (
	fieldUsername     = "username"
	fieldPasswordHash = "passwordHash"
	fieldRoles        = "roles"
	fieldUID          = "uid"
	fieldCreatedAt    = "createdAt"
)

// defaultRoles are given to every signed-up user.
var defaultRoles = []string{"user"}

// user is a loaded _users document.
type user struct {
	uid      string
	username string
	hash     []byte
	roles    []string
}

func (u *user) identity() *Identity {
	return &Identity{UID: u.uid, Username: u.username, Roles: u.roles, Kind: KindUser}
}

// validUsername: 3–64 characters of [A-Za-z0-9_.@-].
func validUsername(name string) bool {
	if len(name) < MinUsernameLength || len(name) > MaxUsernameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// usernameKey is the id of a username's _usernames document: the lowercased
// name, made a legal path segment. "@" is not allowed in document ids, so "_"
// is the escape character: "_" is written "__" and "@" is written "_a". The
// mapping is injective (two different names never share a key) and at most
// doubles the length, within collections.MaxIDBytes.
func usernameKey(name string) string {
	lower := strings.ToLower(name)
	if !strings.ContainsAny(lower, "_@") {
		return lower
	}
	var b strings.Builder
	b.Grow(2 * len(lower))
	for i := 0; i < len(lower); i++ {
		switch c := lower[i]; c {
		case '_':
			b.WriteString("__")
		case '@':
			b.WriteString("_a")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// checkPassword enforces the password length policy: at least min
// characters and at most MaxPasswordBytes bytes.
func checkPassword(pw string, min int) error {
	if utf8.RuneCountInString(pw) < min || len(pw) > MaxPasswordBytes {
		return &WeakPasswordError{Min: min, Max: MaxPasswordBytes}
	}
	return nil
}

// CheckSignup validates a signup's username and password (against this
// service's minimum password length) without touching the store: what a
// server checks before it charges the signup to the client's address (a
// typo or a weak password costs no hashing, so it should not use up the
// client's signups either).
func (s *Service) CheckSignup(username, password string) error {
	if !validUsername(username) {
		return fmt.Errorf("%w: use %d to %d characters of A-Z a-z 0-9 _ . @ -", ErrInvalidUsername, MinUsernameLength, MaxUsernameLength)
	}
	return checkPassword(password, s.minPassword)
}

// MinPasswordLength is the shortest password (in characters) a signup
// accepts.
func (s *Service) MinPasswordLength() int { return s.minPassword }

// Signup creates a user with the default roles and logs it in. Usernames are
// unique case-insensitively; the one who commits first wins a race and the
// others get ErrUserExists. ErrBusy means no hashing slot freed in time.
func (s *Service) Signup(ctx context.Context, username, password string) (Tokens, error) {
	if err := s.CheckSignup(username, password); err != nil {
		return Tokens{}, err
	}
	nameDoc := docPath(colUsernames, usernameKey(username))
	// Cheap early answer for the common case; the create below is what
	// actually guarantees uniqueness.
	switch _, err := s.store.Get(ctx, s.db, nameDoc); {
	case err == nil:
		return Tokens{}, ErrUserExists
	case !errors.Is(err, collections.ErrNotFound):
		return Tokens{}, fmt.Errorf("auth: signup: %w", err)
	}
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return Tokens{}, fmt.Errorf("auth: signup: %w", err)
	}
	now := s.now()
	u := &user{uid: collections.NewID(), username: username, hash: hash, roles: defaultRoles}
	refresh, refreshWrite := s.newRefreshToken(u.uid, now)
	writes := []collections.Write{
		{Type: collections.WriteCreate, Path: docPath(colUsers, u.uid), Data: map[string]any{
			fieldUsername:     username,
			fieldPasswordHash: string(hash),
			fieldRoles:        toAnySlice(u.roles),
			fieldCreatedAt:    now.UnixMilli(),
		}},
		{Type: collections.WriteCreate, Path: nameDoc, Data: map[string]any{fieldUID: u.uid}},
		refreshWrite,
	}
	if _, err := s.store.Commit(ctx, s.db, writes, collections.CommitOptions{}); err != nil {
		if errors.Is(err, collections.ErrAlreadyExists) {
			return Tokens{}, ErrUserExists
		}
		return Tokens{}, fmt.Errorf("auth: signup: %w", err)
	}
	return s.tokens(u, refresh, now)
}

// Login checks a username and password. An unknown user and a wrong password
// both give ErrInvalidCredentials after the same bcrypt work. Failed logins
// are counted per (username, clientAddr) pair, per clientAddr and per
// username (clientAddr "": not counted per address), as Config.LoginLimit
// says; a pair or address over its limit gets *RateLimitError without the
// password being looked at. ErrBusy means no hashing slot freed in time.
func (s *Service) Login(ctx context.Context, username, password, clientAddr string) (Tokens, error) {
	var tokens Tokens
	err := s.limitedLogin(loginKey(username), clientAddr, func() error {
		u, err := s.verifyPassword(ctx, username, password)
		if err != nil {
			return err
		}
		tokens, err = s.issueLogin(ctx, u)
		return err
	})
	return tokens, err
}

// loginKey is the login limiter's key of a username ("" when it is not a
// valid one: then only the address is counted).
func loginKey(username string) string {
	if validUsername(username) {
		return usernameKey(username)
	}
	return ""
}

// limitedLogin runs check, one credential check, under the login limiter
// (see Login) for the username key userKey and clientAddr: refused with
// *RateLimitError when over a limit, counted as a failure when check
// returns an error wrapping ErrInvalidCredentials, forgotten for the pair
// when it succeeds, and not counted when it fails otherwise (the store or a
// busy server: not the caller's fault).
func (s *Service) limitedLogin(userKey, clientAddr string, check func() error) error {
	attempt, err := s.limiter.begin(userKey, clientAddr, s.now())
	if err != nil {
		return err
	}
	err = check()
	switch {
	case err == nil:
		attempt.succeeded()
	case errors.Is(err, ErrInvalidCredentials):
		attempt.failed(s.now())
	default:
		attempt.abandoned()
	}
	return err
}

// verifyPassword returns the user whose username and password these are,
// or ErrInvalidCredentials after the same bcrypt work whether or not the
// user exists.
func (s *Service) verifyPassword(ctx context.Context, username, password string) (*user, error) {
	u, err := s.userByName(ctx, username)
	if err != nil {
		return nil, fmt.Errorf("auth: check password: %w", err)
	}
	hash := s.dummyHash
	if u != nil {
		hash = u.hash
	}
	// Always compare, so an unknown user costs the same as a wrong password.
	match, err := s.passwordMatches(ctx, hash, password)
	if err != nil {
		return nil, fmt.Errorf("auth: check password: %w", err)
	}
	// bcrypt ignores bytes past 72; such a password never matches.
	if u == nil || !match || len(password) > MaxPasswordBytes {
		return nil, ErrInvalidCredentials
	}
	return u, nil
}

// issueLogin stores a new refresh token for u and returns the token pair.
func (s *Service) issueLogin(ctx context.Context, u *user) (Tokens, error) {
	now := s.now()
	refresh, refreshWrite := s.newRefreshToken(u.uid, now)
	if _, err := s.store.Commit(ctx, s.db, []collections.Write{refreshWrite}, collections.CommitOptions{}); err != nil {
		return Tokens{}, fmt.Errorf("auth: login: %w", err)
	}
	return s.tokens(u, refresh, now)
}

// hashPassword hashes a new password in a hashing slot.
func (s *Service) hashPassword(ctx context.Context, password string) ([]byte, error) {
	var hash []byte
	var err error
	if gerr := s.hashes.run(ctx, func() { hash, err = bcrypt.GenerateFromPassword([]byte(password), s.cost) }); gerr != nil {
		return nil, gerr
	}
	return hash, err
}

// passwordMatches compares a password with a stored hash in a hashing slot.
func (s *Service) passwordMatches(ctx context.Context, hash []byte, password string) (bool, error) {
	var match bool
	err := s.hashes.run(ctx, func() { match = bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil })
	return match, err
}

// User returns the account with the given uid, or an error wrapping
// collections.ErrNotFound.
func (s *Service) User(ctx context.Context, uid string) (*Identity, error) {
	u, err := s.userByUID(ctx, uid)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, fmt.Errorf("auth: user %q: %w", uid, collections.ErrNotFound)
	}
	return u.identity(), nil
}

// userByName loads a user by username; nil, nil when there is none.
func (s *Service) userByName(ctx context.Context, username string) (*user, error) {
	if !validUsername(username) {
		return nil, nil
	}
	d, err := s.store.Get(ctx, s.db, docPath(colUsernames, usernameKey(username)))
	if errors.Is(err, collections.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	uid, _ := d.Data[fieldUID].(string)
	return s.userByUID(ctx, uid)
}

// userDoc loads a user's _users document; nil, nil when there is none.
func (s *Service) userDoc(ctx context.Context, uid string) (*collections.Document, error) {
	if uid == "" || collections.ValidateDocPath(docPath(colUsers, uid)) != nil {
		return nil, nil
	}
	d, err := s.store.Get(ctx, s.db, docPath(colUsers, uid))
	if errors.Is(err, collections.ErrNotFound) {
		return nil, nil
	}
	return d, err
}

// userByUID loads a user; nil, nil when there is none.
func (s *Service) userByUID(ctx context.Context, uid string) (*user, error) {
	d, err := s.userDoc(ctx, uid)
	if d == nil || err != nil {
		return nil, err
	}
	u := &user{uid: uid, roles: stringList(d.Data[fieldRoles])}
	u.username, _ = d.Data[fieldUsername].(string)
	if h, ok := d.Data[fieldPasswordHash].(string); ok {
		u.hash = []byte(h)
	}
	return u, nil
}

// stringList returns v as []string when it is a list of strings, else nil.
func stringList(v any) []string {
	switch t := v.(type) {
	case []string:
		return append([]string(nil), t...)
	case []any:
		out := make([]string, 0, len(t))
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	return nil
}

func toAnySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
