//go:build unix

package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/server"
)

// BenchmarkRxDBPullStreamFanout measures RxDB pullStream fan-out:
// LOOM_RX_STREAMS open pullStreams (admin key), LOOM_RX_FANOUT of them on
// each collection, and LOOM_RX_RATE single-document creates per second for
// LOOM_RX_SECONDS, round-robin over the collections (every document is
// new, so every stream of its collection receives it exactly once). It
// reports the write→client latency (from just before Store.Commit to the
// client reading the event), the process CPU time per commit (server and
// the in-process clients, from the first write until every event is in),
// and delivered documents/s. Run it once:
//
//	go test -run '^$' -bench RxDBPullStreamFanout -benchtime 1x ./server/
//	LOOM_RX_STREAMS=2000 LOOM_RX_FANOUT=10 LOOM_RX_RATE=500 go test ...
func BenchmarkRxDBPullStreamFanout(b *testing.B) {
	streams := envInt("LOOM_RX_STREAMS", 500)
	fanout := min(envInt("LOOM_RX_FANOUT", 5), streams)
	rate := envInt("LOOM_RX_RATE", 200)
	seconds := envInt("LOOM_RX_SECONDS", 3)
	colls := streams / fanout
	streams = colls * fanout
	env := MustStartServer(b, MustOpenStore(b), server.Config{RateLimit: -1})

	// Open the streams, 64 at a time; each reader counts documents.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	total := rate * seconds
	want := int64(total) * int64(fanout)
	var received atomic.Int64
	allIn := make(chan struct{})
	lat := make([][]time.Duration, streams)
	var open, readers sync.WaitGroup
	sem := make(chan struct{}, 64)
	var openErr atomic.Value
	tKey := []byte(`"t":`)
	for i := range streams {
		open.Add(1)
		readers.Add(1)
		sem <- struct{}{}
		go func() {
			defer readers.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", env.URL+rxBase(fmt.Sprintf("c%d", i%colls))+"/pullStream", nil)
			req.Header.Set("Authorization", "Bearer "+testAdminKey)
			res, err := client.Do(req)
			<-sem
			if err != nil || res.StatusCode != http.StatusOK {
				openErr.Store(fmt.Errorf("open stream %d: %v", i, err))
				open.Done()
				return
			}
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			// The first line is the connected comment: the stream is open.
			sc.Scan()
			open.Done()
			for sc.Scan() {
				m := sc.Bytes()
				for {
					j := bytes.Index(m, tKey)
					if j < 0 {
						break
					}
					m = m[j+len(tKey):]
					end := bytes.IndexAny(m, ",}")
					ns, err := parseNanos(m[:end])
					if err != nil {
						continue
					}
					lat[i] = append(lat[i], time.Since(time.Unix(0, ns)))
					if received.Add(1) == want {
						close(allIn)
					}
				}
			}
		}()
	}
	open.Wait()
	if err, _ := openErr.Load().(error); err != nil {
		b.Fatal(err)
	}

	// Paced writers.
	jobs := make(chan int, 1024)
	var writers sync.WaitGroup
	for range 32 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range jobs {
				data := map[string]any{"t": json.Number(strconv.FormatInt(time.Now().UnixNano(), 10))}
				_, err := env.Store.Commit(context.Background(), "default", []collections.Write{{
					Type: collections.WriteCreate, Path: fmt.Sprintf("c%d/d%d", i%colls, i), Data: data,
				}}, collections.CommitOptions{})
				if err != nil {
					b.Errorf("commit: %v", err)
					return
				}
			}
		}()
	}
	cpu0 := cpuTime(b)
	b.ResetTimer()
	start := time.Now()
	paceJobs(jobs, start, total, rate)
	writers.Wait()
	writeDur := time.Since(start)
	select {
	case <-allIn:
	case <-time.After(rtGuard):
		b.Errorf("received %d of %d documents", received.Load(), want)
	}
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	cancel()
	readers.Wait()

	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(ms(pct(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(pct(all, 0.99)), "p99-ms")
	b.ReportMetric(ms(cpu)/float64(total), "cpu-ms/commit")
	b.ReportMetric(cpu.Seconds()/elapsed.Seconds(), "cores")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "docs/s")
	b.ReportMetric(float64(total)/writeDur.Seconds(), "writes/s")
	b.Logf("%d pullStreams, %d per collection, %d writes at %d/s: %d documents, write→client p50 %v p99 %v max %v; CPU %v (%.2f cores) over %v",
		streams, fanout, total, rate, len(all), pct(all, 0.5), pct(all, 0.99), pct(all, 1), cpu, cpu.Seconds()/elapsed.Seconds(), elapsed)
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
