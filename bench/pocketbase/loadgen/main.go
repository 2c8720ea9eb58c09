// Command loadgen is the REST load generator of the Loom-vs-PocketBase
// side-by-side benchmark (bench/pocketbase/sidebyside.sh). The same code
// drives both targets; only the URL shapes and the Authorization header
// differ (-target loom or pb), so any cost of the generator itself lands
// equally in both measurements.
//
// It optionally seeds -seed documents (50 groups, 500 per batch request:
// Loom's /batch, PocketBase's /api/batch), then runs the -phases in order,
// each for -d with -clients concurrent keep-alive clients:
//
//	create  POST one document (group g0..g49, a number, a short text)
//	get     GET a random document made by this run's create phase
//	query   list 20 documents of a random group (Loom: POST /query with
//	        group == gN, limit 20; PocketBase: filter=group='gN',
//	        perPage=20, skipTotal=1 unless -skiptotal=false)
//
// For each phase it prints a Markdown row (target, phase, req/s, p50, p99,
// non-2xx, transport errors, first error) and a machine-readable RESULT
// line with, besides those, the server's CPU µs per request and cores used
// (utime+stime of /proc/<-pid>/stat at the phase's start and end; -1
// without -pid) and the same for the generator itself (/proc/self/stat).
//
// Flags: -target loom|pb, -url base URL, -token (Loom: sent as "Bearer
// <token>"; PocketBase: as is), -coll (Loom collection path such as
// bench/r1/items; PocketBase collection name), -owner (PocketBase owner
// relation value for a user-owned collection), -clients, -d, -seed,
// -phases (comma-separated; "none" only seeds), -skiptotal, -pid, -clktck.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	target  = flag.String("target", "loom", "server kind: loom or pb")
	base    = flag.String("url", "", "server base URL, e.g. http://127.0.0.1:8091")
	token   = flag.String("token", "", "Loom: bearer token (admin key or access token); pb: auth token")
	clients = flag.Int("clients", 64, "concurrent keep-alive clients per phase")
	dur     = flag.Duration("d", 5*time.Second, "duration of each phase")
	seedN   = flag.Int("seed", 0, "seed this many docs (50 groups) before the phases")
	phases  = flag.String("phases", "create,get,query", "comma-separated phases to run in order (none: only seed)")
	coll    = flag.String("coll", "", "Loom collection path / PocketBase collection name")
	owner   = flag.String("owner", "", "pb: owner id written into each doc of a user-owned collection")
	skipTot = flag.Bool("skiptotal", true, "pb: skipTotal=1")
	srvPID  = flag.Int("pid", 0, "server PID: read utime+stime from /proc/PID/stat at each phase's start and end and print the server's CPU µs per request")
	clkTck  = flag.Int("clktck", 100, "clock ticks per second of /proc/PID/stat (getconf CLK_TCK)")
)

// statusError is an answer with an unexpected HTTP status (counted apart
// from transport errors).
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// cpuTicks returns utime+stime of /proc/<pid>/stat ("self" for this
// process) in clock ticks, or -1 when it cannot be read.
func cpuTicks(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name "(...)": state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + st
}

// hc is shared by all clients; enough idle connections per host that every
// client keeps its own.
var hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

// do sends one request with the target's auth header and returns the body,
// or a *statusError when the status is not want.
func do(method, u string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if *target == "loom" {
		req.Header.Set("Authorization", "Bearer "+*token)
	} else {
		req.Header.Set("Authorization", *token)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != want {
		return nil, &statusError{res.StatusCode, fmt.Sprintf("%s %s: %d %s", method, u, res.StatusCode, b)}
	}
	return b, nil
}

// docBody is the document every create and seed writes.
func docBody(w, i int) map[string]any {
	m := map[string]any{"worker": w, "n": i, "group": fmt.Sprintf("g%d", i%50), "text": "the quick brown fox jumps over the lazy dog"}
	if *owner != "" {
		m["owner"] = *owner
	}
	return m
}

// ids holds the ids the create phase made; the get phase reads them.
var (
	mu  sync.Mutex
	ids []string
)

func create(w, i int) error {
	b, _ := json.Marshal(docBody(w, i))
	var u string
	want := 200
	if *target == "loom" {
		u, want = *base+"/api/v1/databases/default/documents/"+*coll, 201
	} else {
		u = *base + "/api/collections/" + *coll + "/records"
	}
	out, err := do("POST", u, b, want)
	if err != nil {
		return err
	}
	var d struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &d); err != nil || d.ID == "" {
		return fmt.Errorf("no id: %s", out)
	}
	mu.Lock()
	ids = append(ids, d.ID)
	mu.Unlock()
	return nil
}

func get(_, _ int) error {
	mu.Lock()
	id := ids[rand.IntN(len(ids))]
	mu.Unlock()
	if *target == "loom" {
		_, err := do("GET", *base+"/api/v1/databases/default/documents/"+*coll+"/"+id, nil, 200)
		return err
	}
	_, err := do("GET", *base+"/api/collections/"+*coll+"/records/"+id, nil, 200)
	return err
}

