package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
	mix, user       bool
	seed, userSeed  int
}

// benchIndexes are the indexes the bench's queries need: the embedded
// server declares them; a server under --url needs them as [[index]]
// entries (deploy/loom.toml has them), or the query phases measure scans.
var benchIndexes = []collections.Index{
	{Collection: "bench/*/items", Fields: []string{"group"}},
	{Collection: "bench/*/items", Fields: []string{"group", "n"}},
	{Collection: "users/*/items", Fields: []string{"group"}},
}

const benchUsage = `loom bench load-tests the REST API: each phase runs for --duration with
--clients concurrent keep-alive clients and prints ops/s, p50, p99, errors and
CPU/op: the server's CPU per operation from process_cpu_seconds_total of its
/metrics, read before and after the phase (embedded, the server shares its
process with the load generator, so it counts both: use --url for the
server's alone).
Default phases (admin key): create, get by path, query ==, limit 20.

--mix adds the query mix over a fixed data set it seeds after those phases,
so they measure the same with or without it, through /batch (500 writes a
batch; --seed documents in bench/<run>-mix/items, 50 values of "group",
so --seed 125000 gives 2,500 matches a value): ==, limit 20; == with orderBy n
desc; a collection-group query bench/*/items; in with 3 values; and a
signed-up user's own documents (--user-seed in users/<uid>/items, 20 groups)
under the default rules with the user's token.

--user adds create and get phases with a signed-up user's token
(users/<uid>/items, default rules).

Indexes: the embedded server declares them. A server under --url needs these
[[index]] entries in its loom.toml (deploy/loom.toml has them), or the query
phases measure scans; before each query phase the bench times a few serial
probes and warns when they look like scans:
  collection = "bench/*/items", fields = ["group"]
  collection = "bench/*/items", fields = ["group", "n"]
  collection = "users/*/items", fields = ["group"]

Flags:
`

// bench load-tests the REST API: durable single-document creates, gets by
// path and indexed queries, each for a fixed duration with N concurrent
// keep-alive clients. Without --url it starts an embedded server on a
// temporary data directory (the same code path as loom serve).
func bench(ctx context.Context, args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("loom bench", flag.ContinueOnError)
	fset.Usage = func() {
		fmt.Fprint(fset.Output(), benchUsage)
		fset.PrintDefaults()
	}
	var o benchOptions
	fset.StringVar(&o.url, "url", "", "base URL of a running server (default: start an embedded one)")
	fset.StringVar(&o.apiKey, "api-key", os.Getenv("LOOM_ADMIN_KEY"), "admin API key for --url (env LOOM_ADMIN_KEY)")
	fset.StringVar(&o.db, "db", "default", "database name")
	fset.IntVar(&o.clients, "clients", 64, "concurrent clients")
	fset.DurationVar(&o.duration, "duration", 5*time.Second, "duration of each phase")
	fset.BoolVar(&o.mix, "mix", false, "add the query mix phases over a seeded data set (see above)")
	fset.BoolVar(&o.user, "user", false, "add create and get phases with a signed-up user's token")
	fset.IntVar(&o.seed, "seed", 125_000, "documents --mix seeds in bench/<run>-mix/items")
	fset.IntVar(&o.userSeed, "user-seed", 5_000, "documents --mix seeds in the user's users/<uid>/items")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if o.clients < 1 || o.duration <= 0 {
		return fmt.Errorf("bench: --clients and --duration must be positive")
	}
	if o.mix && (o.seed < benchGroups || o.userSeed < benchUserGroups) {
		return fmt.Errorf("bench: --seed must be at least %d and --user-seed at least %d", benchGroups, benchUserGroups)
	}
	embedded := o.url == ""
	if embedded {
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
	b.admin = b.opts.apiKey
	fmt.Fprintf(stdout, "loom bench: %s, %d clients, %s per phase, GOMAXPROCS=%d\n\n", o.url, o.clients, o.duration, runtime.GOMAXPROCS(0))
	if embedded {
		fmt.Fprint(stdout, "CPU/op: this process's CPU per operation (process_cpu_seconds_total of /metrics); embedded, that is the server and the load generator: --url measures a server's alone\n\n")
	} else {
		fmt.Fprint(stdout, "CPU/op: the server's CPU per operation (process_cpu_seconds_total of its /metrics, read before and after each phase)\n\n")
	}
	var notes, warnings []string
	fmt.Fprintln(stdout, "| phase | ops | ops/s | p50 | p99 | CPU/op | errors |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|")
	for _, p := range b.phases() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p.setup != nil {
			note, err := p.setup(ctx)
			if err != nil {
				return err
			}
			if note != "" {
				notes = append(notes, note)
			}
		}
		if p.probe != nil {
			if w := b.probe(ctx, p.name, p.probe); w != "" {
				warnings = append(warnings, w)
			}
		}
		cpu0, err0 := b.serverCPU()
		r := b.phase(ctx, p.op)
		cpu1, err1 := b.serverCPU()
		perOp := "–"
		if err := errors.Join(err0, err1); err != nil {
			warnings = append(warnings, fmt.Sprintf("phase %q: no CPU/op: %v", p.name, err))
		} else if n := r.ops + r.errors; n > 0 {
			perOp = fmt.Sprintf("%.0f µs", (cpu1-cpu0)*1e6/float64(n))
		}
		fmt.Fprintf(stdout, "| %s | %d | %.0f | %s | %s | %s | %d |\n", p.name, r.ops, r.rate, r.p50, r.p99, perOp, r.errors)
		if r.ops == 0 {
			return fmt.Errorf("bench: phase %q completed no operation (first error: %v)", p.name, r.firstErr)
		}
		if r.errors > 0 {
			warnings = append(warnings, fmt.Sprintf("phase %q: %d errors, the first: %v", p.name, r.errors, r.firstErr))
		}
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, "\n"+n)
	}
	for _, w := range warnings {
		fmt.Fprintln(stdout, "\nwarning:", w)
	}
	return nil
}

