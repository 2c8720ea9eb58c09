package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loomdb/loom/server"
)

// benchHandler measures one request at a time through the server's
// handler in process (no sockets, no HTTP client, admin key, real SQLite
// store): the server's own time and allocations per request, which
// BenchmarkREST's loopback clients blur. Gets, a 404 and a 400 (the error
// path), an == query with limit 10, and updates (durable commits).
//
//	go test -run '^$' -bench 'Handler' -benchtime 2s ./server/
func benchHandler(b *testing.B, cfg server.Config) {
	if cfg.AdminKey == "" {
		cfg.AdminKey = testAdminKey
	}
	srv, err := server.New(MustOpenStore(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	do := func(b *testing.B, method, url, body string, want int) {
		var req *http.Request
		if body != "" {
			req = httptest.NewRequest(method, url, strings.NewReader(body))
		} else {
			req = httptest.NewRequest(method, url, nil)
		}
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		// A PUT that creates answers 200 under [compat] syntrix.
		if w.Code != want && !(want == 201 && w.Code == 200) {
			b.Fatalf("%s %s: %d %s", method, url, w.Code, w.Body)
		}
	}
	for i := 0; i < 200; i++ {
		do(b, "PUT", fmt.Sprintf("%s/documents/items/i%d", api, i), fmt.Sprintf(`{"doc":{"n":%d,"kind":"k%d","title":"item %d"}}`, i, i%10, i), 201)
	}
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			do(b, "GET", fmt.Sprintf("%s/documents/items/i%d", api, i%200), "", 200)
		}
	})
	b.Run("get404", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			do(b, "GET", api+"/documents/items/missing", "", 404)
		}
	})
	b.Run("badquery400", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			do(b, "POST", api+"/query", `{"collection":"items","filters":[{"field":"kind","op":"~~","value":1}]}`, 400)
		}
	})
	b.Run("query", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			do(b, "POST", api+"/query", fmt.Sprintf(`{"collection":"items","filters":[{"field":"kind","op":"==","value":"k%d"}],"limit":10}`, i%10), 200)
		}
	})
	b.Run("update", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			do(b, "PUT", fmt.Sprintf("%s/documents/items/i%d", api, i%200), fmt.Sprintf(`{"doc":{"n":%d,"kind":"k%d"}}`, i, i%10), 200)
		}
	})
}

func BenchmarkHandler(b *testing.B) { benchHandler(b, server.Config{}) }

// BenchmarkHandlerCompat is BenchmarkHandler under [compat] syntrix (the
// query answers a bare array with X-Next-Cursor; errors in Syntrix's form).
func BenchmarkHandlerCompat(b *testing.B) { benchHandler(b, server.Config{SyntrixCompat: true}) }
