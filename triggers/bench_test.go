package triggers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkWebhookLatency measures commit-to-webhook latency: the time from
// Commit returning (the change is durable) to the receiver reading the
// signed request, at a steady rate of matched changes. Every change matches
// one trigger. Environment: LOOM_WH_RATE changes/s (1000), LOOM_WH_SECONDS
// (5), LOOM_WH_KEYS ordering keys (0 = no orderingKey).
//
//	go test -run '^$' -bench WebhookLatency -benchtime 1x ./triggers/
func BenchmarkWebhookLatency(b *testing.B) {
	rate := envInt("LOOM_WH_RATE", 1000)
	seconds := envInt("LOOM_WH_SECONDS", 5)
	keys := envInt("LOOM_WH_KEYS", 0)
	for i := 0; i < b.N; i++ {
		runWebhookLatency(b, rate, seconds, keys)
	}
}

func runWebhookLatency(b *testing.B, rate, seconds, keys int) {
	var mu sync.Mutex
	received := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		at := time.Now()
		var body struct {
			Event struct {
				ID string `json:"id"`
			} `json:"event"`
		}
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		if _, dup := received[body.Event.ID]; !dup {
			received[body.Event.ID] = at
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}
	defer transport.CloseIdleConnections()

	extra := ""
	if keys > 0 {
		extra = `, "orderingKey": "event.document.data.key"`
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "triggers.json")
	def := fmt.Sprintf(`[{"triggerId": "bench", "collection": "items", "events": ["create"], "condition": "event.document.data.n >= 0", "url": %q, "secret": %q%s}]`, srv.URL, testSecret, extra)
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		b.Fatal(err)
	}
	st := openStore(b, dir)
	defer st.Close()
	e := &pipeEnv{store: st, file: file}
	e.start(b, triggers.Config{Transport: transport})
	defer e.stop()

	total := rate * seconds
	committed := make([]time.Time, total)
	ids := make(chan int, total)
	var wg sync.WaitGroup
	// Enough concurrent writers that commit latency never limits the rate.
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				data := map[string]any{"n": i}
				if keys > 0 {
					data["key"] = "k" + strconv.Itoa(i%keys)
				}
				_, err := st.Commit(context.Background(), "default", []collections.Write{{
					Type: collections.WriteCreate, Path: "items/d" + strconv.Itoa(i), Data: data,
				}}, collections.CommitOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				committed[i] = time.Now()
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 0; i < total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		ids <- i
	}
	close(ids)
	wg.Wait()
	writeTime := time.Since(start)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(received)
		mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d webhooks arrived", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	lat := make([]time.Duration, 0, total)
	mu.Lock()
	for i := 0; i < total; i++ {
		// The receiver can read a request before the writer goroutine has
		// noted its commit time: that counts as zero latency.
		lat = append(lat, max(received["d"+strconv.Itoa(i)].Sub(committed[i]), 0))
	}
	mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(total)/writeTime.Seconds(), "commits/s")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "webhooks/s")
}
