package server_test

import (
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

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

// wantError checks an error answer: its status, the shape of README
// "Errors" and its code.
func wantError(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	wantStatus(t, what, r, status)
	var body struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Code != code {
		t.Fatalf("%s: code %q, want %s; body %s", what, body.Code, code, r.Body)
	}
}
