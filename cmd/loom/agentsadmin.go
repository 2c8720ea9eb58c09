package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	// remoteAdminProbe is the remote Loom's admin-only endpoint a caller's
	// credential is tried on (the smallest admin answer there is).
	remoteAdminProbe = "/admin/v1/deliveries?limit=1"
	// remoteAdminTimeout bounds one check.
	remoteAdminTimeout = 5 * time.Second
	// remoteAdminTTL is how long a credential the remote accepted stays
	// accepted here without asking again (a revoked admin key keeps
	// working here that long).
	remoteAdminTTL = 30 * time.Second
	// remoteAdminCache bounds the credentials remembered.
	remoteAdminCache = 64
	// remoteAdminProbes bounds the checks in flight: anyone can send
	// bearers, and each one not remembered is a request to the remote Loom
	// held up to remoteAdminTimeout. Past it a check waits for a slot
	// (within its timeout).
	remoteAdminProbes = 16
)

// remoteAdmin guards loom agents' rules admin API: the caller's bearer
// must be an admin credential of the remote Loom, which it checks by
// trying it on an admin-only endpoint there (200: admin). Recent positive
// answers are cached by the credential's hash; negative ones are not, so a
// key made admin works at once.
type remoteAdmin struct {
	base string
	hc   *http.Client
	now  func() time.Time
	// probes holds a slot per check in flight (remoteAdminProbes).
	probes chan struct{}

	mu sync.Mutex
	ok map[[32]byte]time.Time // credential hash → expiry
}

func newRemoteAdmin(base string) *remoteAdmin {
	return &remoteAdmin{
		base: strings.TrimRight(base, "/"),
		hc: &http.Client{
			Timeout: remoteAdminTimeout,
			// A redirect is not the remote's answer: a proxy in front of
			// it sending unauthenticated callers to a sign-in page (200)
			// would pass everyone. A 3xx is "could not tell".
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now:    time.Now,
		probes: make(chan struct{}, remoteAdminProbes),
		ok:     map[[32]byte]time.Time{},
	}
}

// wrap serves next to callers the remote Loom knows as admins.
func (g *remoteAdmin) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="loom"`)
			adminJSON(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Unauthorized: authentication required: an admin credential of the Loom server.")
			return
		}
		switch status := g.check(r.Context(), token); status {
		case http.StatusOK:
			next.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="loom"`)
			adminJSON(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Unauthorized: the Loom server does not accept this credential.")
		case http.StatusForbidden:
			adminJSON(w, http.StatusForbidden, "PERMISSION_DENIED", "This credential is not an admin's on the Loom server.")
		default:
			adminJSON(w, http.StatusBadGateway, "UNAVAILABLE", "Could not check the credential with the Loom server; retry later.")
		}
	})
}

// check asks the remote Loom whether token is an admin's: 200 (admin),
// 401, 403, or 502 when it could not tell.
func (g *remoteAdmin) check(ctx context.Context, token string) int {
	sum := sha256.Sum256([]byte(token))
	now := g.now()
	g.mu.Lock()
	exp, hit := g.ok[sum]
	g.mu.Unlock()
	if hit && now.Before(exp) {
		return http.StatusOK
	}
	ctx, cancel := context.WithTimeout(ctx, remoteAdminTimeout)
	defer cancel()
	select {
	case g.probes <- struct{}{}:
		defer func() { <-g.probes }()
	case <-ctx.Done():
		return http.StatusBadGateway
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+remoteAdminProbe, nil)
	if err != nil {
		return http.StatusBadGateway
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := g.hc.Do(req)
	if err != nil {
		return http.StatusBadGateway
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		g.remember(sum, now)
		return http.StatusOK
	case http.StatusUnauthorized, http.StatusForbidden:
		return resp.StatusCode
	default:
		return http.StatusBadGateway
	}
}

// remember caches a positive answer, evicting expired entries (and, when
// still full, any one) to stay within remoteAdminCache.
func (g *remoteAdmin) remember(sum [32]byte, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ok) >= remoteAdminCache {
		for k, exp := range g.ok {
			if !now.Before(exp) {
				delete(g.ok, k)
			}
		}
		for k := range g.ok {
			if len(g.ok) < remoteAdminCache {
				break
			}
			delete(g.ok, k)
		}
	}
	g.ok[sum] = now.Add(remoteAdminTTL)
}

func adminJSON(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