const (
	benchGroups     = 50 // values of "group" in the bench's items
	benchUserGroups = 20 // values of "group" in the user's items
)

// seedMix seeds --mix's documents (after the create, get and query
// phases, which then measure the same with or without --mix).
func (b *benchRun) seedMix(ctx context.Context) (string, error) {
	t0 := time.Now()
	if err := b.seedDocs(ctx, b.admin, b.mixItems(), b.opts.seed, benchGroups); err != nil {
		return "", err
	}
	return fmt.Sprintf("seeded %d documents in %s through /batch in %s", b.opts.seed, b.mixItems(), time.Since(t0).Round(time.Millisecond)), nil
}

// seedUser signs up the bench's user and seeds its documents.
func (b *benchRun) seedUser(ctx context.Context) (string, error) {
	if _, err := b.ensureUser(ctx); err != nil {
		return "", err
	}
	t0 := time.Now()
	coll := "users/" + b.uid + "/items"
	if err := b.seedDocs(ctx, b.userToken, coll, b.opts.userSeed, benchUserGroups); err != nil {
		return "", err
	}
	return fmt.Sprintf("seeded %d documents in %s through /batch (user token) in %s", b.opts.userSeed, coll, time.Since(t0).Round(time.Millisecond)), nil
}

// ensureUser signs up the bench's user unless it has.
func (b *benchRun) ensureUser(ctx context.Context) (string, error) {
	if b.userToken != "" {
		return "", nil
	}
	return "", b.signup(ctx)
}

// mixItems is the collection --mix seeds: apart from the one the create
// phase writes, so that neither depends on the other.
func (b *benchRun) mixItems() string { return "bench/" + b.run + "-mix/items" }

type benchPhase struct {
	name string
	// setup, when set, runs before the phase, untimed (seeding); its note
	// is printed after the table.
	setup func(ctx context.Context) (note string, err error)
	op    func(worker, i int) error
	// probe, for a query phase, runs one query like the phase's (and one
	// for a value nothing has), serially, to tell an index from a scan.
	probe func(empty bool) error
}

func (b *benchRun) phases() []benchPhase {
	ps := []benchPhase{
		{name: "create (durable, REST)", op: b.create},
		{name: "get by path (REST)", op: b.get},
		{name: "query ==, limit 20 (REST)", op: b.query},
	}
	if b.opts.mix {
		items := b.mixItems()
		// value is one of n groups at random, or (empty) one no document has.
		value := func(n, offset int, empty bool) string {
			if empty {
				return `"none"`
			}
			return `"g` + strconv.Itoa((rand.IntN(n)+offset)%n) + `"`
		}
		eq := func(n int) func(bool) string {
			return func(empty bool) string { return `[{"field":"group","op":"==","value":` + value(n, 0, empty) + `}]` }
		}
		in3 := func(empty bool) string {
			v := value(benchGroups, 0, empty)
			return `[{"field":"group","op":"in","value":[` + v + `,` + value(benchGroups, 17, empty) + `,` + value(benchGroups, 34, empty) + `]}]`
		}
		mix := []struct {
			name, coll, order string
			user              bool // the user's token and users/<uid>/items
			filters           func(empty bool) string
			setup             func(ctx context.Context) (string, error)
		}{
			{"mix a: ==, limit 20", items, "", false, eq(benchGroups), b.seedMix},
			{"mix b: == orderBy n desc, limit 20", items, `[{"field":"n","direction":"desc"}]`, false, eq(benchGroups), nil},
			{"mix c: group bench/*/items ==, limit 20", "bench/*/items", "", false, eq(benchGroups), nil},
			{"mix d: in (3 values), limit 20", items, "", false, in3, nil},
			{"mix e: user's own ==, limit 20 (default rules)", "", "", true, eq(benchUserGroups), b.seedUser},
		}
		for _, m := range mix {
			q := func(empty bool) error {
				token, coll := b.admin, m.coll
				if m.user {
					token, coll = b.userToken, "users/"+b.uid+"/items"
				}
				body := `{"collection":"` + coll + `","filters":` + m.filters(empty) + `,"limit":20`
				if m.order != "" {
					body += `,"orderBy":` + m.order
				}
				return b.queryPage(token, []byte(body+"}"), !empty)
			}
			ps = append(ps, benchPhase{name: m.name, setup: m.setup, op: func(int, int) error { return q(false) }, probe: q})
		}
	}
	if b.opts.user {
		ps = append(ps,
			benchPhase{name: "user: create (durable, default rules)", setup: b.ensureUser, op: b.userCreate},
			benchPhase{name: "user: get by path (default rules)", op: b.userGet},
		)
	}
	return ps
}

