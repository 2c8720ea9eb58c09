package server_test

import (
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/loomdb/loom/server"
)

// rawGet sends one request without following redirects.
func (e *testEnv) rawGet(t *testing.T, method, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var consoleSecurityHeaders = map[string]string{
	"Content-Security-Policy":    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Frame-Options":            "DENY",
	"Referrer-Policy":            "no-referrer",
	"X-Content-Type-Options":     "nosniff",
	"Cross-Origin-Opener-Policy": "same-origin",
}

func wantSecurityHeaders(t *testing.T, what string, res *http.Response) {
	t.Helper()
	for k, v := range consoleSecurityHeaders {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s: %s=%q, want %q", what, k, got, v)
		}
	}
}

func TestConsole_Serving(t *testing.T) {
	fsys := testConsoleFS()
	fsys["app.66KHRO7Y.js"] = &fstest.MapFile{Data: []byte(`export{}`)}
	env := newEnv(t, server.Config{Console: fsys})

	for _, tc := range []struct {
		path, typ, cache, body string
	}{
		{"/console/", "text/html; charset=utf-8", "no-store", string(fsys["index.html"].Data)},
		{"/console/index.html", "text/html; charset=utf-8", "no-store", string(fsys["index.html"].Data)},
		{"/console/app.0123abcd.js", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", `console.log("loom")`},
		{"/console/app.66KHRO7Y.js", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", `export{}`},
		{"/console/app.89abcdef01.css", "text/css; charset=utf-8", "public, max-age=31536000, immutable", `body{margin:0}`},
		{"/console/app.notahash.js", "text/javascript; charset=utf-8", "no-cache", `1`},
		{"/console/favicon.svg", "image/svg+xml", "no-cache", `<svg xmlns="http://www.w3.org/2000/svg"/>`},
		{"/console/assets/logo.png", "image/png", "no-cache", "\x89PNG\r\n\x1a\n"},
		{"/console/assets/fonts/inter.woff2", "font/woff2", "no-cache", "wOF2"},
	} {
		res := env.rawGet(t, "GET", tc.path)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d", tc.path, res.StatusCode)
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tc.typ {
			t.Errorf("GET %s: Content-Type=%q, want %q", tc.path, got, tc.typ)
		}
		if got := res.Header.Get("Cache-Control"); got != tc.cache {
			t.Errorf("GET %s: Cache-Control=%q, want %q", tc.path, got, tc.cache)
		}
		if got := body(t, res); got != tc.body {
			t.Errorf("GET %s: body %q, want %q", tc.path, got, tc.body)
		}
		wantSecurityHeaders(t, "GET "+tc.path, res)

		head := env.rawGet(t, "HEAD", tc.path)
		if head.StatusCode != http.StatusOK || head.Header.Get("Content-Type") != tc.typ || body(t, head) != "" {
			t.Errorf("HEAD %s: status %d type %q", tc.path, head.StatusCode, head.Header.Get("Content-Type"))
		}
		wantSecurityHeaders(t, "HEAD "+tc.path, head)
	}

	for path, want := range map[string]struct {
		status   int
		location string
	}{
		"/":        {http.StatusFound, "/console/"},
		"/console": {http.StatusPermanentRedirect, "/console/"},
	} {
		res := env.rawGet(t, "GET", path)
		if res.StatusCode != want.status || res.Header.Get("Location") != want.location {
			t.Errorf("GET %s: %d Location %q, want %d %q", path, res.StatusCode, res.Header.Get("Location"), want.status, want.location)
		}
		wantSecurityHeaders(t, "GET "+path, res)
		head := env.rawGet(t, "HEAD", path)
		if head.StatusCode != want.status || head.Header.Get("Location") != want.location {
			t.Errorf("HEAD %s: %d Location %q, want %d %q", path, head.StatusCode, head.Header.Get("Location"), want.status, want.location)
		}
		wantSecurityHeaders(t, "HEAD "+path, head)
	}
}

// Nothing but the FS's regular files is reachable: no directory listing,
// no traversal, no SPA fallback; every refusal is the JSON 404 with the
// security headers.
func TestConsole_ServingRefusals(t *testing.T) {
	env := newEnv(t, server.Config{Console: testConsoleFS()})
	for _, path := range []string{
		"/console/assets",
		"/console/assets/",
		"/console/assets/fonts/",
		"/console/missing.js",
		"/console/data/default/rooms",
		"/console/../server.go",
		"/console/..%2fserver.go",
		"/console/%2e%2e/%2e%2e/etc/passwd",
		"/console/assets/../index.html",
		"/console/./index.html",
		"/console//index.html",
		"/console/index.html/",
		"/console/%00",
	} {
		res := env.rawGet(t, "GET", path)
		if res.StatusCode == http.StatusOK {
			t.Errorf("GET %s: 200 %q", path, body(t, res))
			continue
		}
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: status %d, want 404", path, res.StatusCode)
		}
		if res.StatusCode == http.StatusNotFound {
			if b := body(t, res); !strings.Contains(b, `"code":"NOT_FOUND"`) {
				t.Errorf("GET %s: body %s, want the JSON 404", path, b)
			}
		}
	}
	res := env.rawGet(t, "GET", "/console/nope")
	wantSecurityHeaders(t, "a 404", res)
	res = env.rawGet(t, "POST", "/console/index.html")
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/index.html: %d, want 405", res.StatusCode)
	}
	wantSecurityHeaders(t, "a 405", res)
}

