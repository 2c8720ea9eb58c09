package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomdb/loom/app"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
)

type benchOptions struct {
	url, apiKey, db string
	clients         int
	duration        time.Duration
}

// bench load-tests the REST API: durable single-document creates, gets by
// path and indexed queries, each for a fixed duration with N concurrent
// keep-alive clients. Without --url it starts an embedded server on a
// temporary data directory (the same code path as loom serve).
func bench(ctx context.Context, args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("loom bench", flag.ContinueOnError)
	var o benchOptions
	fset.StringVar(&o.url, "url", "", "base URL of a running server (default: start an embedded one)")
	fset.StringVar(&o.apiKey, "api-key", os.Getenv("LOOM_ADMIN_KEY"), "admin API key for --url (env LOOM_ADMIN_KEY)")
	fset.StringVar(&o.db, "db", "default", "database name")
	fset.IntVar(&o.clients, "clients", 64, "concurrent clients")
	fset.DurationVar(&o.duration, "duration", 5*time.Second, "duration of each phase")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if o.clients < 1 || o.duration <= 0 {
		return fmt.Errorf("bench: --clients and --duration must be positive")
	}
	if o.url == "" {
		stop, url, key, err := startEmbedded(ctx)
		if err != nil {
			return err
		}
		defer stop()
		o.url, o.apiKey = url, key
	}
	b := &benchRun{opts: o, run: collections.NewID(), client: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: o.clients * 2, MaxIdleConnsPerHost: o.clients * 2},
	}}
	fmt.Fprintf(stdout, "loom bench: %s, %d clients, %s per phase, GOMAXPROCS=%d\n\n", o.url, o.clients, o.duration, runtime.GOMAXPROCS(0))
	fmt.Fprintln(stdout, "| phase | ops | ops/s | p50 | p99 | errors |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	for _, phase := range []struct {
		name string
		op   func(worker int, i int) error
	}{
		{"create (durable, REST)", b.create},
		{"get by path (REST)", b.get},
		{"query ==, limit 20 (REST)", b.query},
	} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := b.phase(ctx, phase.op)
		fmt.Fprintf(stdout, "| %s | %d | %.0f | %s | %s | %d |\n", phase.name, r.ops, r.rate, r.p50, r.p99, r.errors)
		if r.ops == 0 {
			return fmt.Errorf("bench: phase %q completed no operation (first error: %v)", phase.name, r.firstErr)
		}
	}
	return nil
}

// startEmbedded starts a node as loom serve would, on a temporary data
// directory with the bench's index, the agent runtime off and logs
// discarded, and returns its URL and admin key.
func startEmbedded(ctx context.Context) (stop func(), url, key string, err error) {
	dir, err := os.MkdirTemp("", "loom-bench-")
	if err != nil {
		return nil, "", "", err
	}
	cfg := config.Default()
	cfg.Data, cfg.Addr = dir, "127.0.0.1:0"
	cfg.Auth.AdminKey = "bench-" + collections.NewID()
	cfg.Indexes = []collections.Index{{Collection: "bench/*/items", Fields: []string{"group"}}}
	off := false
	cfg.Agents.Enabled = &off
	a, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.DiscardHandler), Version: version})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", "", err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(rctx)
	}()
	return func() {
		cancel()
		<-done
		a.Close()
		os.RemoveAll(dir)
	}, a.URL, cfg.Auth.AdminKey, nil
}

type benchRun struct {
	opts   benchOptions
	run    string
	client *http.Client

	mu  sync.Mutex
	ids []string
}

type phaseResult struct {
	ops, errors int64
	rate        float64
	p50, p99    time.Duration
	firstErr    error
}

func (b *benchRun) phase(ctx context.Context, op func(worker, i int) error) phaseResult {
	var (
		wg       sync.WaitGroup
		errs     atomic.Int64
		firstErr atomic.Value
		lat      = make([][]time.Duration, b.opts.clients)
	)
	deadline := time.Now().Add(b.opts.duration)
	start := time.Now()
	for w := 0; w < b.opts.clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := phaseResult{ops: int64(len(all)), errors: errs.Load(), rate: float64(len(all)) / elapsed.Seconds()}
	if e, ok := firstErr.Load().(error); ok {
		r.firstErr = e
	}
	if len(all) > 0 {
		r.p50 = all[len(all)*50/100].Round(10 * time.Microsecond)
		r.p99 = all[len(all)*99/100].Round(10 * time.Microsecond)
	}
	return r
}

func (b *benchRun) do(method, path string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequest(method, b.opts.url+"/api/v1/databases/"+b.opts.db+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+b.opts.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, out)
	}
	return out, nil
}

func (b *benchRun) create(w, i int) error {
	body := fmt.Appendf(nil, `{"worker":%d,"n":%d,"group":"g%d","text":"the quick brown fox jumps over the lazy dog"}`, w, i, i%50)
	out, err := b.do("POST", "/documents/bench/"+b.run+"/items", body, http.StatusCreated)
	if err != nil {
		return err
	}
	var doc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || doc.ID == "" {
		return fmt.Errorf("create: no id in %s", out)
	}
	b.mu.Lock()
	b.ids = append(b.ids, doc.ID)
	b.mu.Unlock()
	return nil
}

func (b *benchRun) randomID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ids[rand.IntN(len(b.ids))]
}

func (b *benchRun) get(w, i int) error {
	_, err := b.do("GET", "/documents/bench/"+b.run+"/items/"+b.randomID(), nil, http.StatusOK)
	return err
}

func (b *benchRun) query(w, i int) error {
	body := fmt.Appendf(nil, `{"collection":"bench/%s/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, b.run, rand.IntN(50))
	_, err := b.do("POST", "/query", body, http.StatusOK)
	return err
}
