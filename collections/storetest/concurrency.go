package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// testCASRace: 32 goroutines increment one counter through get + update with
// IfMatch on the version, retrying on a failed precondition. No increment may
// be lost and no two may succeed on the same version.
func testCASRace(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	const path = "counters/c"
	workers := 32
	perWorker := scale(8, 3)
	h.mustCommit(db, h.create(path, `{"n":0}`))

	type success struct {
		worker  int
		version int64
		n       int64
	}
	var (
		mu      sync.Mutex
		history []success
		errs    []error
		wg      sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; {
				cur, err := h.get(db, path)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d: Get: %w", w, err))
					mu.Unlock()
					return
				}
				n, err := intField(cur, "n")
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d: %w", w, err))
					mu.Unlock()
					return
				}
				write := collections.Write{
					Type:    collections.WriteUpdate,
					Path:    path,
					Data:    map[string]any{"n": num(n + 1)},
					IfMatch: []collections.Filter{filter("version", "==", num(cur.Version))},
				}
				res, err := h.commit(db, write)
				if errors.Is(err, collections.ErrPreconditionFailed) {
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d: Commit: %w", w, err))
					mu.Unlock()
					return
				}
				got, _ := intField(res[0].Doc, "n")
				mu.Lock()
				history = append(history, success{w, res[0].Doc.Version, got})
				mu.Unlock()
				i++
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}

	total := int64(workers * perWorker)
	final := h.mustGet(db, path)
	n, _ := intField(final, "n")
	if n != total || final.Version != total+1 {
		t.Errorf("counter n=%d version=%d, want %d %d", n, final.Version, total, total+1)
	}
	// Every success holds its own version, and the value it wrote is
	// version-1: no lost or doubled increments.
	sort.Slice(history, func(i, j int) bool { return history[i].version < history[j].version })
	for i, s := range history {
		if want := int64(i + 2); s.version != want || s.n != want-1 {
			t.Errorf("success %d (worker %d): version=%d n=%d, want %d %d", i, s.worker, s.version, s.n, want, want-1)
			t.Logf("history (sorted by version): %+v", history)
			break
		}
	}
}

// intField reads an integer field as stored (json.Number or a Go number).
func intField(d *collections.Document, field string) (int64, error) {
	v, ok := collections.Lookup(d, field)
	if !ok {
		return 0, fmt.Errorf("%s has no field %q", d.Path, field)
	}
	switch x := v.(type) {
	case json.Number:
		return strconv.ParseInt(string(x), 10, 64)
	case float64:
		return int64(x), nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	}
	return 0, fmt.Errorf("%s.%s=%#v, want an integer", d.Path, field, v)
}

// testClaimRace: many nodes race collections.Claim for one lease; exactly one
// wins each round, others see ErrPreconditionFailed while it is held.
func testClaimRace(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	const path = "_leases/evaluator"
	h.mustCommit(db, h.create(path, `{}`))
	contenders := 16
	rounds := scale(4, 2)
	base := time.UnixMilli(1_700_000_000_000)
	for round := 0; round < rounds; round++ {
		// Each round starts after the previous lease ran out.
		now := base.Add(time.Duration(round) * 10 * time.Minute)
		var (
			mu      sync.Mutex
			winners []string
			wg      sync.WaitGroup
		)
		for c := 0; c < contenders; c++ {
			owner := fmt.Sprintf("node-%d", c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := ctxT()
				defer cancel()
				d, err := collections.Claim(ctx, h.s, db, path, owner, time.Minute, now)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, owner)
					if got, _ := collections.Lookup(d, collections.FieldLeaseOwner); got != owner {
						t.Errorf("round %d: claimed document leaseOwner=%v, want %s", round, got, owner)
					}
				case !errors.Is(err, collections.ErrPreconditionFailed):
					t.Errorf("round %d: Claim by %s: %v, want success or ErrPreconditionFailed", round, owner, err)
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: winners=%v, want exactly one", round, winners)
		}
		cur := h.mustGet(db, path)
		if got, _ := collections.Lookup(cur, collections.FieldLeaseOwner); got != winners[0] {
			t.Errorf("round %d: leaseOwner=%v, want %s", round, got, winners[0])
		}
		if got, _ := intField(cur, collections.FieldLeaseUntil); got != now.Add(time.Minute).UnixMilli() {
			t.Errorf("round %d: leaseUntil=%d, want %d", round, got, now.Add(time.Minute).UnixMilli())
		}
		// While held: others fail, the owner renews.
		ctx, cancel := ctxT()
		later := now.Add(30 * time.Second)
		if _, err := collections.Claim(ctx, h.s, db, path, "intruder", time.Minute, later); !errors.Is(err, collections.ErrPreconditionFailed) {
			t.Errorf("round %d: Claim of a held lease err=%v, want ErrPreconditionFailed", round, err)
		}
		if _, err := collections.Claim(ctx, h.s, db, path, winners[0], time.Minute, later); err != nil {
			t.Errorf("round %d: renewal by the owner: %v", round, err)
		}
		cancel()
	}
	ctx, cancel := ctxT()
	defer cancel()
	if _, err := collections.Claim(ctx, h.s, db, "_leases/absent", "n", time.Minute, base); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("Claim of an absent document err=%v, want ErrNotFound", err)
	}
}
