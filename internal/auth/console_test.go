package auth_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
)

const consoleSessions = "_console_sessions"

// The admin key as the server holds it: its SHA-256.
const adminKey = "the admin key"

var adminKeyHash = sha256.Sum256([]byte(adminKey))

func mustAdminKeySession(t *testing.T, s *auth.Service) auth.ConsoleSession {
	t.Helper()
	cs, err := s.StartConsoleSessionWithAdminKey(context.Background(), adminKey, adminKeyHash, "192.0.2.1")
	if err != nil {
		t.Fatalf("StartConsoleSessionWithAdminKey: %v", err)
	}
	return cs
}

// mustAdminUser signs up a user and gives it the admin role.
func mustAdminUser(t *testing.T, s *auth.Service, name string) string {
	t.Helper()
	id := MustAuthenticate(t, s, MustSignup(t, s, name).AccessToken)
	if _, err := s.SetUserRoles(context.Background(), id.UID, []string{"user", "admin"}); err != nil {
		t.Fatalf("SetUserRoles: %v", err)
	}
	return id.UID
}

func mustRefreshConsole(t *testing.T, s *auth.Service, cookie string) auth.ConsoleSession {
	t.Helper()
	cs, err := s.RefreshConsoleSession(context.Background(), cookie, adminKeyHash)
	if err != nil {
		t.Fatalf("RefreshConsoleSession: %v", err)
	}
	return cs
}

func wantConsoleRefused(t *testing.T, s *auth.Service, what, cookie string) {
	t.Helper()
	if cs, err := s.RefreshConsoleSession(context.Background(), cookie, adminKeyHash); !errors.Is(err, auth.ErrInvalidToken) || cs.AccessToken != "" {
		t.Fatalf("%s: refresh=(%+v, %v), want ErrInvalidToken", what, cs, err)
	}
}

func TestConsole_AdminKeySessionIdentity(t *testing.T) {
	s, st, clk := MustNew(t, nil)
	cs := mustAdminKeySession(t, s)
	if cs.ExpiresIn != 600 || cs.Username != "admin" || !slices.Equal(cs.Roles, []string{"admin"}) {
		t.Errorf("session %+v", cs)
	}
	if !cs.CookieExpires.Equal(clk.Now().Add(auth.DefaultConsoleSessionTTL)) {
		t.Errorf("cookie expires %v, want 8h from now", cs.CookieExpires)
	}
	if _, _, ok := auth.ParseConsoleCookie(cs.Cookie); !ok {
		t.Errorf("cookie %q does not parse", cs.Cookie)
	}
	id := MustAuthenticate(t, s, cs.AccessToken)
	if id.Kind != auth.KindConsoleAdminKey || id.UID != "" || id.Username != "admin" || !slices.Equal(id.Roles, []string{"admin"}) {
		t.Errorf("identity %+v, want the admin key's (no uid)", id)
	}
	if id.Claims["console"] != "admin-key" {
		t.Errorf("claims %v", id.Claims)
	}
	// Stored hashed: the store holds neither the id nor the secret.
	docs := allDocs(t, st, consoleSessions)
	if len(docs) != 1 {
		t.Fatalf("%d session rows, want 1", len(docs))
	}
	id64, secret, _ := auth.ParseConsoleCookie(cs.Cookie)
	for k, v := range docs[0].Data {
		if str, ok := v.(string); ok && (strings.Contains(str, secret) || strings.Contains(str, id64)) {
			t.Errorf("row field %s holds the cookie in clear", k)
		}
	}
	if strings.Contains(docs[0].Path, id64) {
		t.Errorf("row path %s holds the session id in clear", docs[0].Path)
	}
	clk.Advance(10 * time.Minute)
	expectInvalidToken(t, s, "an expired console token", cs.AccessToken)
}

// The console claim with any subject but the reserved one is refused: no
// token of a user can become the admin key's.
func TestConsole_AdminClaimNeedsItsSubject(t *testing.T) {
	s, _, clk := MustNew(t, nil)
	now := clk.Now()
	claims := jwt.MapClaims{
		"sub": "0190f0c4-0000-7000-8000-000000000000", "username": "admin", "roles": []string{"admin"}, "typ": "access",
		"console": "admin-key", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
	}
	expectInvalidToken(t, s, "console admin claim with a user's subject", sign(t, jwt.SigningMethodHS256, testSecret, claims))
}

