package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/collections"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultDB         = "default"
	DefaultAccessTTL  = 15 * time.Minute
	DefaultRefreshTTL = 30 * 24 * time.Hour
	// DefaultLoginFailures and DefaultLoginWindow: 10 failed logins of one
	// username from one address within 15 minutes, then that pair gets
	// ErrRateLimited (see Limit).
	DefaultLoginFailures = 10
	DefaultLoginWindow   = 15 * time.Minute
	// DefaultAddressFailures: failed logins from one address over all
	// usernames within the window before that address is refused.
	DefaultAddressFailures = 100
	// DefaultUserFailures: failed logins of one username from all addresses
	// within the window before each address is allowed only a few.
	DefaultUserFailures = 100
	// DefaultHashWait is how long a signup or login waits for a hashing slot
	// before ErrBusy.
	DefaultHashWait = 2 * time.Second
	// MinSecretBytes is the shortest accepted HS256 signing key (RFC 7518
	// asks for a key at least as long as the hash output).
	MinSecretBytes = 32
)

// System collections holding the auth documents (see the package comment).
const (
	colUsers        = "_users"
	colUsernames    = "_usernames"
	colRefresh      = "_refresh_tokens"
	colAPIKeys      = "_api_keys"
	colAPIKeyNames  = "_api_key_names"
	purgeInterval   = time.Hour // how often expired refresh tokens are deleted
	maxBearerLength = 16 << 10  // longer credentials are rejected unparsed
)

// Identity kinds.
const (
	KindUser       = "user"
	KindOIDC       = "oidc"
	KindServiceKey = "service-key"
)

// Config configures a Service. Secret is required; everything else has a
// default.
type Config struct {
	// DB is the database holding the auth system documents (default
	// "default").
	DB string
	// Secret is the HS256 key that signs access tokens; at least 32 bytes.
	// Anyone holding it can mint tokens for any user: keep it out of logs
	// and config files that are shared (see LoadOrCreateSecret).
	Secret []byte
	// AccessTTL is the lifetime of access tokens (default 15 minutes).
	// Access tokens cannot be revoked, so this bounds how long a logged-out
	// or demoted user keeps access.
	AccessTTL time.Duration
	// RefreshTTL is the lifetime of a refresh token (default 30 days); each
	// refresh issues a new token with a fresh lifetime.
	RefreshTTL time.Duration
	// BcryptCost is the password hashing cost (default bcrypt.DefaultCost).
	// Every signup and login spends this much CPU; tests use
	// bcrypt.MinCost, which is far too cheap for production.
	BcryptCost int
	// JWKSURL enables external OIDC tokens (RS256/ES256) signed by a key of
	// this JWK Set. Issuer and Audience, when set, must match the iss and aud
	// claims.
	JWKSURL, Issuer, Audience string
	// LoginLimit bounds failed logins (see Limit).
	LoginLimit Limit
	// MinPasswordLength is the shortest password, in characters, a signup
	// accepts (0: DefaultMinPasswordLength; else LowestMinPasswordLength
	// to MaxPasswordBytes). Login never checks it, so lowering or raising
	// it leaves existing passwords working.
	MinPasswordLength int
	// MaxConcurrentHashes bounds the bcrypt hashes and comparisons running
	// at once (default: half of GOMAXPROCS, at least 1): a flood of signups
	// or logins queues here instead of taking every CPU from other
	// requests. Half, because bcrypt goroutines on every CPU still slow
	// every other request several times (BENCHMARKS.md, signup flood).
	MaxConcurrentHashes int
	// HashWait is how long a signup or login waits for a hashing slot before
	// ErrBusy (default DefaultHashWait; negative: do not wait).
	HashWait time.Duration
	// Console sets the lifetimes of console sessions (console.go); zero
	// fields are the defaults.
	Console ConsoleConfig
	// Registerer receives the auth metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// HTTPClient fetches the JWK Set (default: a client with a 10 s timeout).
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Limit is a sliding-window limit on failed logins. Failures are counted per
// (username, client address) pair, so an attacker's guesses throttle the
// attacker's own pair and not the account: its owner logs in from another
// address as usual. Two more counters catch guessing spread out over pairs.
// For every count, 0 means the default and negative turns that check off.
type Limit struct {
	// Failures is how many failed logins one pair may make within Window;
	// the pair's next attempt is refused with *RateLimitError without
	// checking the password, even if it is the right one (otherwise the
	// refusal would tell a guesser nothing). Default DefaultLoginFailures;
	// negative disables login limiting altogether.
	Failures int
	// Window is the sliding window (default DefaultLoginWindow).
	Window time.Duration
	// AddressFailures is how many failed logins one address may make over
	// all usernames within Window (credential stuffing); past it that
	// address is refused. Default DefaultAddressFailures.
	AddressFailures int
	// UserFailures is how many failed logins of one username, from all
	// addresses, make it "under attack" within Window: then each pair of
	// that username may fail only 3 times. It never refuses by itself, so
	// the owner at an address that has not failed always gets the password
	// checked. Default DefaultUserFailures.
	UserFailures int
}

// Identity is an authenticated caller. Its Roles and Claims may be shared
// with every other request presenting the same access token (see
// tokencache.go): read them, never modify them.
type Identity struct {
	UID      string
	Username string
	Roles    []string
	// Claims are the verified token's claims (nil for service keys and
	// User); security rules see them as request.auth.claims.
	Claims map[string]any
	// Kind is KindUser, KindOIDC or KindServiceKey.
	Kind string
}

// Tokens is the token pair returned by signup, login and refresh; its JSON
// form is the /auth/v1 response body.
type Tokens struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int    `json:"expires_in"` // access token lifetime, seconds
	TokenType    string `json:"token_type"` // "Bearer"
}

