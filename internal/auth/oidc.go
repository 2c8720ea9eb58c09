package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// JWK Set fetching.
const (
	// jwksRefreshInterval is how often the JWK Set is re-fetched in the
	// background, so removed (revoked) keys stop verifying.
	jwksRefreshInterval = time.Hour
	// jwksUnknownKIDEvery bounds re-fetches triggered by tokens whose kid is
	// not in the cached set: at most one per minute, so a stream of forged
	// kids cannot turn Loom into a load generator against the provider.
	jwksUnknownKIDEvery = time.Minute
	// jwksWaitMax is the longest a request waits for that rate limiter (and
	// for the re-fetch itself). Requests that would wait longer fail at once.
	jwksWaitMax     = 10 * time.Second
	jwksHTTPTimeout = 10 * time.Second
)

// oidcVerifier checks RS256/ES256 tokens of an external identity provider
// against its JWK Set (github.com/MicahParks/keyfunc over jwkset, which
// caches the set and re-fetches it on an unknown kid).
type oidcVerifier struct {
	keys   keyfunc.Keyfunc
	parser *jwt.Parser
}

func newOIDCVerifier(ctx context.Context, cfg Config, log *slog.Logger) (*oidcVerifier, error) {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("auth: jwks_url %q must be an http(s) URL", cfg.JWKSURL)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: jwksHTTPTimeout}
	}
	log = log.With("jwks_url", cfg.JWKSURL)
	storage, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    client,
		Ctx:                       ctx, // ends the refresh goroutine on Close
		HTTPTimeout:               jwksHTTPTimeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshErrorHandler: func(_ context.Context, err error) {
			log.Warn("fetch JWK Set", "error", err)
		},
		RefreshInterval: jwksRefreshInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWK Set: %w", err)
	}
	set, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{cfg.JWKSURL: storage},
		RateLimitWaitMax:  jwksWaitMax,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(jwksUnknownKIDEvery), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWK Set: %w", err)
	}
	keys, err := keyfunc.New(keyfunc.Options{
		Ctx:     ctx,
		Storage: set,
		// Keys marked for encryption never verify signatures; keys
		// without "use" are accepted (many providers omit it).
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWK Set: %w", err)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(cfg.Now),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	return &oidcVerifier{keys: keys, parser: jwt.NewParser(opts...)}, nil
}

// verify checks an OIDC token. kid is the unverified header's key id; tokens
// without one are refused rather than tried against every key.
func (o *oidcVerifier) verify(ctx context.Context, tok, kid string) (*Identity, error) {
	if kid == "" {
		return nil, fmt.Errorf("%w: OIDC token without kid", ErrInvalidToken)
	}
	claims := jwt.MapClaims{}
	if _, err := o.parser.ParseWithClaims(tok, claims, o.keys.KeyfuncCtx(ctx)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return nil, fmt.Errorf("%w: OIDC token without sub", ErrInvalidToken)
	}
	roles := stringList(claims["roles"])
	if roles == nil {
		roles = []string{}
	}
	username, _ := claims["preferred_username"].(string)
	if username == "" {
		username, _ = claims["email"].(string)
	}
	return &Identity{UID: sub, Username: username, Roles: roles, Claims: claims, Kind: KindOIDC}, nil
}
