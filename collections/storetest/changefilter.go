package storetest

import (
	"errors"
	"reflect"

	"github.com/loomdb/loom/collections"
)

// An engine that is a collections.FilteredChangeReader reads the change log
// of testChangeLog a second time through ReadChangesFiltered, with wants
// that accept everything, nothing and some of the changes, and every page
// size: it must return the same changes, complete where want accepts them
// and without documents where it rejects them. After retention it must
// report the same expired position.

// filteredReader is the engine as a FilteredChangeReader, or nil.
func (h *harness) filteredReader() collections.FilteredChangeReader {
	fr, _ := h.s.(collections.FilteredChangeReader)
	return fr
}

// checkFiltered compares filtered reads after first-1 with cs, the whole
// log from first read by ReadChanges.
func (h *harness) checkFiltered(cs []collections.Change, first int64) {
	h.t.Helper()
	fr := h.filteredReader()
	if fr == nil {
		return
	}
	wants := map[string]collections.ChangeWant{
		"all":     func(string, collections.ChangeOp, string) bool { return true },
		"none":    func(string, collections.ChangeOp, string) bool { return false },
		"db":      func(d string, _ collections.ChangeOp, _ string) bool { return d == "other" },
		"op":      func(_ string, op collections.ChangeOp, _ string) bool { return op == collections.OpUpdate },
		"path":    func(_ string, _ collections.ChangeOp, p string) bool { return p == "log/c" },
		"nil":     nil,
		"creates": func(_ string, op collections.ChangeOp, _ string) bool { return op == collections.OpCreate },
	}
	for name, want := range wants {
		for _, limit := range []int{1, 3, 100} {
			var got []collections.Change
			after := first - 1
			for range 100 {
				ctx, cancel := ctxT()
				page, err := fr.ReadChangesFiltered(ctx, after, limit, want)
				cancel()
				if err != nil {
					h.t.Fatalf("ReadChangesFiltered(%d, %d, %s): %v", after, limit, name, err)
				}
				if len(page) > limit {
					h.t.Errorf("ReadChangesFiltered(%d, %d, %s) returned %d changes", after, limit, name, len(page))
				}
				if len(page) == 0 {
					break
				}
				got = append(got, page...)
				after = page[len(page)-1].Seq
			}
			if len(got) != len(cs) {
				h.t.Errorf("ReadChangesFiltered(%s) with limit %d read %d changes, want %d", name, limit, len(got), len(cs))
				continue
			}
			for i, g := range got {
				c := cs[i]
				if g.Seq != c.Seq || g.DB != c.DB || g.Op != c.Op || g.Path != c.Path || g.Time != c.Time {
					h.t.Errorf("ReadChangesFiltered(%s) change %d=%d %s %s %s %d, want %d %s %s %s %d", name, i,
						g.Seq, g.DB, g.Op, g.Path, g.Time, c.Seq, c.DB, c.Op, c.Path, c.Time)
					continue
				}
				if want == nil || want(c.DB, c.Op, c.Path) {
					if !reflect.DeepEqual(g.Before, c.Before) || !reflect.DeepEqual(g.After, c.After) {
						h.t.Errorf("ReadChangesFiltered(%s) change %d (%s %s): before %s after %s, want as ReadChanges: %s, %s", name, i, c.Op, c.Path,
							docString(g.Before), docString(g.After), docString(c.Before), docString(c.After))
					}
				} else if g.Before != nil || g.After != nil {
					h.t.Errorf("ReadChangesFiltered(%s) change %d (%s %s) rejected but carries before %s after %s", name, i, c.Op, c.Path,
						docString(g.Before), docString(g.After))
				}
			}
		}
	}
}

// checkFilteredExpired checks that a filtered read after `after` reports
// the expired position oldest, as ReadChanges does, for any limit.
func (h *harness) checkFilteredExpired(after, oldest int64) {
	h.t.Helper()
	fr := h.filteredReader()
	if fr == nil {
		return
	}
	none := func(string, collections.ChangeOp, string) bool { return false }
	for _, limit := range []int{0, 10} {
		ctx, cancel := ctxT()
		cs, err := fr.ReadChangesFiltered(ctx, after, limit, none)
		cancel()
		var pe *collections.PositionExpiredError
		if !errors.As(err, &pe) || len(cs) != 0 || pe.After != after || pe.Oldest != oldest {
			h.t.Errorf("ReadChangesFiltered(%d, %d) after retention=%v, %v, want no change and a *PositionExpiredError with oldest %d", after, limit, changePaths(cs), err, oldest)
		}
	}
}
