package server_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/server"
)

// benchClients is the number of concurrent HTTP clients of BenchmarkREST.
const benchClients = 64

// BenchmarkREST measures the REST surface end to end over loopback HTTP
// with keep-alive clients and a real SQLite store (durable commits):
// parallel creates, gets by path and queries. Each reports ops/s.
func BenchmarkREST(b *testing.B) {
	env := MustStartServer(b, MustOpenStore(b), server.Config{})
	parallelism := (benchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)

	do := func(b *testing.B, method, url, body string, want int) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, env.URL+url, rd)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		res, err := env.Client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			b.Fatalf("%s %s: status %d, want %d", method, url, res.StatusCode, want)
		}
	}

	const seeded = 1000
	for i := 0; i < seeded; i++ {
		do(b, "PUT", fmt.Sprintf("%s/documents/items/i%d", api, i), fmt.Sprintf(`{"doc":{"n":%d,"kind":"k%d","title":"item %d"}}`, i, i%10, i), 201)
	}

	b.Run("create", func(b *testing.B) {
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				// A database of its own, so the query benchmark below
				// does not depend on how many creates ran.
				do(b, "POST", "/api/v1/databases/benchw/documents/bench", `{"text":"hello","n":1,"tags":["a","b"]}`, 201)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})

	b.Run("get", func(b *testing.B) {
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1) % seeded
				do(b, "GET", fmt.Sprintf("%s/documents/items/i%d", api, i), "", 200)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})

	b.Run("query", func(b *testing.B) {
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := n.Add(1) % 10
				do(b, "POST", api+"/query", fmt.Sprintf(`{"collection":"items","filters":[{"field":"kind","op":"==","value":"k%d"}],"limit":10}`, k), 200)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}
