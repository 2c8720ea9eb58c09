package webhooks

import (
	"context"
	"slices"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/tools"
)

// queryLog is a Docs that records the queries it is asked and answers
// them from tasks (matching as the store would).
type queryLog struct {
	Docs
	tasks   []*collections.Document
	queries []collections.Query
}

func (q *queryLog) Query(_ context.Context, qq collections.Query) ([]*collections.Document, error) {
	q.queries = append(q.queries, qq)
	var out []*collections.Document
	for _, d := range q.tasks {
		if qq.Matches(d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// checkRuns runs once per user message: its queries must be equalities
// on the fields of a declared index (the engine pushes down equalities
// only), so they read the user's active tasks, never every user's tasks.
func TestCheckRuns_QueriesRunOnAnIndex(t *testing.T) {
	docs := &queryLog{}
	reg, err := tools.New(nil, tools.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Docs: docs, Model: llm.Offline(), Tools: reg, Secret: "whsec_dGVzdHRlc3R0ZXN0dGVzdA==", Roles: map[string]Role{}, UserConcurrentRuns: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := chat{uid: "u1", id: "c1"}
	for i, st := range []string{"pending", "running", "success"} {
		m := string(rune('a' + i))
		path := c.tasks() + "/" + taskID(m, 0)
		docs.tasks = append(docs.tasks, &collections.Document{Path: path, Collection: c.tasks(), ID: taskID(m, 0),
			Data: h.seals.seal(path, map[string]any{"userId": c.uid, "status": st, "triggerMessageId": m, "type": "agent"}, taskSeal)})
	}
	err = h.checkRuns(context.Background(), c, &collections.Document{ID: "new"})
	if _, ok := asLimit(err); !ok {
		t.Fatalf("checkRuns=%v, want the limit (2 runs in progress)", err)
	}
	if len(docs.queries) == 0 {
		t.Fatal("no query")
	}
	for _, q := range docs.queries {
		var fields []string
		for _, f := range q.Filters {
			if f.Op != collections.OpEq {
				t.Errorf("query %+v: filter %s %s is not pushed down to an index", q, f.Field, f.Op)
			}
			fields = append(fields, f.Field)
		}
		indexed := slices.ContainsFunc(Indexes, func(ix collections.Index) bool {
			return collections.MatchCollection(ix.Collection, q.Collection) && slices.Equal(ix.Fields, fields)
		})
		if !indexed {
			t.Errorf("query %+v: no declared index on %v", q, fields)
		}
	}
}
