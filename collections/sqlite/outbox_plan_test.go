package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// The trigger pipeline's outbox queries must each run on one of the
// indexes it declares (triggers.Indexes), never scan or sort the outbox
// (a descending log sorts only rows of equal seq by path: "LAST TERM").
func TestOutboxQueriesUseTheirIndexes(t *testing.T) {
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "x.db"), Indexes: triggers.Indexes})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eq := func(f string, v any) collections.Filter {
		return collections.Filter{Field: f, Op: collections.OpEq, Value: v}
	}
	cases := []struct {
		name string
		q    collections.Query
	}{
		{"due rows", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("status", "pending"), {Field: "nextAttemptAt", Op: collections.OpLe, Value: int64(5)}}, OrderBy: []collections.Order{{Field: "nextAttemptAt"}}, Limit: 256}},
		{"key head", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("triggerId", "t"), eq("orderingKey", "k"), eq("status", "pending")}, OrderBy: []collections.Order{{Field: "seq"}}, Limit: 1}},
		{"log by trigger and status", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("triggerId", "t"), eq("status", "dead")}, OrderBy: []collections.Order{{Field: "seq", Direction: "desc"}}, Limit: 50}},
		{"log by trigger", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("triggerId", "t")}, OrderBy: []collections.Order{{Field: "seq", Direction: "desc"}}, Limit: 50}},
		// Scheduled rows (of every trigger, or of one, picked out after the
		// query) are listed on the due-rows index: nextAttemptAt is a
		// scheduled row's deliverAt.
		{"scheduled", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("status", "pending"), {Field: "nextAttemptAt", Op: collections.OpGt, Value: int64(5)}}, OrderBy: []collections.Order{{Field: "nextAttemptAt"}}, Limit: 50}},
		{"purge", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("status", "delivered"), {Field: "finishedAt", Op: collections.OpLt, Value: int64(5)}}, OrderBy: []collections.Order{{Field: "finishedAt"}}, Limit: 500}},
		{"log by status", collections.Query{Collection: "_outbox", Filters: []collections.Filter{eq("status", "pending")}, OrderBy: []collections.Order{{Field: "seq"}}, Limit: 50}},
	}
	for _, c := range cases {
		plan := planOf(t, s, c.q, nil)
		t.Logf("%s:\n%s", c.name, plan)
		if !strings.Contains(plan, "loomix_") || strings.Contains(plan, "TEMP B-TREE FOR ORDER BY") {
			t.Errorf("%s: plan does not run on a declared index in order:\n%s", c.name, plan)
		}
	}
}