func TestConsole_WrongAdminKeyIsRateLimited(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	for i := range auth.DefaultLoginFailures {
		if _, err := s.StartConsoleSessionWithAdminKey(ctx, "a guess", adminKeyHash, "192.0.2.7"); !errors.Is(err, auth.ErrInvalidAdminKey) || !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("guess %d: err=%v, want ErrInvalidAdminKey", i, err)
		}
	}
	var rle *auth.RateLimitError
	if _, err := s.StartConsoleSessionWithAdminKey(ctx, adminKey, adminKeyHash, "192.0.2.7"); !errors.As(err, &rle) || rle.RetryAfter <= 0 {
		t.Fatalf("after %d wrong keys, the right key: err=%v, want *RateLimitError", auth.DefaultLoginFailures, err)
	}
	if n := len(allDocs(t, st, consoleSessions)); n != 0 {
		t.Fatalf("%d sessions stored by refused sign-ins", n)
	}
	// Another address is not affected.
	if _, err := s.StartConsoleSessionWithAdminKey(ctx, adminKey, adminKeyHash, "192.0.2.8"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// The admin key's counters are not a user's: a user called like the
	// limiter key (impossible) or any user logs in as usual from .7.
	MustSignup(t, s, "admin-key")
	if _, err := s.Login(ctx, "admin-key", password, "192.0.2.7"); err != nil {
		t.Fatalf("login from the limited address: %v", err)
	}
}

func TestConsole_UserSession(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	MustSignup(t, s, "bob")
	if _, err := s.StartConsoleSession(ctx, "bob", password, "192.0.2.1"); !errors.Is(err, auth.ErrConsoleNotAdmin) {
		t.Fatalf("a user without admin: err=%v, want ErrConsoleNotAdmin", err)
	}
	if _, err := s.StartConsoleSession(ctx, "bob", "wrong password!", "192.0.2.1"); !errors.Is(err, auth.ErrInvalidCredentials) {
		t.Fatalf("a wrong password: err=%v", err)
	}
	if _, err := s.StartConsoleSession(ctx, "nobody", password, "192.0.2.1"); !errors.Is(err, auth.ErrInvalidCredentials) {
		t.Fatalf("an unknown user: err=%v", err)
	}
	if n := len(allDocs(t, st, consoleSessions)); n != 0 {
		t.Fatalf("%d sessions stored by refused sign-ins", n)
	}
	refreshBefore := len(allDocs(t, st, "_refresh_tokens"))

	uid := mustAdminUser(t, s, "carol")
	cs, err := s.StartConsoleSession(ctx, "Carol", password, "192.0.2.1")
	if err != nil {
		t.Fatalf("StartConsoleSession: %v", err)
	}
	if cs.Username != "carol" || !slices.Equal(cs.Roles, []string{"user", "admin"}) {
		t.Errorf("session %+v", cs)
	}
	id := MustAuthenticate(t, s, cs.AccessToken)
	if id.Kind != auth.KindUser || id.UID != uid || id.Claims["console"] != "user" {
		t.Errorf("identity %+v", id)
	}
	// No refresh token was issued (SetUserRoles revoked carol's signup one).
	if n := len(allDocs(t, st, "_refresh_tokens")); n != refreshBefore {
		t.Errorf("refresh tokens %d, want %d: a console sign-in issues none", n, refreshBefore)
	}
}

// Password guesses through the console count against the same limiter as
// Login.
func TestConsole_SharesTheLoginLimiter(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	mustAdminUser(t, s, "dave")
	for range auth.DefaultLoginFailures {
		if _, err := s.StartConsoleSession(ctx, "dave", "not the password", "192.0.2.9"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("err=%v", err)
		}
	}
	var rle *auth.RateLimitError
	if _, err := s.Login(ctx, "dave", password, "192.0.2.9"); !errors.As(err, &rle) {
		t.Fatalf("Login after console guesses: err=%v, want *RateLimitError", err)
	}
	if _, err := s.StartConsoleSession(ctx, "dave", password, "192.0.2.9"); !errors.As(err, &rle) {
		t.Fatalf("console after console guesses: err=%v, want *RateLimitError", err)
	}
}

