package webhooks_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// BenchmarkAgentHop measures the runtime's overhead per hop — a document
// write, its trigger, the handler's reads and writes over the REST API, up
// to the next document write — with the offline model (no LLM time). A run
// has six hops; each is timed from the commit time of the document that
// fired it to the commit time of the first document the handler wrote
// (server timestamps, ms). Next to the times it reports what a run costs
// the store: writes/run (change-log entries), commits/run (SQLite
// transactions, each one fsync) and commit-requests/run (the requests those
// transactions grouped: every Docs write, delivery record and outbox row).
// Environment: LOOM_AGENT_RUNS (30) chats,
// LOOM_AGENT_CONC (1) at a time.
//
//	go test -run '^$' -bench AgentHop -benchtime 1x ./webhooks/
func BenchmarkAgentHop(b *testing.B) {
	runs := envInt("LOOM_AGENT_RUNS", 30)
	conc := envInt("LOOM_AGENT_CONC", 1)
	for i := 0; i < b.N; i++ {
		// One user runs every chat: the per-user limits (3 queries at a
		// time) are not what this measures.
		s := startStack(b, stackOpts{userConcurrentRuns: -1, userTokensPerDay: -1})
		var mu sync.Mutex
		hops := map[string][]time.Duration{}
		var total, doc []time.Duration
		sem := make(chan struct{}, conc)
		var wg sync.WaitGroup
		before := s.storeCost(b)
		b.ResetTimer()
		start := time.Now()
		for r := 0; r < runs; r++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				chat := "b" + strconv.Itoa(r)
				t0 := time.Now()
				s.say(chat, "m1", "What is 6*7?")
				// Polled every millisecond: with the tests' waitFor (20 ms) a
				// run measured 21 or 42 ms as it took a little less or more
				// than 20.
				for deadline := t0.Add(30 * time.Second); s.get(s.chat(chat)+"/messages/m1-t0-result") == nil; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						b.Errorf("run %s: timed out\n%s", chat, s.dump())
						return
					}
				}
				h, err := runHops(s, chat)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				for k, v := range h {
					hops[k] = append(hops[k], v)
				}
				total = append(total, time.Since(t0))
				doc = append(doc, h[runHop])
				mu.Unlock()
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		cost := s.storeCost(b).minus(before)
		var all []time.Duration
		for name, ds := range hops {
			if name == runHop {
				continue
			}
			slices.Sort(ds)
			all = append(all, ds...)
			b.Logf("hop %-34s p50 %4d ms  p99 %4d ms", name, pct(ds, 0.5).Milliseconds(), pct(ds, 0.99).Milliseconds())
		}
		slices.Sort(all)
		slices.Sort(total)
		slices.Sort(doc)
		b.ReportMetric(float64(pct(all, 0.5).Microseconds())/1000, "hop-p50-ms")
		b.ReportMetric(float64(pct(all, 0.99).Microseconds())/1000, "hop-p99-ms")
		b.ReportMetric(float64(pct(total, 0.5).Microseconds())/1000, "run-p50-ms")
		// The run by the server's clock: the user message's commit to the
		// answer's (ms resolution).
		b.ReportMetric(float64(pct(doc, 0.5).Microseconds())/1000, "run-commits-p50-ms")
		b.ReportMetric(float64(runs)/elapsed.Seconds(), "runs/s")
		b.ReportMetric(float64(cost.writes)/float64(runs), "writes/run")
		b.ReportMetric(float64(cost.commits)/float64(runs), "commits/run")
		b.ReportMetric(float64(cost.requests)/float64(runs), "commit-requests/run")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// runHop is runHops' entry for the whole run, not a hop.
const runHop = "run"

// runHops reads the six hops of a finished run from document timestamps.
func runHops(s *stack, chat string) (map[string]time.Duration, error) {
	c := s.chat(chat)
	sa := c + "/sub-agents/m1-t0"
	get := func(p string) (*collections.Document, error) {
		d := s.get(p)
		if d == nil {
			return nil, fmt.Errorf("%s missing", p)
		}
		return d, nil
	}
	paths := []string{c + "/messages/m1", c + "/messages/m1-reply", c + "/tasks/m1-t0", sa + "/messages/m000001",
		sa + "/messages/m000002", sa + "/messages/m000003", sa + "/messages/m000004", c + "/messages/m1-t0-result"}
	d := make([]*collections.Document, len(paths))
	for i, p := range paths {
		var err error
		if d[i], err = get(p); err != nil {
			return nil, err
		}
	}
	calls := s.docs(sa + "/tool-calls")
	if len(calls) != 1 {
		return nil, fmt.Errorf("%d tool calls", len(calls))
	}
	ms := func(from, to int64) time.Duration { return time.Duration(to-from) * time.Millisecond }
	msg, reply, task, first, step, tool, final, result := d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
	return map[string]time.Duration{
		"user message → orchestrator reply":  ms(msg.CreatedAt, reply.CreatedAt),
		"task → agent-init (sub-agent user)": ms(task.CreatedAt, first.CreatedAt),
		"user → agent-loop step":             ms(first.CreatedAt, step.CreatedAt),
		"tool call → tool-runner result":     ms(calls[0].CreatedAt, tool.CreatedAt),
		"tool result → agent-loop final":     ms(tool.CreatedAt, final.CreatedAt),
		"task done → finalize answer":        ms(task.UpdatedAt, result.CreatedAt),
		runHop:                               ms(msg.CreatedAt, result.CreatedAt),
	}, nil
}

// storeCost is what the node's store has done so far: its change-log head
// (writes), and its committer's transactions (commits) and the requests
// they grouped, from the loom_sqlite_commit_batch_requests histogram.
type storeCost struct{ writes, commits, requests int64 }

func (c storeCost) minus(o storeCost) storeCost {
	return storeCost{c.writes - o.writes, c.commits - o.commits, c.requests - o.requests}
}

func (s *stack) storeCost(b *testing.B) storeCost {
	b.Helper()
	var c storeCost
	var err error
	if c.writes, err = s.store.Head(context.Background()); err != nil {
		b.Fatal(err)
	}
	mfs, err := s.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "loom_sqlite_commit_batch_requests" {
			continue
		}
		for _, m := range mf.GetMetric() {
			c.commits += int64(m.GetHistogram().GetSampleCount())
			c.requests += int64(m.GetHistogram().GetSampleSum())
		}
	}
	if c.commits == 0 {
		b.Fatal("the node exports no loom_sqlite_commit_batch_requests samples")
	}
	return c
}