// startEmbedded starts a node as loom serve would, on a temporary data
// directory with the bench's indexes, the agent runtime off and logs
// discarded, and returns its URL and admin key.
func startEmbedded(ctx context.Context) (stop func(), url, key string, err error) {
	dir, err := os.MkdirTemp("", "loom-bench-")
	if err != nil {
		return nil, "", "", err
	}
	cfg := config.Default()
	cfg.Data, cfg.Addr = dir, "127.0.0.1:0"
	cfg.Auth.AdminKey = "bench-" + collections.NewID()
	cfg.Indexes = slices.Clone(benchIndexes)
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
	// admin is the admin key; userToken the access token of the user
	// signed up for --mix and --user, uid its id.
	admin, userToken, uid string

	mu      sync.Mutex
	ids     []string
	userIDs []string
	groups  int // the create phase wrote groups g0…g<groups-1>
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

func (b *benchRun) do(token, method, path string, body []byte, want int) ([]byte, error) {
	return b.call(token, method, b.opts.url+"/api/v1/databases/"+b.opts.db+path, body, want)
}

func (b *benchRun) call(token, method, url string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
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
		return nil, fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, out)
	}
	return out, nil
}

const benchText = "the quick brown fox jumps over the lazy dog"

func (b *benchRun) create(w, i int) error {
	id, err := b.createIn(b.admin, "bench/"+b.run+"/items", w, i)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.ids = append(b.ids, id)
	b.groups = max(b.groups, min(i+1, benchGroups))
	b.mu.Unlock()
	return nil
}

func (b *benchRun) userCreate(w, i int) error {
	id, err := b.createIn(b.userToken, "users/"+b.uid+"/items", w, i)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.userIDs = append(b.userIDs, id)
	b.mu.Unlock()
	return nil
}

