// Package ssrf builds HTTP clients that refuse to connect to internal addresses.
//
// The check runs at dial time, inside net.Dialer.ControlContext, on the IP
// address actually being connected to (after DNS resolution). A host name that
// resolves to a public address during validation and to 127.0.0.1 at delivery
// time (DNS rebinding) is therefore still refused. Clients built here follow no
// redirects: a 3xx response is returned to the caller as-is.
//
// Two escape hatches exist for self-hosted deployments, mirroring the
// [delivery] allow_hosts and allow_cidrs configuration keys:
//
//   - allowHosts: host names or IP literals matched, case-insensitively and
//     exactly, against the URL's hostname (the host part of the address the
//     transport dials, before resolution). A matching dial is allowed whatever
//     the name resolves to. Only the URL hostname is compared: allowing
//     "127.0.0.1" does not allow "http://localhost/", and allowing
//     "localhost" does not allow "http://127.0.0.1/".
//   - allowCIDRs: networks that are allowed even though they fall inside a
//     blocked range. They are compared with the resolved IP.
package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is wrapped by every error returned for a refused address.
// errors.Is(err, ErrBlocked) holds for the error returned by http.Client.Do
// when the guard refused the connection.
var ErrBlocked = errors.New("ssrf: address not allowed")

// allowHint tells an operator how to lift a block.
const allowHint = "allow it with [delivery] allow_hosts or allow_cidrs"

// BlockedError describes a refused address. It wraps ErrBlocked.
type BlockedError struct {
	// IP is the address that was refused, as given (not unmapped).
	IP netip.Addr
	// Range is the blocked network the (possibly embedded) address fell in;
	// it is the zero Prefix when the address was invalid.
	Range netip.Prefix
	// Reason is a short description of the range, e.g. "loopback".
	Reason string
	// Embedded is the IPv4 address extracted from an IPv4-mapped, NAT64 or
	// 6to4 address, when that is what was blocked; otherwise invalid.
	Embedded netip.Addr
	// Via names the embedding, e.g. "NAT64", when Embedded is valid.
	Via string
}

func (e *BlockedError) Error() string {
	var b strings.Builder
	b.WriteString("ssrf: ")
	if !e.IP.IsValid() {
		b.WriteString("invalid address is not allowed")
		return b.String()
	}
	b.WriteString(e.IP.String())
	if e.Embedded.IsValid() {
		fmt.Fprintf(&b, " is %s embedding %s, which", e.Via, e.Embedded)
	}
	fmt.Fprintf(&b, " is %s (in %s; %s)", e.Reason, e.Range, allowHint)
	return b.String()
}

// Unwrap returns ErrBlocked.
func (e *BlockedError) Unwrap() error { return ErrBlocked }

type blockedRange struct {
	prefix netip.Prefix
	reason string
}

// blockedRanges is checked in order, so more specific entries come first to
// get the most precise reason. IPv4-mapped addresses are unmapped before the
// lookup; NAT64 and 6to4 addresses are checked on their embedded IPv4.
var blockedRanges = func() []blockedRange {
	raw := []struct{ cidr, reason string }{
		// IPv4
		{"0.0.0.0/8", "unspecified (\"this network\")"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"100.64.0.0/10", "carrier-grade NAT (RFC 6598)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.169.254/32", "link-local (cloud metadata endpoint)"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation (TEST-NET-1)"},
		{"192.88.99.0/24", "6to4 relay anycast"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation (TEST-NET-2)"},
		{"203.0.113.0/24", "documentation (TEST-NET-3)"},
		{"224.0.0.0/4", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved"},
		// IPv6
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible (deprecated)"},
		{"64:ff9b:1::/48", "local-use NAT64"},
		{"100::/64", "discard-only"},
		{"2001:db8::/32", "documentation"},
		{"fc00::/7", "unique local (private)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local (deprecated)"},
		{"ff00::/8", "multicast"},
	}
	out := make([]blockedRange, len(raw))
	for i, r := range raw {
		out[i] = blockedRange{netip.MustParsePrefix(r.cidr), r.reason}
	}
	return out
}()

var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFourPfx = netip.MustParsePrefix("2002::/16")
)

// Guard decides which addresses may be connected to and builds HTTP clients
// that enforce the decision at dial time. A Guard is safe for concurrent use.
type Guard struct {
	allowHosts map[string]struct{}
	allowCIDRs []netip.Prefix
	transport  *http.Transport
}

// New builds a guard. allowHosts are host names or IP literals
// (case-insensitive, exact match on the URL's hostname) that may be reached
// whatever they resolve to; allowCIDRs are networks that are allowed even
// though they are in a blocked range (a bare IP is taken as a single-address
// network). Invalid CIDRs are an error naming the entry.
func New(allowHosts, allowCIDRs []string) (*Guard, error) {
	g := &Guard{allowHosts: make(map[string]struct{}, len(allowHosts))}
	for _, h := range allowHosts {
		h = normalizeHost(h)
		if h == "" {
			continue
		}
		g.allowHosts[h] = struct{}{}
	}
	for _, c := range allowCIDRs {
		p, err := parseAllowCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("ssrf: invalid allow_cidrs entry %q: %w", c, err)
		}
		g.allowCIDRs = append(g.allowCIDRs, p)
	}
	g.transport = g.newTransport()
	return g, nil
}

func parseAllowCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR or IP address")
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zones are not allowed")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	// ::ffff:a.b.c.d/104 and the like: compare as IPv4, since addresses are
	// unmapped before matching.
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// normalizeHost lower-cases a host name and canonicalises IP literals (also
// stripping brackets from IPv6 literals) so that allowHosts entries and URL
// hostnames compare equal whatever their spelling.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String()
	}
	return h
}

