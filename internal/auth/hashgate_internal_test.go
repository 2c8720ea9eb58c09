package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHashGate_BoundsConcurrency(t *testing.T) {
	g, err := newHashGate(1, -1, nil) // one slot, no waiting
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g.slots <- struct{}{} // a hash in progress
	ran := false
	if err := g.run(ctx, func() { ran = true }); !errors.Is(err, ErrBusy) || ran {
		t.Fatalf("run with every slot busy: err=%v ran=%v, want ErrBusy without running", err, ran)
	}
	<-g.slots
	if err := g.run(ctx, func() { ran = true }); err != nil || !ran {
		t.Fatalf("run with a free slot: err=%v ran=%v", err, ran)
	}

	// A waiting caller gives up with its context.
	g, _ = newHashGate(1, time.Hour, nil)
	g.slots <- struct{}{}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.run(cctx, func() { t.Error("ran without a slot") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: err=%v, want context.Canceled", err)
	}
	// Waiters are counted while they wait, and exported.
	reg := prometheus.NewRegistry()
	g, _ = newHashGate(1, time.Hour, reg)
	g.slots <- struct{}{}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- g.run(wctx, func() {}) }()
	for deadline := time.Now().Add(10 * time.Second); waitingGauge(t, reg) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never showed in loom_auth_password_hashes_waiting")
		}
	}
	stop()
	<-done
	if n := waitingGauge(t, reg); n != 0 {
		t.Fatalf("waiting=%v after the waiter left, want 0", n)
	}
	// And the queue is bounded: past it callers are refused at once.
	g.waiting.Store(g.maxWaiting)
	if err := g.run(ctx, func() { t.Error("ran without a slot") }); !errors.Is(err, ErrBusy) {
		t.Fatalf("full queue: err=%v, want ErrBusy", err)
	}
	if g.waiting.Load() != g.maxWaiting {
		t.Errorf("waiting=%d after a refusal, want %d", g.waiting.Load(), g.maxWaiting)
	}
}

func waitingGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "loom_auth_password_hashes_waiting" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no loom_auth_password_hashes_waiting metric")
	return 0
}
