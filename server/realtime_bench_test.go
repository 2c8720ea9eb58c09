package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/server"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkRealtimeFanout measures WebSocket fan-out: LOOM_RT_SUBS
// connected subscribers (one subscription each), LOOM_RT_FANOUT of them on
// each collection, and LOOM_RT_RATE single-document writes per second for
// LOOM_RT_SECONDS, round-robin over the collections. It reports the
// write→client latency (from just before Store.Commit to the client
// reading the event; it includes the commit's fsync), commit latency, and
// delivered events/s. Run it once:
//
//	go test -run '^$' -bench RealtimeFanout -benchtime 1x ./server/
//	LOOM_RT_SUBS=5000 LOOM_RT_FANOUT=100 LOOM_RT_RATE=1000 LOOM_RT_SECONDS=10 go test ...
func BenchmarkRealtimeFanout(b *testing.B) {
	subs := envInt("LOOM_RT_SUBS", 500)
	fanout := envInt("LOOM_RT_FANOUT", 50)
	rate := envInt("LOOM_RT_RATE", 200)
	seconds := envInt("LOOM_RT_SECONDS", 3)
	if fanout > subs {
		fanout = subs
	}
	colls := subs / fanout
	env := MustStartServer(b, MustOpenStore(b), server.Config{})

	// Connect and subscribe, 64 at a time.
	conns := make([]*websocket.Conn, subs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var dialErr atomic.Value
	for i := range subs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, _, err := env.tryDialWS("", nil)
			if err != nil {
				dialErr.Store(err)
				return
			}
			sub, _ := json.Marshal(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"query": map[string]any{"collection": fmt.Sprintf("c%d", i%colls)}}})
			if err := c.WriteMessage(websocket.TextMessage, sub); err != nil {
				dialErr.Store(err)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(rtGuard))
			if _, m, err := c.ReadMessage(); err != nil || !bytes.Contains(m, []byte(`"subscribe_ack"`)) {
				dialErr.Store(fmt.Errorf("subscribe: %s %v", m, err))
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	if err, _ := dialErr.Load().(error); err != nil {
		b.Fatalf("connect: %v", err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	total := rate * seconds
	want := int64(total) * int64(colls*fanout) / int64(colls)
	var received atomic.Int64
	allIn := make(chan struct{})
	lat := make([][]time.Duration, subs)
	var readers sync.WaitGroup
	tKey := []byte(`"t":`)
	for i, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			// Read every message whole into one reused buffer: the client
			// side should cost as little as possible.
			var buf bytes.Buffer
			for {
				_ = c.SetReadDeadline(time.Now().Add(rtGuard))
				_, r, err := c.NextReader()
				if err != nil {
					return
				}
				buf.Reset()
				if _, err := buf.ReadFrom(r); err != nil {
					return
				}
				m := buf.Bytes()
				j := bytes.Index(m, tKey)
				if j < 0 {
					continue // heartbeat
				}
				rest := m[j+len(tKey):]
				end := bytes.IndexAny(rest, ",}")
				ns, err := parseNanos(rest[:end])
				if err != nil {
					continue
				}
				lat[i] = append(lat[i], time.Since(time.Unix(0, ns)))
				if received.Add(1) == want {
					close(allIn)
				}
			}
		}()
	}

	// Paced writers.
	jobs := make(chan int, 1024)
	commitLat := make([][]time.Duration, 32)
	var writers sync.WaitGroup
	for w := range commitLat {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range jobs {
				t0 := time.Now()
				data := map[string]any{"t": json.Number(strconv.FormatInt(t0.UnixNano(), 10))}
				_, err := env.Store.Commit(context.Background(), "default", []collections.Write{{
					Type: collections.WriteReplace, Path: fmt.Sprintf("c%d/d%d", i%colls, i%97), Data: data,
				}}, collections.CommitOptions{})
				if err != nil {
					b.Errorf("commit: %v", err)
					return
				}
				commitLat[w] = append(commitLat[w], time.Since(t0))
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	paceJobs(jobs, start, total, rate)
	writers.Wait()
	writeDur := time.Since(start)
	select {
	case <-allIn:
	case <-time.After(rtGuard):
		b.Errorf("received %d of %d events", received.Load(), want)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	all := slices.Concat(lat...)
	cl := slices.Concat(commitLat...)
	slices.Sort(all)
	slices.Sort(cl)
	b.ReportMetric(ms(pct(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(pct(all, 0.99)), "p99-ms")
	b.ReportMetric(ms(pct(cl, 0.99)), "commit-p99-ms")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(total)/writeDur.Seconds(), "writes/s")
	b.Logf("%d subscribers, %d per collection, %d writes at %d/s: %d events, write→client p50 %v p99 %v max %v; commit p50 %v p99 %v",
		subs, fanout, total, rate, len(all), pct(all, 0.5), pct(all, 0.99), pct(all, 1), pct(cl, 0.5), pct(cl, 0.99))
}

// parseNanos parses a decimal int64 without allocating.
func parseNanos(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 19 {
		return 0, strconv.ErrSyntax
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, strconv.ErrSyntax
		}
		n = n*10 + int64(ch-'0')
	}
	return n, nil
}

// paceJobs sends 0..total-1 on jobs at rate per second from start, then
// closes jobs.
func paceJobs(jobs chan<- int, start time.Time, total, rate int) {
	interval := time.Second / time.Duration(rate)
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
}

// pct is the p quantile of the sorted s (0 when s is empty).
func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
