package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestLoginLimiter_Bounded(t *testing.T) {
	l := newLoginLimiter(Limit{Failures: 3, AddressFailures: 3, UserFailures: 3, Window: time.Minute})
	l.maxKeys = 100
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	// One failure each for many usernames from many IPs: the map never
	// grows past maxKeys.
	for i := range 1000 {
		a, err := l.begin(fmt.Sprintf("user%d", i), fmt.Sprintf("ip%d", i), now)
		if err != nil {
			t.Fatalf("begin %d: %v", i, err)
		}
		a.failed(now)
		if n := len(l.entries); n > l.maxKeys {
			t.Fatalf("after %d failures the limiter holds %d keys, want <= %d", i+1, n, l.maxKeys)
		}
	}

	// Expired entries are dropped before live ones, then the least
	// recently active.
	l = newLoginLimiter(Limit{Failures: 3, UserFailures: -1, Window: time.Minute})
	l.maxKeys = 10
	for i := range 9 {
		a, _ := l.begin(fmt.Sprintf("old%d", i), "", now)
		a.failed(now)
	}
	later := now.Add(2 * time.Minute)
	for range 3 {
		a, _ := l.begin("target", "", later)
		a.failed(later)
	}
	for i := range 5 {
		a, _ := l.begin(fmt.Sprintf("new%d", i), "", later)
		a.failed(later)
	}
	if _, ok := l.entries["p:target\x00"]; !ok {
		t.Fatal("a live entry was evicted while expired ones remained")
	}
	if _, err := l.begin("target", "", later); err == nil {
		t.Error("target is no longer limited after eviction")
	}
	// Full of live entries: the most recent activity survives.
	for i := range 10 {
		at := later.Add(time.Duration(i+1) * time.Second)
		a, _ := l.begin(fmt.Sprintf("newer%d", i), "", at)
		a.failed(at)
	}
	if _, ok := l.entries["p:newer9\x00"]; !ok || len(l.entries) > l.maxKeys {
		t.Fatalf("entries=%d, newest kept=%v", len(l.entries), ok)
	}
	if _, ok := l.entries["p:new0\x00"]; ok {
		t.Error("an older entry outlived newer ones")
	}
}

func TestLoginLimiter_SuccessAndAbandonForget(t *testing.T) {
	l := newLoginLimiter(Limit{Failures: 2, Window: time.Minute})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, _ := l.begin("u", "ip", now)
	a.abandoned()
	a, _ = l.begin("u", "", now)
	a.succeeded()
	if len(l.entries) != 0 {
		t.Errorf("entries=%v, want none after attempts that did not fail", l.entries)
	}
	var disabled *loginLimiter
	a, err := disabled.begin("u", "ip", now)
	if err != nil {
		t.Fatal(err)
	}
	a.failed(now) // nil attempt: no-op
	a.succeeded()
	a.abandoned()
}