// Without Config.Console (or [console] enabled = false) every console route
// and the session API answer 404.
func TestConsole_Off(t *testing.T) {
	env := newAuthEnv(t, server.Config{})
	for _, path := range []string{"/", "/console", "/console/", "/console/index.html"} {
		res := env.rawGet(t, "GET", path)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with the console off: %d, want 404", path, res.StatusCode)
		}
	}
	for _, path := range []string{"session", "refresh", "logout", "sessions/revoke-all"} {
		r := env.Do(t, "POST", "/admin/v1/console/"+path, `{}`, nil)
		wantStatus(t, path+" with the console off", r, http.StatusNotFound)
	}
	// Auth off (server-only): the session API is 404 even with the FS.
	noAuth := newEnv(t, server.Config{Console: testConsoleFS()})
	r := noAuth.Do(t, "POST", "/admin/v1/console/session", `{"adminKey":"`+testAdminKey+`"}`, anon)
	wantStatus(t, "session without auth", r, http.StatusNotFound)
}

// countingFS counts the bytes read from its files.
type countingFS struct {
	fstest.MapFS
	read *atomic.Int64
}

type countingFile struct {
	fs.File
	read *atomic.Int64
}

func (f countingFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.read.Add(int64(n))
	return n, err
}

func (f countingFile) Seek(off int64, whence int) (int64, error) {
	return f.File.(io.Seeker).Seek(off, whence)
}

func (c countingFS) Open(name string) (fs.File, error) {
	f, err := c.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.read}, nil
}

// A file of an FS that can seek (the embedded console) is served in place:
// a range of it reads that range, not a copy of the whole file per request.
func TestConsole_ServingReadsInPlace(t *testing.T) {
	fsys := testConsoleFS()
	fsys["big.txt"] = &fstest.MapFile{Data: []byte(strings.Repeat("x", 1<<20))}
	read := new(atomic.Int64)
	env := newEnv(t, server.Config{Console: countingFS{fsys, read}})
	req, err := http.NewRequest("GET", env.URL+"/console/big.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", "bytes=0-9")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b := body(t, res); res.StatusCode != http.StatusPartialContent || b != "xxxxxxxxxx" {
		t.Fatalf("range: %d %q", res.StatusCode, b)
	}
	wantSecurityHeaders(t, "a range", res)
	if n := read.Load(); n > 64<<10 {
		t.Errorf("serving 10 bytes read %d bytes of the file", n)
	}
}

// noSeekFS opens files that cannot seek.
type noSeekFS struct{ fstest.MapFS }

type noSeekFile struct{ f fs.File }

func (f noSeekFile) Read(p []byte) (int, error) { return f.f.Read(p) }
func (f noSeekFile) Stat() (fs.FileInfo, error) { return f.f.Stat() }
func (f noSeekFile) Close() error               { return f.f.Close() }

func (n noSeekFS) Open(name string) (fs.File, error) {
	f, err := n.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return noSeekFile{f}, nil
}

// A console FS whose files cannot seek is not copied into memory per
// request: its files are refused like missing ones.
func TestConsole_ServingRefusesUnseekableFiles(t *testing.T) {
	env := newEnv(t, server.Config{Console: noSeekFS{testConsoleFS()}})
	res := env.rawGet(t, "GET", "/console/")
	if b := body(t, res); res.StatusCode != http.StatusNotFound || !strings.Contains(b, `"code":"NOT_FOUND"`) {
		t.Fatalf("GET /console/ from an FS that cannot seek: %d %s, want the JSON 404", res.StatusCode, b)
	}
	wantSecurityHeaders(t, "a 404", res)
}
