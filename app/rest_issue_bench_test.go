package app_test

// BenchmarkRESTIssueShape: the REST requests issue 18 compares with its
// peers, on a whole node (app.New via apptest: default rules, durable
// SQLite, triggers running), seeded once per run through the store's batch
// commit with 50 groups × 2,500 documents in bench/r1/items (indexed on
// group; LOOM_BENCH_PER_GROUP changes the 2,500) and a signed-up user's
// 5,000 documents in users/{uid}/items (20 groups, indexed on group).
//
//   - handler/…: one request at a time through the server's handler, no
//     sockets: the server's own CPU and allocations per request. Creates
//     run 32 per GOMAXPROCS in parallel so the group committer batches
//     their fsyncs as under real load.
//   - loopback/…: the same requests from 32 per GOMAXPROCS keep-alive
//     clients over 127.0.0.1 (as loom bench), reported as ops/s; allocs
//     include the Go HTTP client's.
//
// Each group has query (group == gN, limit 20: the issue's shape), get and
// create, each for the admin key and for the user's token under the default
// rules (its own documents).
//
//	go test -run '^$' -bench 'RESTIssueShape/handler' -benchmem ./app/
//
// (-bench matches each /-separated level on its own: handler/(query|get)/user,
// not handler/(query/user|get/user).)
//
// LOOM_BENCH_CPUPROFILE=dir writes a CPU profile of each sub-benchmark's
// timed part (seeding excluded) to dir/<name>.prof:
//
//	go test -c -o /tmp/app.test ./app/ && cd app && LOOM_BENCH_CPUPROFILE=/tmp/prof \
//	  /tmp/app.test -test.run '^$' -test.bench 'RESTIssueShape/handler/query/user' -test.benchmem
//	go tool pprof -top -cum /tmp/app.test /tmp/prof/BenchmarkRESTIssueShape_handler_query_user.prof

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
)

const (
	issueGroups     = 50 // values of group in bench/r1/items
	issueUserGroups = 20 // values of group in the user's items
	issueUserDocs   = 5000
	issueText       = "the quick brown fox jumps over the lazy dog"
	issueAPI        = "/api/v1/databases/default"
)

type issueShape struct {
	s       *apptest.Stack
	h       http.Handler
	token   string // the user's access token
	uid     string
	adminID []string // ids of bench/r1/items to get
	userID  []string // ids of users/{uid}/items to get
}

func startIssueShape(b *testing.B) *issueShape {
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
	e := &issueShape{s: s, h: s.Server.Handler(), token: tok.AccessToken, uid: id.UID}
	// Straight through the store's batch commit, 1,000 writes a commit:
	// the seed takes seconds, not the minutes REST creates would.
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
	add := func(path string, data map[string]any) {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: path, Data: data})
		if len(ws) == 1000 {
			flush()
		}
	}
	for i := range issueGroups * per {
		add(fmt.Sprintf("bench/r1/items/a%06d", i), map[string]any{"worker": i % 64, "n": i, "group": fmt.Sprintf("g%d", i%issueGroups), "text": issueText})
		if i%1000 == 0 {
			e.adminID = append(e.adminID, fmt.Sprintf("a%06d", i))
		}
	}
	for i := range issueUserDocs {
		add(fmt.Sprintf("users/%s/items/u%05d", e.uid, i), map[string]any{"n": i, "group": fmt.Sprintf("g%d", i%issueUserGroups), "text": issueText})
		if i%50 == 0 {
			e.userID = append(e.userID, fmt.Sprintf("u%05d", i))
		}
	}
	flush()
	return e
}

// issueRequest is one kind of request; url and body get a running number.
type issueRequest struct {
	name   string
	admin  bool
	method string
	want   int
	url    func(e *issueShape, i int) string
	body   func(e *issueShape, i int) string // nil: no body
}

func createBody(_ *issueShape, i int) string {
	return fmt.Sprintf(`{"worker":%d,"n":%d,"group":"g%d","text":%q}`, i%64, i, i%issueGroups, issueText)
}

