package auth_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/auth"
)

const password = "correct horse battery"

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// clock is an injectable, goroutine-safe time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// MustOpenStore opens a real SQLite store in a temp dir, closed at cleanup.
func MustOpenStore(t testing.TB) collections.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "loom.db")})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// MustNew returns a Service over a fresh store with a test clock; edit
// adjusts the config.
func MustNew(t testing.TB, edit func(*auth.Config)) (*auth.Service, collections.Store, *clock) {
	t.Helper()
	st := MustOpenStore(t)
	clk := newClock()
	cfg := auth.Config{Secret: testSecret, BcryptCost: bcrypt.MinCost, Now: clk.Now}
	if edit != nil {
		edit(&cfg)
	}
	s, err := auth.New(context.Background(), st, cfg)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st, clk
}

func MustSignup(t testing.TB, s *auth.Service, username string) auth.Tokens {
	t.Helper()
	tok, err := s.Signup(context.Background(), username, password)
	if err != nil {
		t.Fatalf("Signup(%q): %v", username, err)
	}
	return tok
}

func MustAuthenticate(t testing.TB, s *auth.Service, bearer string) *auth.Identity {
	t.Helper()
	id, err := s.Authenticate(context.Background(), bearer)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	return id
}

// expectInvalidToken fails unless Authenticate refuses bearer with
// ErrInvalidToken.
func expectInvalidToken(t testing.TB, s *auth.Service, name, bearer string) {
	t.Helper()
	id, err := s.Authenticate(context.Background(), bearer)
	if !errors.Is(err, auth.ErrInvalidToken) || id != nil {
		t.Errorf("%s: Authenticate=(%v, %v), want ErrInvalidToken", name, id, err)
	}
}

// allDocs returns every live document of a system collection.
func allDocs(t testing.TB, st collections.Store, collection string) []*collections.Document {
	t.Helper()
	q := collections.Query{Collection: collection, Limit: collections.MaxLimit}
	if err := q.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	res, err := st.Query(context.Background(), "default", q)
	if err != nil {
		t.Fatalf("Query %s: %v", collection, err)
	}
	return res.Docs
}

