package auth

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waitersPerSlot bounds the callers queued for a hashing slot, per slot.
// Past it a caller is refused at once. Waiting costs no CPU, and a flooder
// kept waiting HashWait for its 503 is a flooder not sending more requests
// (refused at once, it comes back at once: BENCHMARKS.md, signup flood), so
// the queue is long; each waiter holds only a goroutine and a small body.
const waitersPerSlot = 128

// hashGate bounds concurrent bcrypt work (signup hashing, login
// comparisons). Each costs tens of milliseconds of one CPU on purpose; run
// without a bound, a flood of them takes every CPU and makes every other
// request wait. A caller waits for a slot at most HashWait (and never past
// its context), then gets ErrBusy.
type hashGate struct {
	slots      chan struct{}
	wait       time.Duration
	waiting    atomic.Int64
	maxWaiting int64
	inFlight   prometheus.Gauge
	rejected   prometheus.Counter
}

func newHashGate(slots int, wait time.Duration, reg prometheus.Registerer) (*hashGate, error) {
	g := &hashGate{
		slots:      make(chan struct{}, slots),
		wait:       wait,
		maxWaiting: int64(slots) * waitersPerSlot,
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loom_auth_password_hashes_in_flight",
			Help: "bcrypt hashes and comparisons running now (bounded by [auth] max_concurrent_hashes).",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loom_auth_password_hashes_rejected_total",
			Help: "Signups and logins refused with 503 because every hashing slot stayed busy.",
		}),
	}
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_auth_password_hashes_waiting",
		Help: "Signups and logins waiting for a hashing slot (at most max_concurrent_hashes x 128).",
	}, func() float64 { return float64(g.waiting.Load()) })
	if reg != nil {
		for _, c := range []prometheus.Collector{g.inFlight, g.rejected, waiting} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("auth: register metrics: %w", err)
			}
		}
	}
	return g, nil
}

// run runs fn, a bcrypt operation, in a slot.
func (g *hashGate) run(ctx context.Context, fn func()) error {
	if err := g.acquire(ctx); err != nil {
		return err
	}
	g.inFlight.Inc()
	defer func() {
		g.inFlight.Dec()
		<-g.slots
	}()
	fn()
	return nil
}

func (g *hashGate) acquire(ctx context.Context) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
	}
	if g.wait <= 0 || g.waiting.Add(1) > g.maxWaiting {
		if g.wait > 0 {
			g.waiting.Add(-1)
		}
		g.rejected.Inc()
		return ErrBusy
	}
	defer g.waiting.Add(-1)
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("auth: waiting to hash a password: %w", ctx.Err())
	case <-timer.C:
		g.rejected.Inc()
		return ErrBusy
	}
}