func TestConsole_RotationAndReuse(t *testing.T) {
	s, st, clk := MustNew(t, nil)
	first := mustAdminKeySession(t, s)

	second := mustRefreshConsole(t, s, first.Cookie)
	if second.Cookie == "" || second.Cookie == first.Cookie {
		t.Fatalf("refresh cookie %q, want a new value", second.Cookie)
	}
	MustAuthenticate(t, s, second.AccessToken)

	// Within the grace the replaced value mints a token but no cookie
	// (another tab refreshed at the same moment), and the session lives on.
	clk.Advance(5 * time.Second)
	late := mustRefreshConsole(t, s, first.Cookie)
	if late.Cookie != "" || late.AccessToken == "" {
		t.Fatalf("refresh with the replaced value within the grace: %+v, want a token and no cookie", late)
	}
	third := mustRefreshConsole(t, s, second.Cookie)

	// After the grace, the replaced value ends the session: the current
	// value stops working too.
	clk.Advance(time.Minute)
	wantConsoleRefused(t, s, "a replaced value after the grace", second.Cookie)
	if n := len(allDocs(t, st, consoleSessions)); n != 0 {
		t.Fatalf("%d session rows after reuse, want 0", n)
	}
	wantConsoleRefused(t, s, "the current value after reuse", third.Cookie)
}

// A value two rotations old is never within the grace: it ends the session.
func TestConsole_OlderValueEndsSession(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	v1 := mustAdminKeySession(t, s).Cookie
	v2 := mustRefreshConsole(t, s, v1).Cookie
	v3 := mustRefreshConsole(t, s, v2).Cookie
	wantConsoleRefused(t, s, "a value two rotations old", v1)
	wantConsoleRefused(t, s, "the current value after reuse", v3)
}

// Refreshes racing with one value: one rotates, the others get a token
// within the grace, none ends the session.
func TestConsole_ConcurrentRefresh(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	v := mustAdminKeySession(t, s).Cookie
	const n = 8
	var wg sync.WaitGroup
	results := make([]auth.ConsoleSession, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.RefreshConsoleSession(context.Background(), v, adminKeyHash)
		}()
	}
	wg.Wait()
	var rotated []string
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("refresh %d: %v", i, errs[i])
		}
		if results[i].Cookie != "" {
			rotated = append(rotated, results[i].Cookie)
		}
	}
	if len(rotated) != 1 {
		t.Fatalf("%d refreshes rotated, want exactly 1", len(rotated))
	}
	mustRefreshConsole(t, s, rotated[0])
}

func TestConsole_IdleAndAbsoluteTTL(t *testing.T) {
	s, st, clk := MustNew(t, func(c *auth.Config) {
		c.Console = auth.ConsoleConfig{SessionTTL: time.Hour, IdleTTL: 30 * time.Minute, TokenTTL: 10 * time.Minute}
	})
	// Idle: 30 minutes without a refresh end the session.
	idle := mustAdminKeySession(t, s)
	clk.Advance(30 * time.Minute)
	wantConsoleRefused(t, s, "an idle session", idle.Cookie)
	// ... counted from the last refresh (under the default 8h session).
	d, _, dclk := MustNew(t, nil)
	idle = mustAdminKeySession(t, d)
	for range 3 {
		dclk.Advance(29 * time.Minute)
		idle = mustRefreshConsole(t, d, idle.Cookie)
	}
	dclk.Advance(30 * time.Minute)
	wantConsoleRefused(t, d, "a session idle since its last refresh", idle.Cookie)

	// Refreshing keeps it alive, but never past the absolute end.
	cs := mustAdminKeySession(t, s)
	ends := cs.CookieExpires
	for range 3 {
		clk.Advance(20 * time.Minute)
		if clk.Now().Before(ends) {
			cs = mustRefreshConsole(t, s, cs.Cookie)
			if !cs.CookieExpires.Equal(ends) {
				t.Fatalf("refresh moved the absolute end to %v, want %v", cs.CookieExpires, ends)
			}
		}
	}
	wantConsoleRefused(t, s, "a session past its absolute end", cs.Cookie)
	if n := len(allDocs(t, st, consoleSessions)); n != 0 {
		t.Fatalf("%d rows left, want the refused sessions deleted", n)
	}
}

func TestConsole_PurgeExpired(t *testing.T) {
	s, st, clk := MustNew(t, nil)
	old := mustAdminKeySession(t, s)
	clk.Advance(20 * time.Minute)
	fresh := mustAdminKeySession(t, s)
	clk.Advance(15 * time.Minute) // old is idle 35 min, fresh 15
	n, err := s.PurgeExpired(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("PurgeExpired=(%d, %v), want 1", n, err)
	}
	wantConsoleRefused(t, s, "a purged session", old.Cookie)
	mustRefreshConsole(t, s, fresh.Cookie)
	if rows := len(allDocs(t, st, consoleSessions)); rows != 1 {
		t.Fatalf("%d rows, want 1", rows)
	}
}