func TestNew_Config(t *testing.T) {
	st := MustOpenStore(t)
	ctx := context.Background()
	for name, cfg := range map[string]auth.Config{
		"no secret":    {},
		"short secret": {Secret: []byte("too short")},
		"bad cost":     {Secret: testSecret, BcryptCost: 99},
		"bad jwks url": {Secret: testSecret, JWKSURL: "ftp://example.com/jwks"},
	} {
		if s, err := auth.New(ctx, st, cfg); err == nil {
			s.Close()
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	if _, err := auth.New(ctx, nil, auth.Config{Secret: testSecret}); err == nil {
		t.Error("nil store: New succeeded, want an error")
	}
}

func TestService_SignupLoginMe(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()

	tok := MustSignup(t, s, "Alice.Smith@example.com")
	if tok.TokenType != "Bearer" || tok.ExpiresIn != 900 || tok.AccessToken == "" || !strings.HasPrefix(tok.RefreshToken, "lr_") {
		t.Fatalf("signup tokens=%+v, want Bearer, 900 s, an access and an lr_ refresh token", tok)
	}
	id := MustAuthenticate(t, s, tok.AccessToken)
	if id.Kind != auth.KindUser || id.Username != "Alice.Smith@example.com" || !slices.Equal(id.Roles, []string{"user"}) || id.UID == "" {
		t.Fatalf("identity=%+v, want a user with roles [user]", id)
	}
	if id.Claims["typ"] != "access" || id.Claims["sub"] != id.UID {
		t.Errorf("claims=%v, want typ access and sub = uid", id.Claims)
	}
	// The scheme prefix is tolerated.
	if got := MustAuthenticate(t, s, "Bearer "+tok.AccessToken); got.UID != id.UID {
		t.Errorf("with Bearer prefix uid=%q, want %q", got.UID, id.UID)
	}

	// Login is case-insensitive on the username and keeps the signup case.
	for _, name := range []string{"Alice.Smith@example.com", "alice.smith@EXAMPLE.com"} {
		lt, err := s.Login(ctx, name, password, "192.0.2.1")
		if err != nil {
			t.Fatalf("Login(%q): %v", name, err)
		}
		lid := MustAuthenticate(t, s, lt.AccessToken)
		if lid.UID != id.UID || lid.Username != "Alice.Smith@example.com" {
			t.Errorf("login %q identity=%+v, want uid %s", name, lid, id.UID)
		}
	}

	me, err := s.User(ctx, id.UID)
	if err != nil {
		t.Fatalf("User: %v", err)
	}
	if me.UID != id.UID || me.Username != id.Username || !slices.Equal(me.Roles, []string{"user"}) || me.Kind != auth.KindUser {
		t.Errorf("User=%+v, want %+v", me, id)
	}
	for _, uid := range []string{"nope", "", "../x", "a/b"} {
		if _, err := s.User(ctx, uid); !errors.Is(err, collections.ErrNotFound) {
			t.Errorf("User(%q) err=%v, want ErrNotFound", uid, err)
		}
	}

	// The password is stored only as a bcrypt hash.
	users := allDocs(t, st, "_users")
	if len(users) != 1 {
		t.Fatalf("_users has %d docs, want 1", len(users))
	}
	b, _ := users[0].MarshalJSON()
	if strings.Contains(string(b), password) {
		t.Errorf("_users doc contains the password: %s", b)
	}
	hash, _ := users[0].Data["passwordHash"].(string)
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) != nil {
		t.Errorf("passwordHash %q does not verify the password", hash)
	}

	// Auth docs are system documents: nothing reached the change log.
	if head, err := st.Head(ctx); err != nil || head != 0 {
		t.Errorf("Head=(%d, %v), want 0: auth writes must not be logged", head, err)
	}
}

func TestService_SignupDuplicate(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	MustSignup(t, s, "bob_smith")
	for _, name := range []string{"bob_smith", "BOB_SMITH", "Bob_Smith"} {
		if _, err := s.Signup(ctx, name, password); !errors.Is(err, auth.ErrUserExists) {
			t.Errorf("Signup(%q) err=%v, want ErrUserExists", name, err)
		}
	}
	// Escaping "_" and "@" in the name key must not make distinct names
	// collide.
	for _, name := range []string{"bob@smith", "bob__smith", "bob_asmith", "bob-smith", "bob.smith"} {
		if _, err := s.Signup(ctx, name, password); err != nil {
			t.Errorf("Signup(%q): %v, want success (distinct name)", name, err)
		}
	}
}

func TestService_SignupRace(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			name := "racer"
			if i%2 == 1 {
				name = "RACER"
			}
			_, errs[i] = s.Signup(context.Background(), name, password)
		})
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, auth.ErrUserExists):
			t.Errorf("signup %d: %v, want nil or ErrUserExists", i, err)
		}
	}
	if ok != 1 {
		t.Errorf("%d signups succeeded, want exactly 1", ok)
	}
	if users := allDocs(t, st, "_users"); len(users) != 1 {
		t.Errorf("_users has %d docs, want 1", len(users))
	}
}

func TestService_SignupInvalid(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name, username, password string
		want                     error
	}{
		{"short username", "ab", password, auth.ErrInvalidUsername},
		{"long username", strings.Repeat("a", 65), password, auth.ErrInvalidUsername},
		{"empty username", "", password, auth.ErrInvalidUsername},
		{"space", "bob smith", password, auth.ErrInvalidUsername},
		{"slash", "bob/smith", password, auth.ErrInvalidUsername},
		{"plus", "bob+1@example.com", password, auth.ErrInvalidUsername},
		{"non-ascii", "bøb", password, auth.ErrInvalidUsername},
		{"short password", "bob", "123456789", auth.ErrWeakPassword},
		{"empty password", "bob", "", auth.ErrWeakPassword},
		{"73-byte password", "bob", strings.Repeat("x", 73), auth.ErrWeakPassword},
		{"9 runes, 18 bytes", "bob", strings.Repeat("é", 9), auth.ErrWeakPassword},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Signup(ctx, tc.username, tc.password); !errors.Is(err, tc.want) {
				t.Errorf("Signup err=%v, want %v", err, tc.want)
			}
		})
	}
	if users := allDocs(t, st, "_users"); len(users) != 0 {
		t.Errorf("_users has %d docs after invalid signups, want 0", len(users))
	}
	// Edges that are allowed.
	for _, tc := range []struct{ username, password string }{
		{"abc", "0123456789"},
		{strings.Repeat("z", 64), strings.Repeat("p", 72)},
		{"a_b.c@d-e", "éééééééééé"},
	} {
		if _, err := s.Signup(ctx, tc.username, tc.password); err != nil {
			t.Errorf("Signup(%q, %d bytes): %v", tc.username, len(tc.password), err)
		}
	}
}

