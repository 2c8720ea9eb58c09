package server

import (
	"fmt"
	"testing"
	"time"
)

// A limiter never tracks more than maxKeys clients, however many addresses
// an attacker rotates through, and forgets no client that still owes a wait
// before older ones.
func TestLimiters_Bounded(t *testing.T) {
	l := newLimiters(1.0/60, 2) // one per minute, burst 2
	l.maxKeys = 100
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.reserve("victim-of-its-own-flood", now)
	l.reserve("victim-of-its-own-flood", now)
	if l.reserve("victim-of-its-own-flood", now) == 0 {
		t.Fatal("third request within the burst of 2 was allowed")
	}
	for i := range 1000 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		l.reserve(fmt.Sprintf("addr%d", i), at)
		l.reserve(fmt.Sprintf("addr%d", i), at) // drained: not a full bucket
		if len(l.m) > l.maxKeys {
			t.Fatalf("after %d clients the limiter holds %d, want <= %d", i+1, len(l.m), l.maxKeys)
		}
	}
	if _, ok := l.m["addr999"]; !ok {
		t.Error("the most recent client was evicted")
	}

	// Refilled buckets are dropped at the next sweep: they hold nothing.
	later := now.Add(time.Hour)
	l.reserve("fresh", later)
	if len(l.m) != 1 {
		t.Errorf("after every bucket refilled the limiter holds %d clients, want 1", len(l.m))
	}
	var off *limiters
	if off.reserve("x", now) != 0 {
		t.Error("a nil limiter limited")
	}
}
