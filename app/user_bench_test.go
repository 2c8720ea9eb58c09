package app_test

// A signed-up user's REST requests on a whole node (app.New via apptest:
// default rules, durable SQLite), one at a time through the server's
// handler, so the numbers are the server's own CPU and allocations: a get
// of one of the user's documents and a create in the user's collection.
// Every request carries the user's access token, so both include its
// verification.
//
//	go test -run '^$' -bench 'UserREST' -benchmem ./app/

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
)

func BenchmarkUserREST(b *testing.B) {
	s := apptest.Start(b, apptest.Options{})
	ctx := context.Background()
	tok, err := s.Auth.Signup(ctx, "bench-user", apptest.Password)
	if err != nil {
		b.Fatal(err)
	}
	id, err := s.Auth.Authenticate(ctx, tok.AccessToken)
	if err != nil {
		b.Fatal(err)
	}
	const docs = 1000
	ws := make([]collections.Write, 0, docs)
	for i := range docs {
		ws = append(ws, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("users/%s/items/u%05d", id.UID, i),
			Data: map[string]any{"n": i, "group": fmt.Sprintf("g%d", i%20), "text": "the quick brown fox jumps over the lazy dog"}})
	}
	if _, err := s.Store.Commit(ctx, "default", ws, collections.CommitOptions{}); err != nil {
		b.Fatal(err)
	}
	h := s.Server.Handler()
	api := "/api/v1/databases/default/documents/users/" + id.UID
	do := func(b *testing.B, method, url, body string, want int) {
		req := httptest.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			b.Fatalf("%s %s: %d %s", method, url, w.Code, w.Body)
		}
	}
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			do(b, http.MethodGet, fmt.Sprintf("%s/items/u%05d", api, i%docs), "", http.StatusOK)
		}
	})
	// Creates run in parallel so the group committer batches their fsyncs,
	// as under real load.
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				do(b, http.MethodPost, api+"/new", fmt.Sprintf(`{"n":%d,"group":"g%d","text":"the quick brown fox jumps over the lazy dog"}`, i, i%20), http.StatusCreated)
			}
		})
	})
}
