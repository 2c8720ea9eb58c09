package server_test

import (
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/server"
)

// BenchmarkSignupFlood measures what a signup flood does to everyone else:
// LOOM_FLOOD_READERS clients read a document in a closed loop for
// LOOM_FLOOD_SECONDS while LOOM_FLOOD_CLIENTS flooders sign up new accounts
// as fast as they can, on a real server with production bcrypt cost. The
// phases: no flood; a flood with the signup limit and hashing bound off
// (8fad697's behaviour); a flood from one address; a flood from a new
// address every request (which no per-address limit stops: only the
// hashing bound does), with the default bound (half the CPUs) and with one
// slot per CPU. Run it once:
//
//	go test -run '^$' -bench SignupFlood -benchtime 1x ./server/
func BenchmarkSignupFlood(b *testing.B) {
	seconds := envInt("LOOM_FLOOD_SECONDS", 5)
	flooders := envInt("LOOM_FLOOD_CLIENTS", 64)
	readers := envInt("LOOM_FLOOD_READERS", 8)
	unlimited := func(c *auth.Config) { c.MaxConcurrentHashes = 1 << 20 }
	phases := []struct {
		name     string
		flood    bool
		oneAddr  bool
		edit     func(*auth.Config)
		scfg     server.Config
		describe string
	}{
		{name: "no-flood"},
		{name: "flood-unlimited", flood: true, edit: unlimited, scfg: server.Config{SignupRate: -1}},
		{name: "flood-one-address", flood: true, oneAddr: true},
		{name: "flood-many-addresses", flood: true},
		{name: "flood-many-addresses-all-cpus", flood: true, edit: func(c *auth.Config) { c.MaxConcurrentHashes = runtime.GOMAXPROCS(0) }},
	}
	for _, p := range phases {
		b.Run(p.name, func(b *testing.B) {
			for range b.N {
				p.scfg.TrustedProxies = []string{"127.0.0.1"}
				// The general per-client limit (20,000/s) is not what is
				// measured: the readers alone would reach it.
				p.scfg.RateLimit = -1
				runSignupFlood(b, p.edit, p.scfg, p.flood, p.oneAddr, time.Duration(seconds)*time.Second, flooders, readers)
			}
		})
	}
}

func runSignupFlood(b *testing.B, edit func(*auth.Config), scfg server.Config, flood, oneAddr bool, d time.Duration, flooders, readers int) {
	env := newAuthEnvWith(b, func(c *auth.Config) {
		c.BcryptCost = bcrypt.DefaultCost
		if edit != nil {
			edit(c)
		}
	}, scfg)
	reader := env.signupAs(b, "reader")
	doc := api + "/documents/users/" + reader.UID + "/notes/n1"
	if r := env.Do(b, "PUT", doc, `{"doc":{"text":"hello"}}`, reader.h()); r.Status != http.StatusCreated {
		b.Fatalf("seed: %d %s", r.Status, r.Body)
	}

	stop := make(chan struct{})
	// untilStop calls f until stop is closed or f returns false.
	untilStop := func(f func() bool) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !f() {
				return
			}
		}
	}
	var statuses sync.Map // status → *atomic.Int64
	count := func(status int) {
		v, _ := statuses.LoadOrStore(status, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	if flood {
		for range flooders {
			wg.Go(func() {
				untilStop(func() bool {
					n := next.Add(1)
					addr := "198.18.0.1"
					if !oneAddr {
						addr = fmt.Sprintf("198.18.%d.%d", n/250%250, n%250+1)
					}
					r := env.Do(b, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":"flood%d","password":"correct horse battery"}`, n), from(addr))
					count(r.Status)
					return true
				})
			})
		}
	}
	lat := make([][]time.Duration, readers)
	start := time.Now()
	for i := range readers {
		wg.Go(func() {
			untilStop(func() bool {
				t0 := time.Now()
				r := env.Do(b, "GET", doc, "", reader.h())
				if r.Status != http.StatusOK {
					b.Errorf("reader: %d %s", r.Status, r.Body)
					return false
				}
				lat[i] = append(lat[i], time.Since(t0))
				return true
			})
		})
	}
	time.Sleep(d)
	close(stop)
	elapsed := time.Since(start) // flooders may still wait for a hashing slot
	wg.Wait()

	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(float64(len(all))*p))]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	per := func(status int) float64 {
		if v, ok := statuses.Load(status); ok {
			return float64(v.(*atomic.Int64).Load()) / elapsed.Seconds()
		}
		return 0
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "reads/s")
	var sum time.Duration
	for _, l := range all {
		sum += l
	}
	mean := time.Duration(0)
	if len(all) > 0 {
		mean = sum / time.Duration(len(all))
	}
	b.ReportMetric(ms(mean), "read-mean-ms")
	b.ReportMetric(ms(pct(0.50)), "read-p50-ms")
	b.ReportMetric(ms(pct(0.99)), "read-p99-ms")
	b.ReportMetric(per(http.StatusOK), "signups/s")
	b.ReportMetric(per(http.StatusTooManyRequests), "429/s")
	b.ReportMetric(per(http.StatusServiceUnavailable), "503/s")
	var codes []string
	statuses.Range(func(k, v any) bool {
		codes = append(codes, fmt.Sprintf("%d×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	b.Logf("%d readers, %d flooders for %v: %d reads, mean %v p50 %v p99 %v max %v; signup statuses %s",
		readers, flooders, d, len(all), mean, pct(0.5), pct(0.99), pct(1), strings.Join(codes, " "))
}

// signupAs signs up name from the loopback address and returns the user.
func (e *testEnv) signupAs(tb testing.TB, name string) user {
	tb.Helper()
	r := e.Do(tb, "POST", "/auth/v1/signup", fmt.Sprintf(`{"username":%q,"password":"correct horse battery"}`, name), anon)
	if r.Status != http.StatusOK {
		tb.Fatalf("signup %s: %d %s", name, r.Status, r.Body)
	}
	tok := r.JSON(tb)
	u := user{Name: name, Access: tok["access_token"].(string)}
	me := e.Do(tb, "GET", "/auth/v1/me", "", u.h()).JSON(tb)
	u.UID, _ = me["uid"].(string)
	return u
}