func (b *benchRun) createIn(token, coll string, w, i int) (string, error) {
	body := fmt.Appendf(nil, `{"worker":%d,"n":%d,"group":"g%d","text":%q}`, w, i, i%benchGroups, benchText)
	out, err := b.do(token, "POST", "/documents/"+coll, body, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var doc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || doc.ID == "" {
		return "", fmt.Errorf("create: no id in %s", out)
	}
	return doc.ID, nil
}

func randomOf(mu *sync.Mutex, ids []string) string {
	mu.Lock()
	defer mu.Unlock()
	return ids[rand.IntN(len(ids))]
}

func (b *benchRun) get(w, i int) error {
	_, err := b.do(b.admin, "GET", "/documents/bench/"+b.run+"/items/"+randomOf(&b.mu, b.ids), nil, http.StatusOK)
	return err
}

func (b *benchRun) userGet(w, i int) error {
	_, err := b.do(b.userToken, "GET", "/documents/users/"+b.uid+"/items/"+randomOf(&b.mu, b.userIDs), nil, http.StatusOK)
	return err
}

// query asks for a group the create phase wrote (a short phase may not
// have reached every group).
func (b *benchRun) query(w, i int) error {
	b.mu.Lock()
	groups := b.groups
	b.mu.Unlock()
	body := fmt.Appendf(nil, `{"collection":"bench/%s/items","filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, b.run, rand.IntN(groups))
	return b.queryPage(b.admin, body, true)
}

// queryPage runs one query and checks its answer: a 200 page, holding
// documents when nonEmpty (every query of a phase selects a value the
// seeded data has; a page without documents would measure nothing).
func (b *benchRun) queryPage(token string, body []byte, nonEmpty bool) error {
	out, err := b.do(token, "POST", "/query", body, http.StatusOK)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(out, []byte(`{"docs":[`)) {
		return fmt.Errorf("query %s: not a page: %.200s", body, out)
	}
	if nonEmpty && !bytes.HasPrefix(out, []byte(`{"docs":[{`)) {
		return fmt.Errorf("query %s: no documents", body)
	}
	return nil
}

// seedDocs writes n documents (ids s000000…, "group" g0…g<groups-1>,
// "n" 0…n-1) into coll through /batch, 500 writes a request, a few
// requests at a time so that the committer groups them.
func (b *benchRun) seedDocs(ctx context.Context, token, coll string, n, groups int) error {
	const perBatch, parallel = 500, 4
	batches := make(chan int)
	errc := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range batches {
				var body bytes.Buffer
				body.WriteString(`{"writes":[`)
				for i := first; i < min(first+perBatch, n); i++ {
					if i > first {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"type":"create","path":"%s/s%06d","data":{"worker":0,"n":%d,"group":"g%d","text":%q}}`, coll, i, i, i%groups, benchText)
				}
				body.WriteString(`]}`)
				if _, err := b.do(token, "POST", "/batch", body.Bytes(), http.StatusOK); err != nil {
					errc <- fmt.Errorf("bench: seed %s: %w", coll, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for first := 0; first < n; first += perBatch {
		select {
		case batches <- first:
		case err = <-errc:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(batches)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

// signup creates the bench's user (default roles, so the default rules
// give it users/<uid>/**) and keeps its access token and uid.
func (b *benchRun) signup(ctx context.Context) error {
	cred := fmt.Appendf(nil, `{"username":"bench-%s","password":"bench-%s"}`, strings.ToLower(b.run), collections.NewID())
	out, err := b.call("", "POST", b.opts.url+"/auth/v1/signup", cred, http.StatusOK)
	if err != nil {
		return fmt.Errorf("bench: sign up the bench user: %w", err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(out, &tok); err != nil || tok.AccessToken == "" {
		return fmt.Errorf("bench: signup: no access_token in %.200s", out)
	}
	out, err = b.call(tok.AccessToken, "GET", b.opts.url+"/auth/v1/me", nil, http.StatusOK)
	if err != nil {
		return fmt.Errorf("bench: the bench user's uid: %w", err)
	}
	var me struct {
		UID string `json:"uid"`
	}
	if err := json.Unmarshal(out, &me); err != nil || me.UID == "" {
		return fmt.Errorf("bench: /auth/v1/me: no uid in %.200s", out)
	}
	b.userToken, b.uid = tok.AccessToken, me.UID
	return nil
}

// scanSuspect is the serial probe time above which a query looks like a
// scan: an indexed page of 20 takes well under a millisecond, a scan of
// the seeded documents tens of milliseconds.
const scanSuspect = 5 * time.Millisecond

// probe times a phase's query serially (the fastest of three, for a value
// the data has and for one it has not: the latter is what a missing index
// makes slow, since a scan then reads every document) and returns a
// warning when it looks unindexed, or when the probe itself fails.
func (b *benchRun) probe(ctx context.Context, name string, q func(empty bool) error) string {
	var worst time.Duration
	for _, empty := range []bool{false, true} {
		best := time.Duration(math.MaxInt64)
		for range 3 {
			if ctx.Err() != nil {
				return ""
			}
			t0 := time.Now()
			if err := q(empty); err != nil {
				return fmt.Sprintf("phase %q: probe failed: %v", name, err)
			}
			best = min(best, time.Since(t0))
		}
		worst = max(worst, best)
	}
	if worst > scanSuspect {
		return fmt.Sprintf("phase %q: a serial probe took %s, as a scan would: the server lacks an [[index]] of loom bench -h, or its engine uses none for this query", name, worst.Round(10*time.Microsecond))
	}
	return ""
}

// serverCPU reads the server process's CPU seconds so far (user + system,
// process_cpu_seconds_total) from its /metrics, with the admin key in case
// the server requires one there. Read before and after a phase, it gives
// the server's CPU per operation, which unlike ops/s does not depend on
// how much of the machine the load generator takes.
func (b *benchRun) serverCPU() (float64, error) {
	out, err := b.call(b.admin, "GET", b.opts.url+"/metrics", nil, http.StatusOK)
	if err != nil {
		return 0, err
	}
	return processCPU(out)
}

// processCPU finds process_cpu_seconds_total in a Prometheus text
// exposition.
func processCPU(metrics []byte) (float64, error) {
	const name = "process_cpu_seconds_total "
	for line := range bytes.SplitSeq(metrics, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(name)); ok {
			return strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		}
	}
	return 0, errors.New("/metrics has no process_cpu_seconds_total")
}