// CheckIP reports whether ip may be connected to (nil) or why not (a
// *BlockedError, which wraps ErrBlocked and names the IP and the range).
func (g *Guard) CheckIP(ip netip.Addr) error {
	if !ip.IsValid() {
		return &BlockedError{Reason: "invalid"}
	}
	if g.allowedCIDR(ip) {
		return nil
	}
	a := ip.WithZone("").Unmap()
	if a.Is4() && ip.Is4In6() {
		if r, ok := lookupBlocked(a); ok {
			return &BlockedError{IP: ip, Range: r.prefix, Reason: r.reason, Embedded: a, Via: "IPv4-mapped IPv6"}
		}
		return nil
	}
	if a.Is6() {
		var via string
		var v4 netip.Addr
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			via, v4 = "NAT64", netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFourPfx.Contains(a):
			via, v4 = "6to4", netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if via != "" {
			if g.allowedCIDR(v4) {
				return nil
			}
			if r, ok := lookupBlocked(v4); ok {
				return &BlockedError{IP: ip, Range: r.prefix, Reason: r.reason, Embedded: v4, Via: via}
			}
			return nil
		}
	}
	if r, ok := lookupBlocked(a); ok {
		return &BlockedError{IP: ip, Range: r.prefix, Reason: r.reason}
	}
	return nil
}

func (g *Guard) allowedCIDR(ip netip.Addr) bool {
	a := ip.WithZone("").Unmap()
	for _, p := range g.allowCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func lookupBlocked(a netip.Addr) (blockedRange, bool) {
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return r, true
		}
	}
	return blockedRange{}, false
}

// hostAllowed reports whether the host part of a dial address is listed in
// allowHosts.
func (g *Guard) hostAllowed(addr string) bool {
	if len(g.allowHosts) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	_, ok := g.allowHosts[normalizeHost(host)]
	return ok
}

// control runs after resolution with the literal IP:port being connected.
func (g *Guard) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: we cannot tell what is being connected to.
		return fmt.Errorf("ssrf: cannot parse dial address %q: %w", address, ErrBlocked)
	}
	return g.CheckIP(ap.Addr())
}

// dialContext dials addr (host:port as it appears in the URL). Hosts in
// allowHosts are dialled without the IP check; everything else goes through
// a dialer whose ControlContext checks each resolved IP.
func (g *Guard) dialContext(guarded, open *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.hostAllowed(addr) {
			return open.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

func (g *Guard) newTransport() *http.Transport {
	guarded := &net.Dialer{
		Timeout:        30 * time.Second,
		KeepAlive:      30 * time.Second,
		ControlContext: g.control,
	}
	open := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
	}
	return &http.Transport{
		Proxy:                 nil, // never honour HTTP(S)_PROXY: it would bypass the dial check
		DialContext:           g.dialContext(guarded, open),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

// Transport returns the guarded transport (for callers that need their own
// client, e.g. per-request timeouts via context). The same transport, and so
// the same connection pool, is shared by every client from Client; callers
// must not modify it (use Clone for a variant).
func (g *Guard) Transport() *http.Transport { return g.transport }

// Client returns an *http.Client that dials through the guard, follows no
// redirects (the 3xx response itself is returned) and has the given overall
// timeout (0 means none).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: g.transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
