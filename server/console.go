package server

import (
	"errors"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Serving the console's static files (Config.Console) under /console/. The
// page uses hash routing (/console/#/data/...), so only real files exist:
// no fallback to index.html, no directory listings.
const (
	routeConsole = "/console"
	// consoleIndex is served for /console/.
	consoleIndex = "index.html"
	// consoleCSP lets the page load only its own scripts, styles, images
	// and fonts and talk only to this server (CSP3 'self' covers the
	// same-origin ws:/wss: of the live tail); nothing inline, no framing.
	consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	// Cache lifetimes: content-hashed assets never change under their
	// name; everything else is revalidated; index.html, which names the
	// current assets, is never stored.
	cacheImmutable  = "public, max-age=31536000, immutable"
	cacheRevalidate = "no-cache"
	cacheNever      = "no-store"
)

// hashedAsset matches content-hashed names: esbuild's app.<HASH>.js (8+
// characters of [A-Z0-9], what console/build.mjs emits) or a lowercase hex
// hash of 8+ digits.
var hashedAsset = regexp.MustCompile(`\.([0-9A-Z]{8,}|[0-9a-f]{8,})\.(js|css)$`)

// consoleTypes fixes the Content-Type of the files a build emits, so it
// does not depend on the host's mime tables (and nothing is sniffed).
var consoleTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".mjs":   "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".json":  "application/json",
	".map":   "application/json",
	".svg":   "image/svg+xml",
	".png":   "image/png",
	".ico":   "image/x-icon",
	".woff2": "font/woff2",
	".txt":   "text/plain; charset=utf-8",
}

func (s *Server) consoleRoutes(r *gin.Engine) {
	home := func(c *gin.Context) { s.consoleRedirect(c, http.StatusFound) }
	r.GET("/", home)
	r.HEAD("/", home)
	// Paths are exact everywhere else (routes), so the one missing slash
	// a person types is redirected explicitly.
	slash := func(c *gin.Context) { s.consoleRedirect(c, http.StatusPermanentRedirect) }
	r.GET(routeConsole, slash)
	r.HEAD(routeConsole, slash)
	r.GET(routeConsole+"/*file", s.serveConsole)
	r.HEAD(routeConsole+"/*file", s.serveConsole)
}

// consoleRedirect sends the browser to /console/, or answers 404 as for an
// unknown route when the console is off.
func (s *Server) consoleRedirect(c *gin.Context, status int) {
	if s.console == nil {
		s.noRoute(c)
		return
	}
	consoleHeaders(c.Writer.Header())
	c.Redirect(status, routeConsole+"/")
}

// isConsolePath reports whether p is /console or under /console/.
func isConsolePath(p string) bool {
	return p == routeConsole || strings.HasPrefix(p, routeConsole+"/")
}

func (s *Server) noRoute(c *gin.Context) {
	s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "No route for %s %s.", truncate(c.Request.Method, 16), truncate(c.Request.URL.Path, 256)))
}

// consoleHeaders are set on every /console answer, errors and redirects
// included.
func consoleHeaders(h http.Header) {
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// serveConsole serves GET|HEAD /console/*file from Config.Console.
func (s *Server) serveConsole(c *gin.Context) {
	consoleHeaders(c.Writer.Header())
	if s.console == nil {
		s.noRoute(c)
		return
	}
	name := strings.TrimPrefix(c.Param("file"), "/")
	if name == "" {
		name = consoleIndex
	}
	// fs.ValidPath refuses "..", empty and "." elements and a leading or
	// trailing slash, so nothing outside the FS (or a directory named with
	// a slash) is reachable; directories are refused below.
	body, done, err := s.consoleFile(name)
	if err != nil {
		s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "No console file %q.", truncate(name, 256)))
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", consoleType(name))
	switch {
	case name == consoleIndex:
		h.Set("Cache-Control", cacheNever)
	case hashedAsset.MatchString(name):
		h.Set("Cache-Control", cacheImmutable)
	default:
		h.Set("Cache-Control", cacheRevalidate)
	}
	// ServeContent answers HEAD and Range; the embedded files carry no
	// modification time, so there is no Last-Modified to revalidate by.
	defer done()
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, body)
}

// errNotConsoleFile: a name that is not a regular file of the console FS.
var errNotConsoleFile = errors.New("not a console file")

// consoleFile opens a regular file of the console FS for serving; done
// closes it. The file is served in place, so a request holds no copy of it
// (a slow reader would otherwise pin one per connection): every fs.FS the
// console comes from (embed, os.DirFS, fstest.MapFS) opens files that can
// seek, which http.ServeContent needs for HEAD and Range anyway.
func (s *Server) consoleFile(name string) (body io.ReadSeeker, done func(), err error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, nil, errNotConsoleFile
	}
	f, err := s.console.Open(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	rs, seeks := f.(io.ReadSeeker)
	if err == nil && (!st.Mode().IsRegular() || !seeks) {
		err = errNotConsoleFile
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return rs, func() { f.Close() }, nil
}

// consoleType is the Content-Type of a console file by its extension.
func consoleType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := consoleTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}