// Service implements accounts, tokens and API keys on a collections.Store.
// It is safe for concurrent use.
type Service struct {
	store      collections.Store
	db         string
	secret     []byte
	accessTTL  time.Duration
	refreshTTL time.Duration
	cost       int
	// minPassword is the shortest password a signup accepts (characters).
	minPassword int
	now         func() time.Time
	log         *slog.Logger

	// triggerSecret signs trigger tokens (triggerKey of secret).
	triggerSecret []byte

	// dummyHash is compared against for unknown users, so a login costs
	// one bcrypt comparison whether or not the user exists.
	dummyHash []byte
	access    *jwt.Parser
	verified  *verifiedCache // access tokens verifyAccess accepted (tokencache.go)
	limiter   *loginLimiter
	hashes    *hashGate
	oidc      *oidcVerifier // nil unless Config.JWKSURL is set
	console   ConsoleConfig

	ctx       context.Context // owned; cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New checks cfg, applies defaults and returns a Service. When JWKSURL is
// set, it fetches the JWK Set once; a failing fetch is logged, not fatal (an
// identity provider that is down must not keep Loom from starting), and is
// retried when a token with an unknown key id arrives.
func New(ctx context.Context, store collections.Store, cfg Config) (*Service, error) {
	if store == nil {
		return nil, errors.New("auth: a store is required")
	}
	if len(cfg.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("auth: the signing secret must be at least %d bytes, got %d", MinSecretBytes, len(cfg.Secret))
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	if cfg.AccessTTL <= 0 {
		cfg.AccessTTL = DefaultAccessTTL
	}
	if cfg.RefreshTTL <= 0 {
		cfg.RefreshTTL = DefaultRefreshTTL
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("auth: bcrypt cost %d outside [%d, %d]", cfg.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if cfg.MinPasswordLength == 0 {
		cfg.MinPasswordLength = DefaultMinPasswordLength
	}
	if cfg.MinPasswordLength < LowestMinPasswordLength || cfg.MinPasswordLength > MaxPasswordBytes {
		return nil, fmt.Errorf("auth: the minimum password length must be between %d and %d, got %d", LowestMinPasswordLength, MaxPasswordBytes, cfg.MinPasswordLength)
	}
	if cfg.LoginLimit.Failures == 0 {
		cfg.LoginLimit.Failures = DefaultLoginFailures
	}
	if cfg.LoginLimit.Window <= 0 {
		cfg.LoginLimit.Window = DefaultLoginWindow
	}
	if cfg.LoginLimit.AddressFailures == 0 {
		cfg.LoginLimit.AddressFailures = DefaultAddressFailures
	}
	if cfg.LoginLimit.UserFailures == 0 {
		cfg.LoginLimit.UserFailures = DefaultUserFailures
	}
	if cfg.MaxConcurrentHashes <= 0 {
		cfg.MaxConcurrentHashes = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.HashWait == 0 {
		cfg.HashWait = DefaultHashWait
	}
	if err := cfg.Console.withDefaults(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	// The dummy password is random so that no password matches it.
	dummy, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	gate, err := newHashGate(cfg.MaxConcurrentHashes, cfg.HashWait, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{
		store:       store,
		db:          cfg.DB,
		secret:      append([]byte(nil), cfg.Secret...),
		accessTTL:   cfg.AccessTTL,
		refreshTTL:  cfg.RefreshTTL,
		cost:        cfg.BcryptCost,
		minPassword: cfg.MinPasswordLength,
		now:         cfg.Now,
		log:         cfg.Logger.With("component", "auth"),
		dummyHash:   dummy,
		limiter:     newLoginLimiter(cfg.LoginLimit),
		hashes:      gate,
		console:     cfg.Console,
		verified:    newVerifiedCache(verifiedCacheSize),
	}
	s.triggerSecret = triggerKey(s.secret)
	s.access = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(s.now),
		jwt.WithStrictDecoding(),
	)
	// The service's own context outlives the caller's ctx (which may be a
	// startup timeout) and ends with Close.
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.JWKSURL != "" {
		if s.oidc, err = newOIDCVerifier(s.ctx, cfg, s.log); err != nil {
			s.cancel()
			return nil, err
		}
	}
	s.wg.Add(1)
	go s.purgeLoop()
	return s, nil
}

// Close stops the background work: the JWK Set refresh and the periodic
// purge of expired refresh tokens. It does not close the store. Calling it
// more than once is harmless.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// bearerToken is the credential in bearer (with or without the "Bearer "
// scheme), trimmed; false when it is empty or longer than maxBearerLength
// (rejected unparsed).
func bearerToken(bearer string) (string, bool) {
	tok := strings.TrimSpace(bearer)
	if len(tok) > 7 && strings.EqualFold(tok[:7], "bearer ") {
		tok = strings.TrimSpace(tok[7:])
	}
	return tok, tok != "" && len(tok) <= maxBearerLength
}

// Authenticate resolves a bearer credential (with or without the "Bearer "
// scheme) into an Identity: one of our access tokens, an OIDC token when a
// JWK Set is configured, or a service key. Anything else — including refresh
// tokens — is ErrInvalidToken. Other errors (a failing store) mean the
// credential could not be checked.
func (s *Service) Authenticate(ctx context.Context, bearer string) (*Identity, error) {
	tok, ok := bearerToken(bearer)
	if !ok {
		return nil, ErrInvalidToken
	}
	switch {
	case strings.HasPrefix(tok, serviceKeyPrefix):
		return s.authenticateServiceKey(ctx, tok)
	case strings.HasPrefix(tok, refreshTokenPrefix):
		return nil, fmt.Errorf("%w: a refresh token is not an access token", ErrInvalidToken)
	}
	// A token verifyAccess accepted before is accepted again while the
	// clock is inside its validity window (tokencache.go).
	if id, ok := s.verified.get(tok, s.now()); ok {
		return id, nil
	}
	hdr, ok := peekHeader(tok)
	if !ok {
		return nil, ErrInvalidToken
	}
	switch hdr.Alg {
	case jwt.SigningMethodHS256.Alg():
		return s.verifyAccess(tok)
	case jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg():
		if s.oidc == nil {
			return nil, fmt.Errorf("%w: no identity provider is configured for %s tokens", ErrInvalidToken, hdr.Alg)
		}
		return s.oidc.verify(ctx, tok, hdr.Kid)
	}
	return nil, fmt.Errorf("%w: unsupported algorithm", ErrInvalidToken)
}

// docPath joins a system collection and a document id.
func docPath(collection, id string) string { return collection + "/" + id }

// isGone reports whether err means the document (or, for a commit, the
// document a write depended on) is gone or changed under us.
func isGone(err error) bool {
	return errors.Is(err, collections.ErrNotFound) || errors.Is(err, collections.ErrPreconditionFailed)
}
