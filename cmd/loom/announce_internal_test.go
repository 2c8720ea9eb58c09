package main

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/internal/config"
)

// The console's address is one a browser opens: the server's own URL, not
// a wildcard listen address; with the console off it is not announced.
func TestAnnounce_ConsoleURL(t *testing.T) {
	a := &app.App{
		Config: config.Default(),
		Addr:   &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080},
		URL:    "http://127.0.0.1:8080",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	var out bytes.Buffer
	announce(&out, a)
	if !strings.Contains(out.String(), "Console: http://127.0.0.1:8080/console/ ") {
		t.Fatalf("announce:\n%s\nwant the console at http://127.0.0.1:8080/console/", out.String())
	}
	a.Config.Console.Enabled = false
	out.Reset()
	announce(&out, a)
	if strings.Contains(out.String(), "Console:") {
		t.Fatalf("announce with the console off:\n%s", out.String())
	}
}