func query(_, _ int) error {
	g := rand.IntN(50)
	if *target == "loom" {
		b := fmt.Appendf(nil, `{"collection":%q,"filters":[{"field":"group","op":"==","value":"g%d"}],"limit":20}`, *coll, g)
		_, err := do("POST", *base+"/api/v1/databases/default/query", b, 200)
		return err
	}
	q := url.Values{}
	q.Set("filter", fmt.Sprintf("group='g%d'", g))
	q.Set("perPage", "20")
	if *skipTot {
		q.Set("skipTotal", "1")
	}
	_, err := do("GET", *base+"/api/collections/"+*coll+"/records?"+q.Encode(), nil, 200)
	return err
}

func seed(n int) error {
	const per = 500
	for start := 0; start < n; start += per {
		var body []byte
		if *target == "loom" {
			var ws []map[string]any
			for i := start; i < min(n, start+per); i++ {
				ws = append(ws, map[string]any{"type": "create", "path": fmt.Sprintf("%s/s%07d", *coll, i), "data": docBody(i%64, i)})
			}
			body, _ = json.Marshal(map[string]any{"writes": ws})
			if _, err := do("POST", *base+"/api/v1/databases/default/batch", body, 200); err != nil {
				return err
			}
		} else {
			var rs []map[string]any
			for i := start; i < min(n, start+per); i++ {
				rs = append(rs, map[string]any{"method": "POST", "url": "/api/collections/" + *coll + "/records", "body": docBody(i%64, i)})
			}
			body, _ = json.Marshal(map[string]any{"requests": rs})
			if _, err := do("POST", *base+"/api/batch", body, 200); err != nil {
				return err
			}
		}
	}
	return nil
}

// phase runs op from every client until -d has passed and prints the
// phase's row and RESULT line. op gets the client number and a request
// number unique within the phase.
func phase(name string, op func(w, i int) error) {
	var wg sync.WaitGroup
	var errs, non2xx atomic.Int64
	var first atomic.Value
	lat := make([][]time.Duration, *clients)
	srv0, gen0 := int64(-1), cpuTicks("self")
	if *srvPID > 0 {
		srv0 = cpuTicks(strconv.Itoa(*srvPID))
	}
	deadline := time.Now().Add(*dur)
	start := time.Now()
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				t0 := time.Now()
				if err := op(w, w*1000000+i); err != nil {
					if _, ok := err.(*statusError); ok {
						non2xx.Add(1)
					} else {
						errs.Add(1)
					}
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	srv1, gen1 := int64(-1), cpuTicks("self")
	if *srvPID > 0 {
		srv1 = cpuTicks(strconv.Itoa(*srvPID))
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	p := func(q float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[int(float64(len(all))*q)].Round(10 * time.Microsecond)
	}
	// CPU per request over every answered request (ok + non-2xx); a phase
	// with non-2xx answers or errors is not a valid number anyway.
	done := float64(len(all)) + float64(non2xx.Load())
	perReq := func(a, b int64) float64 {
		if a < 0 || b < 0 || done == 0 {
			return -1
		}
		return float64(b-a) * 1e6 / float64(*clkTck) / done
	}
	cores := func(a, b int64) float64 {
		if a < 0 || b < 0 {
			return -1
		}
		return float64(b-a) / float64(*clkTck) / el.Seconds()
	}
	rps := float64(len(all)) / el.Seconds()
	fmt.Printf("| %s | %s | %.0f | %v | %v | %d | %d |", *target, name, rps, p(0.5), p(0.99), non2xx.Load(), errs.Load())
	if f := first.Load(); f != nil {
		fmt.Printf(" first error: %.200s", f)
	}
	fmt.Println()
	// Machine-readable line for sidebyside.sh.
	fmt.Printf("RESULT target=%s phase=%s rps=%.1f ok=%d non2xx=%d errs=%d p50_us=%d p99_us=%d srv_cpu_us_per_req=%.1f srv_cores=%.2f gen_cpu_us_per_req=%.1f gen_cores=%.2f secs=%.2f\n",
		*target, name, rps, len(all), non2xx.Load(), errs.Load(), p(0.5).Microseconds(), p(0.99).Microseconds(),
		perReq(srv0, srv1), cores(srv0, srv1), perReq(gen0, gen1), cores(gen0, gen1), el.Seconds())
}

func main() {
	flag.Parse()
	if (*target != "loom" && *target != "pb") || *base == "" || *coll == "" || *clients < 1 {
		fmt.Fprintln(os.Stderr, "usage: loadgen -target loom|pb -url URL -token TOKEN -coll COLLECTION [flags]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	if *seedN > 0 {
		t := time.Now()
		if err := seed(*seedN); err != nil {
			fmt.Fprintln(os.Stderr, "seed:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "seeded %d in %v\n", *seedN, time.Since(t))
	}
	for _, ph := range strings.Split(*phases, ",") {
		switch ph {
		case "create":
			phase("create", create)
		case "get":
			if len(ids) == 0 {
				fmt.Fprintln(os.Stderr, "get needs the create phase")
				continue
			}
			phase("get", get)
		case "query":
			phase("query", query)
		case "none", "":
		default:
			fmt.Fprintf(os.Stderr, "unknown phase %q\n", ph)
			os.Exit(2)
		}
	}
}
