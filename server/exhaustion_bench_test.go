package server_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// openRules are the default rules plus: anyone, anonymous included, may
// read and write open/*.
func openRules(t testing.TB) *rules.Set {
	t.Helper()
	rs, err := rules.Parse([]byte(rules.DefaultSource()+`
[[rule]]
match = "open/{id}"
allow = ["read", "write"]
if    = "true"
`), "open.toml")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// randomMethod is n random capital letters: a valid, unknown method.
func randomMethod(n int) string {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

// heapInuse is the live heap after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func reportHeap(b *testing.B, before uint64, unit string) {
	after := heapInuse()
	d := float64(0)
	if after > before {
		d = float64(after - before)
	}
	b.ReportMetric(d/(1<<20), unit)
}

// BenchmarkExhaustion measures what anonymous or single-user clients can
// make the server hold (the server runs in the benchmark's process, so its
// heap is the process heap). Run it once (see BENCHMARKS.md):
//
//	go test -run '^$' -bench Exhaustion -benchtime 1x ./server/
//
// LOOM_EX_CONNS trickling connections (40), each announcing a 10 MiB body
// and sending 1 byte (or 2 MiB); LOOM_EX_METHODS requests (200) with 100 KB methods;
// one user opening LOOM_EX_WS connections (20) × 100 subscriptions.
func BenchmarkExhaustion(b *testing.B) {
	conns := envInt("LOOM_EX_CONNS", 40)
	b.Run("TricklingPUT/default-rules", func(b *testing.B) {
		env := MustStartServer(b, MustOpenStore(b), server.Config{})
		benchTrickle(b, env, conns, api+"/documents/users/u1/notes/n", 1)
	})
	b.Run("TricklingPUT/open-rules", func(b *testing.B) {
		env := MustStartServer(b, MustOpenStore(b), server.Config{Rules: openRules(b)})
		benchTrickle(b, env, conns, api+"/documents/open/d", 1)
	})
	b.Run("TricklingPUT/open-rules-2MiB-sent", func(b *testing.B) {
		env := MustStartServer(b, MustOpenStore(b), server.Config{Rules: openRules(b)})
		benchTrickle(b, env, conns, api+"/documents/open/d", 2<<20)
	})
	b.Run("HugeMethods", func(b *testing.B) {
		benchMethods(b, envInt("LOOM_EX_METHODS", 200))
	})
	b.Run("Subscriptions/one-user", func(b *testing.B) {
		benchSubscriptions(b, envInt("LOOM_EX_WS", 20))
	})
}

// benchTrickle opens n anonymous PUTs announcing 10 MiB that send sent
// bytes and stall, and reports the heap they hold once the server has
// them.
func benchTrickle(b *testing.B, env *testEnv, n int, path string, sent int) {
	chunk := []byte(`{"doc":{"x":"` + strings.Repeat("a", sent))[:sent]
	for range b.N {
		before := heapInuse()
		cs := make([]net.Conn, n)
		for i := range cs {
			c, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			cs[i] = c
			fmt.Fprintf(c, "PUT %s%d HTTP/1.1\r\nHost: loom\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, i, 10<<20)
			go func() { _, _ = c.Write(chunk) }() // a refused body fails the write
		}
		time.Sleep(2 * time.Second) // let every handler read what was sent
		reportHeap(b, before, "heapMB")
		for _, c := range cs {
			c.Close()
		}
	}
}

// benchMethods sends n anonymous requests with random 100 KB methods and
// reports the size of /metrics and the heap left behind.
func benchMethods(b *testing.B, n int) {
	env := MustStartServer(b, MustOpenStore(b), server.Config{})
	for range b.N {
		before := heapInuse()
		for range n {
			c, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "%s /health HTTP/1.1\r\nHost: loom\r\nConnection: close\r\n\r\n", randomMethod(100<<10))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
		reportHeap(b, before, "heapMB")
		res, err := http.Get(env.URL + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		size, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		b.ReportMetric(float64(size)/(1<<20), "metricsMB")
	}
}

// benchSubscriptions has one anonymous client open ws connections with 100
// subscriptions each (as many as the server accepts) and reports how many
// were accepted and the heap they hold.
func benchSubscriptions(b *testing.B, ws int) {
	env := MustStartServer(b, MustOpenStore(b), server.Config{Rules: openRules(b)})
	for range b.N {
		before := heapInuse()
		accepted := 0
		var cs []*websocket.Conn
		for i := range ws {
			c, _, err := (&websocket.Dialer{}).Dial("ws"+strings.TrimPrefix(env.URL, "http")+"/realtime/ws", nil)
			if err != nil {
				b.Fatal(err)
			}
			cs = append(cs, c)
			for j := range 100 {
				msg := fmt.Sprintf(`{"id":"s%d-%d","type":"subscribe","payload":{"query":{"collection":"open"}}}`, i, j)
				if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					b.Fatal(err)
				}
				_, reply, err := c.ReadMessage()
				if err != nil {
					b.Fatal(err)
				}
				if strings.Contains(string(reply), `"subscribe_ack"`) {
					accepted++
				}
			}
		}
		reportHeap(b, before, "heapMB")
		b.ReportMetric(float64(accepted), "subscriptions")
		for _, c := range cs {
			c.Close()
		}
	}
}
