package app_test

// BenchmarkRESTRead: the issue-18 read paths on a whole node (app.New via
// apptest, default rules, durable SQLite), one request at a time through
// the server's handler (no sockets: the server's own CPU and allocations).
// The query is the issue's: an indexed equality on group, limit 20, over
// 50 groups × 2,500 documents (LOOM_BENCH_PER_GROUP changes the 2,500).
//
//	go test -run '^$' -bench RESTRead -benchmem ./app/

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
)

const readBenchGroups = 50

type readBench struct {
	h       http.Handler
	token   string // the user's access token
	uid     string
	adminID []string // ids of bench/r1/items to get
	userID  []string // ids of users/{uid}/items to get
}

func startReadBench(b *testing.B) *readBench {
	per := 2500
	if v, err := strconv.Atoi(os.Getenv("LOOM_BENCH_PER_GROUP")); err == nil && v > 0 {
		per = v
	}
	s := apptest.Start(b, apptest.Options{Config: func(c *config.Config) {
		c.Indexes = append(c.Indexes,
			collections.Index{Collection: "bench/*/items", Fields: []string{"group"}},
			collections.Index{Collection: "users/*/items", Fields: []string{"group"}})
	}})
	ctx := context.Background()
	tok, err := s.Auth.Signup(ctx, "bench-user", apptest.Password)
	if err != nil {
		b.Fatal(err)
	}
	id, err := s.Auth.Authenticate(ctx, tok.AccessToken)
	if err != nil {
		b.Fatal(err)
	}
	e := &readBench{h: s.Server.Handler(), token: tok.AccessToken, uid: id.UID}
	var ws []collections.Write
	flush := func() {
		if len(ws) == 0 {
			return
		}
		if _, err := s.Store.Commit(ctx, "default", ws, collections.CommitOptions{}); err != nil {
			b.Fatal(err)
		}
		ws = ws[:0]
	}
	const text = "the quick brown fox jumps over the lazy dog"
	for i := 0; i < readBenchGroups*per; i++ {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("bench/r1/items/a%06d", i),
			Data: map[string]any{"worker": i % 64, "n": i, "group": fmt.Sprintf("g%d", i%readBenchGroups), "text": text}})
		if i%1000 == 0 {
			e.adminID = append(e.adminID, fmt.Sprintf("a%06d", i))
		}
		if len(ws) == 1000 {
			flush()
		}
	}
	// The user's own documents: 20 groups × 250 in users/{uid}/items.
	for i := 0; i < 5000; i++ {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/%s/items/u%05d", e.uid, i),
			Data: map[string]any{"n": i, "group": fmt.Sprintf("g%d", i%20), "text": text}})
		if i%50 == 0 {
			e.userID = append(e.userID, fmt.Sprintf("u%05d", i))
		}
		if len(ws) == 1000 {
			flush()
		}
	}
	flush()
	return e
}

func (e *readBench) do(b *testing.B, bearer, method, url, body string) {
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, url, strings.NewReader(body))
	} else {
		req = httptest.NewRequest(method, url, nil)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("%s %s: %d %s", method, url, w.Code, w.Body)
	}
}

func BenchmarkRESTRead(b *testing.B) {
	e := startReadBench(b)
	const api = "/api/v1/databases/default"
	for _, o := range []struct {
		name   string
		admin  bool
		method string
		url    func(i int) string
		body   func(i int) string
	}{
		{"query/admin", true, "POST", func(int) string { return api + "/query" }, func(i int) string {
			return fmt.Sprintf(`{"collection":"bench/r1/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, i%readBenchGroups)
		}},
		{"query/user", false, "POST", func(int) string { return api + "/query" }, func(i int) string {
			return fmt.Sprintf(`{"collection":"users/%s/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, e.uid, i%20)
		}},
		{"get/admin", true, "GET", func(i int) string {
			return fmt.Sprintf("%s/documents/bench/r1/items/%s", api, e.adminID[i%len(e.adminID)])
		}, nil},
		{"get/user", false, "GET", func(i int) string {
			return fmt.Sprintf("%s/documents/users/%s/items/%s", api, e.uid, e.userID[i%len(e.userID)])
		}, nil},
	} {
		bearer := e.token
		if o.admin {
			bearer = apptest.AdminKey
		}
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				body := ""
				if o.body != nil {
					body = o.body(i)
				}
				e.do(b, bearer, o.method, o.url(i), body)
			}
		})
	}
}