// Config.MinPasswordLength moves the signup minimum (8..72 characters;
// the error names it); login is never affected, so a password set under
// an older, longer minimum keeps working and a short one set under a lower
// minimum keeps working after it is raised.
func TestService_MinPasswordLength(t *testing.T) {
	ctx := context.Background()
	s, st, _ := MustNew(t, func(c *auth.Config) { c.MinPasswordLength = 8 })
	if got := s.MinPasswordLength(); got != 8 {
		t.Fatalf("MinPasswordLength()=%d, want 8", got)
	}
	if _, err := s.Signup(ctx, "eight", "12345678"); err != nil {
		t.Fatalf("8-character password under minimum 8: %v", err)
	}
	_, err := s.Signup(ctx, "seven", "1234567")
	var we *auth.WeakPasswordError
	if !errors.As(err, &we) || !errors.Is(err, auth.ErrWeakPassword) || we.Min != 8 || we.Max != auth.MaxPasswordBytes {
		t.Fatalf("7-character password: err=%v, want *WeakPasswordError{Min: 8}", err)
	}
	if err := s.CheckSignup("seven", "1234567"); !errors.As(err, &we) || we.Min != 8 {
		t.Fatalf("CheckSignup: err=%v, want minimum 8", err)
	}
	// The same store under the default minimum: the 8-character password
	// still logs in, a new one is refused naming 10.
	s10, err := auth.New(ctx, st, auth.Config{Secret: testSecret, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	defer s10.Close()
	if s10.MinPasswordLength() != auth.DefaultMinPasswordLength {
		t.Fatalf("default MinPasswordLength()=%d", s10.MinPasswordLength())
	}
	if _, err := s10.Login(ctx, "eight", "12345678", "198.51.100.1"); err != nil {
		t.Fatalf("login with an 8-character password under minimum 10: %v", err)
	}
	if _, err := s10.Signup(ctx, "nine", "123456789"); !errors.As(err, &we) || we.Min != 10 {
		t.Fatalf("9 characters under the default: err=%v, want minimum 10", err)
	}
	for _, n := range []int{-1, 7, 73} {
		if _, err := auth.New(ctx, st, auth.Config{Secret: testSecret, BcryptCost: bcrypt.MinCost, MinPasswordLength: n}); err == nil {
			t.Errorf("MinPasswordLength %d: New succeeded, want an error", n)
		}
	}
}

func TestService_LoginInvalidCredentials(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	MustSignup(t, s, "carol")
	cases := map[string][2]string{
		"wrong password":   {"carol", password + "!"},
		"unknown user":     {"dave", password},
		"invalid username": {"x", password},
		"empty password":   {"carol", ""},
		// bcrypt would truncate to 72 bytes; such a password never matches.
		"password plus 72 bytes": {"carol", password + strings.Repeat("x", 80)},
	}
	var msgs []string
	for name, c := range cases {
		_, err := s.Login(ctx, c[0], c[1], "")
		if !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Errorf("%s: Login err=%v, want ErrInvalidCredentials", name, err)
			continue
		}
		msgs = append(msgs, err.Error())
	}
	// Unknown user and wrong password are indistinguishable.
	for _, m := range msgs {
		if m != msgs[0] {
			t.Errorf("error messages differ: %q vs %q", m, msgs[0])
		}
	}
}

func TestService_LoginTiming(t *testing.T) {
	// An unknown user still costs a bcrypt comparison: with a high cost,
	// both paths take clearly longer than a store lookup.
	if testing.Short() {
		t.Skip("bcrypt at a real cost is slow")
	}
	s, _, _ := MustNew(t, func(c *auth.Config) { c.BcryptCost = 8 })
	ctx := context.Background()
	MustSignup(t, s, "erin")
	measure := func(user string) time.Duration {
		start := time.Now()
		if _, err := s.Login(ctx, user, "wrong password!", ""); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login(%q) err=%v", user, err)
		}
		return time.Since(start)
	}
	known, unknown := measure("erin"), measure("nobody")
	if unknown < known/3 {
		t.Errorf("unknown user took %v, wrong password %v: the unknown-user path skips bcrypt", unknown, known)
	}
}

func TestService_UserIdentityIsolation(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	a := MustAuthenticate(t, s, MustSignup(t, s, "user-a").AccessToken)
	b := MustAuthenticate(t, s, MustSignup(t, s, "user-b").AccessToken)
	if a.UID == b.UID {
		t.Fatalf("two users share uid %s", a.UID)
	}
	if err := collections.ValidateDocPath(fmt.Sprintf("users/%s", a.UID)); err != nil {
		t.Errorf("uid %q is not a valid document id: %v", a.UID, err)
	}
}
