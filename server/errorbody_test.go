package server_test

import (
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/server"
)

// TestErrors_InternalOverHTTP: a request that fails inside the server is
// 500 INTERNAL on the wire, with the generic message only; the cause goes
// to the log under the request's id (README, Errors). The failure is real,
// not mocked: rows of the store's own SQLite file are corrupted behind its
// back (a document whose data is not JSON, one whose version is not a
// number), as a damaged disk or a foreign writer would leave them.
func TestErrors_InternalOverHTTP(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "loom.db")
	store := apptest.OpenSQLite(t, sqlite.Config{Path: file})
	var logs syncBuffer
	env := MustStartServer(t, store, server.Config{
		Auth:   MustAuth(t, store, nil),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	alice := env.signup(t, "alice")
	notes := api + "/documents/users/" + alice.UID + "/notes/"
	wantStatus(t, "seed", env.Do(t, "PUT", notes+"bad-data", `{"doc":{"text":"fine"}}`, alice.h()), http.StatusCreated)
	wantStatus(t, "seed", env.Do(t, "PUT", notes+"bad-version", `{"doc":{"text":"fine"}}`, alice.h()), http.StatusCreated)

	db, err := sql.Open("sqlite3", "file:"+file+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	corrupt := func(set, id string) {
		t.Helper()
		res, err := db.Exec(`UPDATE docs SET `+set+` WHERE path = ?`, "users/"+alice.UID+"/notes/"+id)
		if err != nil {
			t.Fatalf("corrupting %s: %v", id, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("corrupting %s: %d rows, want 1", id, n)
		}
	}
	corrupt(`data = '{"text": "half a secret'`, "bad-data")
	corrupt(`version = 'not a number'`, "bad-version")

	cases := []struct {
		name, method, url, body string
		headers                 map[string]string
	}{
		{"admin get of a corrupt document", "GET", notes + "bad-data", "", nil},
		{"owner get of a corrupt document", "GET", notes + "bad-data", "", alice.h()},
		{"owner patch of a corrupt document (the rules read it)", "PATCH", notes + "bad-data", `{"doc":{"n":1}}`, alice.h()},
		{"owner get of a document with a corrupt version", "GET", notes + "bad-version", "", alice.h()},
		{"admin query over corrupt rows", "POST", api + "/query", `{"collection":"users/` + alice.UID + `/notes"}`, nil},
		{"owner list over corrupt rows", "GET", api + "/documents/users/" + alice.UID + "/notes", "", alice.h()},
	}
	head := env.Head(t)
	for _, c := range cases {
		r := env.Do(t, c.method, c.url, c.body, c.headers)
		wantError(t, c.name, r, http.StatusInternalServerError, "INTERNAL")
		// Nothing of the cause reaches the client: not the engine, the
		// SQL error, the Go error text, the file or the stored bytes.
		if got := string(r.Body); got != `{"code":"INTERNAL","message":"Internal server error."}` {
			t.Errorf("%s: body %s, want only the generic INTERNAL message", c.name, got)
		}
		for _, leak := range []string{"sqlite", "sql:", "corrupt", "Scan", "converting", "invalid", "unexpected", "secret", "not a number", dir, "loom.db", ".go"} {
			for k, v := range r.Header {
				if strings.Contains(strings.Join(v, " "), leak) {
					t.Errorf("%s: header %s=%q leaks %q", c.name, k, v, leak)
				}
			}
		}
		// The cause is logged under the id the client got, so an operator
		// can find it.
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			t.Fatalf("%s: no X-Request-Id on the 500", c.name)
		}
		if !loggedFailure(t, logs.String(), id) {
			t.Errorf("%s: no \"request failed\" log line with request_id %s and the cause; log:\n%s", c.name, id, logs.String())
		}
	}
	if got := env.Head(t); got != head {
		t.Errorf("failed requests changed the change log: head %d → %d", head, got)
	}
	// The server is still serving: an intact document reads normally.
	wantStatus(t, "intact document after the failures", env.Do(t, "PUT", notes+"ok", `{"doc":{"text":"fine"}}`, alice.h()), http.StatusCreated)
}

// loggedFailure reports whether logs (slog JSON lines) hold the 500 of
// request id with its cause.
func loggedFailure(t *testing.T, logs, id string) bool {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "request failed" && m["request_id"] == id && m["status"] == float64(500) {
			cause, _ := m["err"].(string)
			return strings.Contains(cause, "corrupt document") || strings.Contains(cause, "Scan error")
		}
	}
	return false
}

// TestErrors_StreamLimitIsRateLimited: a stream over MaxStreamsPerIP is
// refused with the 429 of README "Errors", on every stream transport: code
// RATE_LIMITED, a message naming the limit, and Retry-After in whole
// seconds (TestRealtime_StreamsPerAddressAreLimited checks the counting).
func TestErrors_StreamLimitIsRateLimited(t *testing.T) {
	env := newAuthEnv(t, server.Config{Realtime: server.RealtimeConfig{MaxStreamsPerIP: 2}})
	u := env.signup(t, "streamer")
	notes := "users/" + u.UID + "/notes"
	env.dialWS(t, "", u.h())
	if line := <-openStream(t, env, u.h(), notes).lines; line != ": connected" {
		t.Fatalf("pullStream: first line %q, want the connected comment", line)
	}

	// A refused stream answers at once; a short timeout turns a stream
	// that was wrongly let in into a failure instead of a hang.
	short := &http.Client{Timeout: 5 * time.Second}
	limited := func(what string, r *response) {
		t.Helper()
		if msg, _ := r.JSON(t)["message"].(string); !strings.Contains(msg, "limit 2") {
			t.Errorf("%s: message %q does not name the limit", what, msg)
		}
	}

	c, res, err := env.tryDialWS("", u.h())
	if err == nil {
		c.Close()
		t.Fatal("WebSocket over the limit: dialled, want 429")
	}
	if res == nil {
		t.Fatalf("WebSocket over the limit: %v, want a 429 answer", err)
	}
	body, _ := io.ReadAll(res.Body) // the dialer keeps the start of a refused handshake's body
	ws := &response{Status: res.StatusCode, Header: res.Header, Body: body}
	wantError(t, "WebSocket over the limit", ws, http.StatusTooManyRequests, "RATE_LIMITED")
	limited("WebSocket over the limit", ws)

	sse := apptest.Send(t, short, env.URL+"/realtime/sse?collection="+notes, "GET", "", u.h())
	wantError(t, "SSE over the limit", sse, http.StatusTooManyRequests, "RATE_LIMITED")
	limited("SSE over the limit", sse)

	// RxDB's replication keeps Loom's code and adds "error": true.
	rx := apptest.Send(t, short, env.URL+rxBase(notes)+"/pullStream", "GET", "", u.h())
	wantRx(t, "pullStream over the limit", rx, http.StatusTooManyRequests)
	if code := rx.JSON(t)["code"]; code != "RATE_LIMITED" {
		t.Errorf("pullStream over the limit: code %v, want RATE_LIMITED; body %s", code, rx.Body)
	}
	if s, err := strconv.Atoi(rx.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("pullStream over the limit: Retry-After %q, want whole seconds ≥ 1", rx.Header.Get("Retry-After"))
	}
	limited("pullStream over the limit", rx)
}
