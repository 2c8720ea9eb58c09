package ssrf

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a real loopback server that counts the requests it saw.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func mustGuard(t *testing.T, hosts, cidrs []string) *Guard {
	t.Helper()
	g, err := New(hosts, cidrs)
	if err != nil {
		t.Fatalf("New(%v, %v): %v", hosts, cidrs, err)
	}
	return g
}

func get(t *testing.T, g *Guard, u string) (*http.Response, error) {
	t.Helper()
	resp, err := g.Client(5 * time.Second).Get(u)
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

func TestLoopbackRefusedByDefault(t *testing.T) {
	srv, hits := countingServer(t)
	g := mustGuard(t, nil, nil)
	_, err := get(t, g, srv.URL)
	if err == nil {
		t.Fatal("expected error, got nil")
	}
	if !errors.Is(err, ErrBlocked) {
		t.Fatalf("errors.Is(err, ErrBlocked) = false; err = %v", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("want *url.Error, got %T", err)
	}
	var be *BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("want *BlockedError in chain, got %v", err)
	}
	if be.Reason != "loopback" || be.IP != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("BlockedError = %+v", be)
	}
	msg := err.Error()
	for _, want := range []string{"127.0.0.1 is loopback", "127.0.0.0/8", "allow_hosts or allow_cidrs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if got := hits.Load(); got != 0 {
		t.Errorf("server saw %d requests, want 0", got)
	}
}

func TestAllowed(t *testing.T) {
	srv, hits := countingServer(t)
	_, port, _ := strings.Cut(srv.Listener.Addr().String(), ":")
	localhostURL := "http://localhost:" + port + "/"
	upperURL := "http://LOCALHOST:" + port + "/"

	tests := []struct {
		name         string
		hosts, cidrs []string
		url          string
		allowed      bool
	}{
		{"allowHosts IP literal", []string{"127.0.0.1"}, nil, srv.URL, true},
		{"allowCIDRs", nil, []string{"127.0.0.0/8"}, srv.URL, true},
		{"allowCIDRs bare IP", nil, []string{"127.0.0.1"}, srv.URL, true},
		{"allowCIDRs other net", nil, []string{"10.0.0.0/8"}, srv.URL, false},
		{"allowHosts hostname", []string{"localhost"}, nil, localhostURL, true},
		{"allowHosts case-insensitive", []string{"LocalHost"}, nil, upperURL, true},
		// allowHosts matches the URL hostname only, never the resolved IP.
		{"hostname not matched by IP entry", []string{"127.0.0.1"}, nil, localhostURL, false},
		{"IP not matched by hostname entry", []string{"localhost"}, nil, srv.URL, false},
		{"hostname via allowCIDRs", nil, []string{"127.0.0.0/8"}, localhostURL, true},
		{"hostname default", nil, nil, localhostURL, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := mustGuard(t, tc.hosts, tc.cidrs)
			before := hits.Load()
			resp, err := get(t, g, tc.url)
			if tc.allowed {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if hits.Load() != before+1 {
					t.Errorf("server did not see the request")
				}
				return
			}
			if !errors.Is(err, ErrBlocked) {
				t.Fatalf("want ErrBlocked, got %v", err)
			}
			if hits.Load() != before {
				t.Errorf("server saw a request although the dial was refused")
			}
		})
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	var targetHits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
	}))
	defer target.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/landed", http.StatusFound)
	}))
	defer redir.Close()

	g := mustGuard(t, nil, []string{"127.0.0.0/8"})
	resp, err := get(t, g, redir.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status = %d, want 302", resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != target.URL+"/landed" {
		t.Errorf("Location = %q", loc)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("redirect target requested %d times", n)
	}
}

func TestTransportConfig(t *testing.T) {
	g := mustGuard(t, nil, nil)
	tr := g.Transport()
	if tr.Proxy != nil {
		t.Error("Proxy must be nil")
	}
	if tr.DisableKeepAlives {
		t.Error("keep-alives disabled")
	}
	if tr.MaxIdleConnsPerHost < 2 {
		t.Errorf("MaxIdleConnsPerHost = %d", tr.MaxIdleConnsPerHost)
	}
	if tr.TLSHandshakeTimeout != 10*time.Second {
		t.Errorf("TLSHandshakeTimeout = %v", tr.TLSHandshakeTimeout)
	}
	c := g.Client(7 * time.Second)
	if c.Timeout != 7*time.Second || c.Transport != tr {
		t.Errorf("client = %+v", c)
	}
	// Transport used directly (own client) is still guarded.
	srv, hits := countingServer(t)
	_, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if !errors.Is(err, ErrBlocked) || hits.Load() != 0 {
		t.Errorf("transport not guarded: err=%v hits=%d", err, hits.Load())
	}
}