func TestConsole_UserLosesAdminOrIsDeleted(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	uid := mustAdminUser(t, s, "erin")
	mustAdminUser(t, s, "frank")
	erin, err := s.StartConsoleSession(ctx, "erin", password, "")
	if err != nil {
		t.Fatal(err)
	}
	frank, err := s.StartConsoleSession(ctx, "frank", password, "")
	if err != nil {
		t.Fatal(err)
	}
	key := mustAdminKeySession(t, s)

	// SetUserRoles ends erin's sessions (and only erin's).
	if _, err := s.SetUserRoles(ctx, uid, []string{"admin"}); err != nil {
		t.Fatal(err)
	}
	wantConsoleRefused(t, s, "a session of a user whose roles were set", erin.Cookie)
	frank = mustRefreshConsole(t, s, frank.Cookie)
	key = mustRefreshConsole(t, s, key.Cookie)

	// A role taken away behind SetUserRoles' back (a direct store write) is
	// seen at the next refresh.
	frankID := MustAuthenticate(t, s, frank.AccessToken).UID
	w := collections.Write{Type: collections.WriteUpdate, Path: "_users/" + frankID, Data: map[string]any{"roles": []any{"user"}}}
	if _, err := st.Commit(ctx, "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	wantConsoleRefused(t, s, "a user without admin", frank.Cookie)

	// A deleted user's session ends.
	erin, err = s.StartConsoleSession(ctx, "erin", password, "")
	if err != nil {
		t.Fatal(err)
	}
	w = collections.Write{Type: collections.WriteDelete, Path: "_users/" + uid}
	if _, err := st.Commit(ctx, "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	wantConsoleRefused(t, s, "a deleted user", erin.Cookie)

	// The admin key's session is untouched by all of it.
	mustRefreshConsole(t, s, key.Cookie)
}

func TestConsole_LogoutAndRevokeAll(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	a, b := mustAdminKeySession(t, s), mustAdminKeySession(t, s)
	// Logging out with a replaced value ends the session too.
	a2 := mustRefreshConsole(t, s, a.Cookie)
	if err := s.EndConsoleSession(ctx, a.Cookie); err != nil {
		t.Fatal(err)
	}
	wantConsoleRefused(t, s, "after logout", a2.Cookie)
	for _, v := range []string{a.Cookie, "", "garbage", strings.Repeat("x", 1<<20)} {
		if err := s.EndConsoleSession(ctx, v); err != nil {
			t.Errorf("logout twice or with garbage: %v", err)
		}
	}
	c := mustAdminKeySession(t, s)
	n, err := s.RevokeAllConsoleSessions(ctx)
	if err != nil || n != 2 {
		t.Fatalf("RevokeAllConsoleSessions=(%d, %v), want 2", n, err)
	}
	wantConsoleRefused(t, s, "after revoke-all", b.Cookie)
	wantConsoleRefused(t, s, "after revoke-all", c.Cookie)
	if rows := len(allDocs(t, st, consoleSessions)); rows != 0 {
		t.Fatalf("%d rows after revoke-all", rows)
	}
}

func TestConsole_ParseCookie(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	good := mustAdminKeySession(t, s).Cookie
	if _, _, ok := auth.ParseConsoleCookie(good); !ok || len(good) != auth.ConsoleCookieLength {
		t.Fatalf("a real cookie %q does not parse", good)
	}
	before := allDocs(t, st, consoleSessions)[0]
	dot := len(auth.ConsoleCookiePrefix) + 22
	for name, v := range map[string]string{
		"empty":          "",
		"prefix only":    auth.ConsoleCookiePrefix,
		"short":          good[:len(good)-1],
		"long":           good + "A",
		"other prefix":   "lr_" + good[3:],
		"no dot":         good[:dot] + "A" + good[dot+1:],
		"bad char":       good[:10] + "+" + good[11:],
		"padding":        good[:len(good)-1] + "=",
		"refresh token":  "lr_" + strings.Repeat("A", 43),
		"unknown id":     auth.ConsoleCookiePrefix + strings.Repeat("A", 22) + good[dot:],
		"huge":           strings.Repeat("A", 1<<16),
		"space in value": good[:dot+3] + " " + good[dot+4:],
	} {
		if name != "unknown id" {
			if _, _, ok := auth.ParseConsoleCookie(v); ok {
				t.Errorf("%s: %q parses", name, v)
			}
		}
		wantConsoleRefused(t, s, name, v)
	}
	// None of it touched the real session.
	after := allDocs(t, st, consoleSessions)
	if len(after) != 1 || after[0].Version != before.Version {
		t.Fatalf("refused refreshes changed the session row: %v -> %v", before, after)
	}
	mustRefreshConsole(t, s, good)
}

func TestConsole_ConfigChecks(t *testing.T) {
	for name, c := range map[string]auth.ConsoleConfig{
		"idle over session": {SessionTTL: time.Hour, IdleTTL: 2 * time.Hour},
		"token over idle":   {IdleTTL: 5 * time.Minute, TokenTTL: 10 * time.Minute},
	} {
		_, err := auth.New(context.Background(), MustOpenStore(t), auth.Config{Secret: testSecret, Console: c})
		if err == nil || !strings.Contains(err.Error(), "console") {
			t.Errorf("%s: New err=%v, want a console TTL error", name, err)
		}
	}
	// Defaults shrink under a shorter session.
	s, _, _ := MustNew(t, func(c *auth.Config) { c.Console = auth.ConsoleConfig{SessionTTL: 5 * time.Minute} })
	cs := mustAdminKeySession(t, s)
	if cs.ExpiresIn != 300 {
		t.Errorf("ExpiresIn=%d under a 5-minute session, want 300", cs.ExpiresIn)
	}
}

// Sessions opened with the admin key end when the key changes (a restart
// with a new key); user sessions do not.
func TestConsole_AdminKeyChangeEndsItsSessions(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	key := mustAdminKeySession(t, s)
	mustAdminUser(t, s, "gina")
	user, err := s.StartConsoleSession(ctx, "gina", password, "")
	if err != nil {
		t.Fatal(err)
	}
	newKey := sha256.Sum256([]byte("the rotated admin key"))
	if cs, err := s.RefreshConsoleSession(ctx, key.Cookie, newKey); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("refresh after the key changed: (%+v, %v), want ErrInvalidToken", cs, err)
	}
	wantConsoleRefused(t, s, "the old key's session, even with the old key back", key.Cookie)
	if _, err := s.RefreshConsoleSession(ctx, user.Cookie, newKey); err != nil {
		t.Fatalf("a user's session after the key changed: %v", err)
	}
	if _, err := s.StartConsoleSessionWithAdminKey(ctx, adminKey, newKey, ""); !errors.Is(err, auth.ErrInvalidAdminKey) {
		t.Fatalf("the old key against the new hash: %v", err)
	}
}

// A token minted near the session's absolute end lives only until that
// end: the session TTL bounds what one sign-in grants.
func TestConsole_TokenNeverOutlivesTheSession(t *testing.T) {
	s, _, clk := MustNew(t, func(c *auth.Config) {
		c.Console = auth.ConsoleConfig{SessionTTL: time.Hour, IdleTTL: 30 * time.Minute, TokenTTL: 10 * time.Minute}
	})
	cs := mustAdminKeySession(t, s)
	ends := cs.CookieExpires
	for _, step := range []time.Duration{25 * time.Minute, 25 * time.Minute, 5 * time.Minute} {
		clk.Advance(step)
		cs = mustRefreshConsole(t, s, cs.Cookie)
	}
	// 55 minutes in: 5 minutes of session are left.
	if cs.ExpiresIn != 300 {
		t.Errorf("expires_in %d, want 300 (the session's end)", cs.ExpiresIn)
	}
	clk.Advance(4 * time.Minute)
	MustAuthenticate(t, s, cs.AccessToken)
	clk.Advance(ends.Sub(clk.Now()) + time.Second)
	if id, err := s.Authenticate(context.Background(), cs.AccessToken); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a token past its session's absolute end: (%+v, %v), want ErrInvalidToken", id, err)
	}
	// Never 0 (a page reads 0 as "unknown"): a session with less than a
	// second left still answers 1.
	u, _, uclk := MustNew(t, func(c *auth.Config) {
		c.Console = auth.ConsoleConfig{SessionTTL: time.Hour, IdleTTL: time.Hour, TokenTTL: 10 * time.Minute}
	})
	cs = mustAdminKeySession(t, u)
	uclk.Advance(time.Hour - 500*time.Millisecond)
	if cs = mustRefreshConsole(t, u, cs.Cookie); cs.ExpiresIn != 1 {
		t.Errorf("expires_in %d with half a second left, want 1", cs.ExpiresIn)
	}
}
