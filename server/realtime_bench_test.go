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
	"syscall"
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
// connected subscribers (one subscription each, with the admin key),
// LOOM_RT_FANOUT of them on each collection, and LOOM_RT_RATE
// single-document writes per second for LOOM_RT_SECONDS, round-robin over
// the collections. It reports the write→client latency (from just before
// Store.Commit to the client reading the event; it includes the commit's
// fsync), commit latency, delivered events/s, and the CPU per event:
// cpu-us/event is the process's user+system CPU (getrusage) over the timed
// window divided by the events delivered, events/cpu-s its inverse (events
// per second per core). The process is the server, the writers' commits
// and the in-process clients, so it is an upper bound of the server's
// share; it does not depend on how busy the rest of the machine is. Run it
// once:
//
//	go test -run '^$' -bench 'RealtimeFanout$' -benchtime 1x ./server/
//	LOOM_RT_SUBS=5000 LOOM_RT_FANOUT=100 LOOM_RT_RATE=1000 LOOM_RT_SECONDS=10 go test ...
func BenchmarkRealtimeFanout(b *testing.B) {
	subs, fanout := fanoutShape()
	colls := subs / fanout
	env := MustStartServer(b, MustOpenStore(b), server.Config{})
	subscribers := make([]fanoutSubscriber, subs)
	for i := range subscribers {
		subscribers[i] = fanoutSubscriber{token: testAdminKey, collection: fmt.Sprintf("c%d", i%colls)}
	}
	runFanout(b, env, subscribers, colls, func(i int) string { return fmt.Sprintf("c%d/d%d", i%colls, i%97) })
}

// BenchmarkRealtimeFanoutUsers is BenchmarkRealtimeFanout with signed-up
// users under the default rules: LOOM_RT_SUBS/LOOM_RT_FANOUT users, each
// with LOOM_RT_FANOUT connections subscribed to its own users/{uid}/items
// (LOOM_RT_FANOUT=1: every subscriber its own user), so every event passes
// the rules check of its subscriber; the difference from the admin run's
// cpu-us/event is that check. The per-address stream and per-user
// subscription limits are off: every client connects from 127.0.0.1.
//
//	go test -run '^$' -bench 'RealtimeFanout' -benchtime 1x ./server/
func BenchmarkRealtimeFanoutUsers(b *testing.B) {
	subs, fanout := fanoutShape()
	users := subs / fanout
	store := MustOpenStore(b)
	svc := MustAuth(b, store, nil)
	env := MustStartServer(b, store, server.Config{Auth: svc, Realtime: server.RealtimeConfig{MaxStreamsPerIP: -1, MaxSubscriptionsPerUser: -1}})
	ctx := context.Background()
	uids := make([]string, users)
	subscribers := make([]fanoutSubscriber, subs)
	for u := range users {
		tok, err := svc.Signup(ctx, fmt.Sprintf("fan%d", u), "correct horse battery")
		if err != nil {
			b.Fatal(err)
		}
		id, err := svc.Authenticate(ctx, tok.AccessToken)
		if err != nil {
			b.Fatal(err)
		}
		uids[u] = id.UID
		for i := u; i < subs; i += users {
			subscribers[i] = fanoutSubscriber{token: tok.AccessToken, collection: "users/" + id.UID + "/items"}
		}
	}
	runFanout(b, env, subscribers, users, func(i int) string { return fmt.Sprintf("users/%s/items/d%d", uids[i%users], i%97) })
}

// fanoutShape is LOOM_RT_SUBS and LOOM_RT_FANOUT (at most the former).
func fanoutShape() (subs, fanout int) {
	subs = envInt("LOOM_RT_SUBS", 500)
	fanout = min(envInt("LOOM_RT_FANOUT", 50), subs)
	return subs, fanout
}

// fanoutSubscriber is one WebSocket connection with one subscription.
type fanoutSubscriber struct {
	token, collection string
}

// runFanout connects subscribers, then writes LOOM_RT_RATE documents per
// second for LOOM_RT_SECONDS (the i-th at path(i), round-robin over colls
// collections of equally many subscribers) and reports what
// BenchmarkRealtimeFanout describes.
func runFanout(b *testing.B, env *testEnv, subscribers []fanoutSubscriber, colls int, path func(i int) string) {
	rate := envInt("LOOM_RT_RATE", 200)
	seconds := envInt("LOOM_RT_SECONDS", 3)
	subs := len(subscribers)

	// Connect and subscribe, 64 at a time.
	conns := make([]*websocket.Conn, subs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var dialErr atomic.Value
	for i, s := range subscribers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, _, err := env.tryDialWS("", map[string]string{"Authorization": "Bearer " + s.token})
			if err != nil {
				dialErr.Store(err)
				return
			}
			sub, _ := json.Marshal(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"query": map[string]any{"collection": s.collection}}})
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
	want := int64(total) * int64(subs) / int64(colls)
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
					Type: collections.WriteReplace, Path: path(i), Data: data,
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
	cpu0 := processCPU(b)
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
	cpu := processCPU(b) - cpu0
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
	if len(all) > 0 && cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(all)), "cpu-us/event")
		b.ReportMetric(float64(len(all))/cpu.Seconds(), "events/cpu-s")
	}
	b.Logf("%d subscribers, %d per collection, %d writes at %d/s: %d events, write→client p50 %v p99 %v max %v; commit p50 %v p99 %v; process CPU %v over %v",
		subs, subs/colls, total, rate, len(all), pct(all, 0.5), pct(all, 0.99), pct(all, 1), pct(cl, 0.5), pct(cl, 0.99), cpu.Round(time.Millisecond), elapsed.Round(time.Millisecond))
}

// processCPU is the user+system CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