var issueRequests = []issueRequest{
	{"query/admin", true, "POST", http.StatusOK, func(*issueShape, int) string { return issueAPI + "/query" }, func(_ *issueShape, i int) string {
		return fmt.Sprintf(`{"collection":"bench/r1/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, i%issueGroups)
	}},
	{"query/user", false, "POST", http.StatusOK, func(*issueShape, int) string { return issueAPI + "/query" }, func(e *issueShape, i int) string {
		return fmt.Sprintf(`{"collection":"users/%s/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, e.uid, i%issueUserGroups)
	}},
	{"get/admin", true, "GET", http.StatusOK, func(e *issueShape, i int) string {
		return fmt.Sprintf("%s/documents/bench/r1/items/%s", issueAPI, e.adminID[i%len(e.adminID)])
	}, nil},
	{"get/user", false, "GET", http.StatusOK, func(e *issueShape, i int) string {
		return fmt.Sprintf("%s/documents/users/%s/items/%s", issueAPI, e.uid, e.userID[i%len(e.userID)])
	}, nil},
	// Creates go to other collections than the queried ones, so the
	// queries see the same data whatever ran before them.
	{"create/admin", true, "POST", http.StatusCreated, func(*issueShape, int) string { return issueAPI + "/documents/bench/w/items" }, createBody},
	{"create/user", false, "POST", http.StatusCreated, func(e *issueShape, _ int) string { return issueAPI + "/documents/users/" + e.uid + "/created" }, createBody},
}

func (r issueRequest) bearer(e *issueShape) string {
	if r.admin {
		return apptest.AdminKey
	}
	return e.token
}

func (r issueRequest) bodyOf(e *issueShape, i int) string {
	if r.body == nil {
		return ""
	}
	return r.body(e, i)
}

// serve runs one request through the handler.
func (e *issueShape) serve(r issueRequest, i int) error {
	var body io.Reader
	if s := r.bodyOf(e, i); s != "" {
		body = strings.NewReader(s)
	}
	req := httptest.NewRequest(r.method, r.url(e, i), body)
	req.Header.Set("Authorization", "Bearer "+r.bearer(e))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	if w.Code != r.want {
		return fmt.Errorf("%s %s: %d %s", r.method, req.URL, w.Code, w.Body)
	}
	return nil
}

// send runs one request over loopback HTTP.
func (e *issueShape) send(c *http.Client, r issueRequest, i int) error {
	var body io.Reader
	if s := r.bodyOf(e, i); s != "" {
		body = strings.NewReader(s)
	}
	req, err := http.NewRequest(r.method, e.s.URL+r.url(e, i), body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.bearer(e))
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != r.want {
		return fmt.Errorf("%s %s: %d", r.method, req.URL, res.StatusCode)
	}
	return nil
}

// profileTimed writes a CPU profile of b's timed part to
// $LOOM_BENCH_CPUPROFILE/<name>.prof when that is set.
func profileTimed(b *testing.B) {
	dir := os.Getenv("LOOM_BENCH_CPUPROFILE")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_")+".prof"))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}

func BenchmarkRESTIssueShape(b *testing.B) {
	e := startIssueShape(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	for _, r := range issueRequests {
		b.Run("handler/"+r.name, func(b *testing.B) {
			b.ReportAllocs()
			profileTimed(b)
			if r.method == "POST" && r.want == http.StatusCreated {
				var n atomic.Int64
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := e.serve(r, int(n.Add(1))); err != nil {
							b.Error(err)
							return
						}
					}
				})
				return
			}
			for i := 0; b.Loop(); i++ {
				if err := e.serve(r, i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, r := range issueRequests {
		b.Run("loopback/"+r.name, func(b *testing.B) {
			b.ReportAllocs()
			profileTimed(b)
			var n atomic.Int64
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := e.send(client, r, int(n.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