func TestCheckIP(t *testing.T) {
	g := mustGuard(t, nil, nil)
	tests := []struct {
		ip     string
		reason string // "" = allowed
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"10.0.0.1", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"64:ff9b::a00:1", "private"},       // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", "loopback"},     // NAT64 of 127.0.0.1
		{"2002:0a00:0001::1", "private"},    // 6to4 of 10.0.0.1
		{"2002:a9fe:a9fe::1", "link-local"}, // 6to4 of 169.254.169.254
		{"::7f00:1", "IPv4-compatible"},
		// allowed
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},  // NAT64 of 8.8.8.8
		{"2002:0808:0808::1", ""}, // 6to4 of 8.8.8.8
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.ip)
			err := g.CheckIP(ip)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("CheckIP(%s) = %v, want allowed", tc.ip, err)
				}
				return
			}
			if !errors.Is(err, ErrBlocked) {
				t.Fatalf("CheckIP(%s) = %v, want ErrBlocked", tc.ip, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.reason) || !strings.Contains(msg, ip.String()) || !strings.Contains(msg, "/") {
				t.Errorf("CheckIP(%s) message %q lacks IP, range or reason %q", tc.ip, msg, tc.reason)
			}
		})
	}
	if err := g.CheckIP(netip.Addr{}); !errors.Is(err, ErrBlocked) {
		t.Errorf("invalid addr: %v", err)
	}
}

func TestCheckIPEmbeddedMessage(t *testing.T) {
	g := mustGuard(t, nil, nil)
	msg := g.CheckIP(netip.MustParseAddr("64:ff9b::a00:1")).Error()
	want := "ssrf: 64:ff9b::a00:1 is NAT64 embedding 10.0.0.1, which is private (RFC 1918) (in 10.0.0.0/8; allow it with [delivery] allow_hosts or allow_cidrs)"
	if msg != want {
		t.Errorf("got  %q\nwant %q", msg, want)
	}
	msg = g.CheckIP(netip.MustParseAddr("127.0.0.1")).Error()
	want = "ssrf: 127.0.0.1 is loopback (in 127.0.0.0/8; allow it with [delivery] allow_hosts or allow_cidrs)"
	if msg != want {
		t.Errorf("got  %q\nwant %q", msg, want)
	}
}

func TestAllowCIDRsOverride(t *testing.T) {
	g := mustGuard(t, nil, []string{"10.1.0.0/16", "fd00::/8", "::ffff:192.168.5.0/120"})
	for _, ip := range []string{"10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a01:203", "2002:0a01:0203::1", "fd00::5", "192.168.5.9"} {
		if err := g.CheckIP(netip.MustParseAddr(ip)); err != nil {
			t.Errorf("CheckIP(%s) = %v, want allowed", ip, err)
		}
	}
	for _, ip := range []string{"10.2.0.1", "fc00::1", "127.0.0.1", "192.168.6.1"} {
		if err := g.CheckIP(netip.MustParseAddr(ip)); !errors.Is(err, ErrBlocked) {
			t.Errorf("CheckIP(%s) = %v, want blocked", ip, err)
		}
	}
}

func TestInvalidCIDR(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "not-a-cidr", "10.0.0/8", "fe80::/200"} {
		_, err := New(nil, []string{"127.0.0.0/8", bad})
		if err == nil {
			t.Errorf("New(%q): want error", bad)
			continue
		}
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("error %q does not name the entry %q", err, bad)
		}
	}
}

func FuzzCheckIP(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "::1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:0a00:0001::1",
		"169.254.169.254", "8.8.8.8", "2606:4700::1111", "fe80::1%eth0", "", "::", "garbage",
	} {
		f.Add(s)
	}
	g, err := New([]string{"example.com"}, []string{"10.0.0.0/8", "fd00::/8"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		if err := g.CheckIP(ip); err != nil {
			if !errors.Is(err, ErrBlocked) {
				t.Fatalf("CheckIP(%s) error does not wrap ErrBlocked: %v", s, err)
			}
			_ = err.Error()
		}
		// The mapped form must get the same verdict as the plain IPv4.
		if ip.Is4() {
			mapped := netip.AddrFrom16(ip.As16())
			if (g.CheckIP(ip) == nil) != (g.CheckIP(mapped) == nil) {
				t.Fatalf("verdict differs for %s and %s", ip, mapped)
			}
		}
		_ = g.hostAllowed(s)
		_, _ = parseAllowCIDR(s)
	})
}
