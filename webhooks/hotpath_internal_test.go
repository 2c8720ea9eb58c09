package webhooks

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
	"github.com/loomdb/loom/webhooks/tools"
)

// offlineHandlers is New(cfg) with the offline model, the built-in tools,
// a fixed secret and no roles.
func offlineHandlers(t *testing.T, cfg Config) *Handlers {
	t.Helper()
	reg, err := tools.New(nil, tools.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model, cfg.Tools, cfg.Secret, cfg.Roles = llm.Offline(), reg, "whsec_dGVzdHRlc3R0ZXN0dGVzdA==", map[string]Role{}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

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
	h := offlineHandlers(t, Config{Docs: docs, UserConcurrentRuns: 2})
	c := chat{uid: "u1", id: "c1"}
	for i, st := range []string{"pending", "running", "success"} {
		m := string(rune('a' + i))
		path := c.tasks() + "/" + taskID(m, 0)
		docs.tasks = append(docs.tasks, &collections.Document{Path: path, Collection: c.tasks(), ID: taskID(m, 0),
			Data: h.seals.seal(path, map[string]any{"userId": c.uid, "status": st, "triggerMessageId": m, "type": "agent"}, taskSeal)})
	}
	err := h.checkRuns(context.Background(), c, &collections.Document{ID: "new"})
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

// memDocs is an in-memory Docs with versions, counting the reads; before
// runs before each Update (a concurrent writer).
type memDocs struct {
	Docs
	docs   map[string]*collections.Document
	gets   int
	before func(m *memDocs)
}

func (m *memDocs) Get(_ context.Context, path string) (*collections.Document, error) {
	m.gets++
	d, ok := m.docs[path]
	if !ok {
		return nil, collections.ErrNotFound
	}
	return &collections.Document{Path: d.Path, Version: d.Version, Data: maps.Clone(d.Data)}, nil
}

func (m *memDocs) Create(_ context.Context, path string, data map[string]any) (*collections.Document, error) {
	if _, ok := m.docs[path]; ok {
		return nil, collections.ErrAlreadyExists
	}
	m.docs[path] = &collections.Document{Path: path, Version: 1, Data: maps.Clone(data)}
	return m.docs[path], nil
}

func (m *memDocs) Update(_ context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	if f := m.before; f != nil {
		m.before = nil
		f(m)
	}
	d, ok := m.docs[path]
	if !ok {
		return nil, collections.ErrNotFound
	}
	if ifVersion > 0 && d.Version != ifVersion {
		return nil, collections.ErrPreconditionFailed
	}
	maps.Copy(d.Data, data)
	d.Version++
	return d, nil
}

// An LLM call reads the user's usage record once: the record checkTokens
// read is where addUsage's compare-and-swap starts. A write in between
// makes the swap read again, and no tokens are lost.
func TestComplete_ReadsUsageOnce(t *testing.T) {
	docs := &memDocs{docs: map[string]*collections.Document{}}
	h := offlineHandlers(t, Config{Docs: docs})
	ctx := context.Background()
	req := llm.Request{Messages: []llm.Message{{Role: "user", Content: "hello there"}}}
	var want int64
	for i := range 3 {
		if i == 2 {
			docs.before = func(m *memDocs) { // another run of the user's
				for _, d := range m.docs {
					d.Data["tokens"] = num(d, "tokens") + 1000
					d.Version++
				}
				want += 1000
			}
		}
		docs.gets = 0
		res, err := h.complete(ctx, "u1", req)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(res.Usage.TotalTokens)
		if wantGets := 1 + i/2; docs.gets != wantGets {
			t.Errorf("call %d: %d reads of the usage record, want %d", i, docs.gets, wantGets)
		}
	}
	d := docs.docs[usagePath("u1", time.Now())]
	if d == nil || num(d, "tokens") != want || num(d, "llmRequests") != 3 {
		t.Fatalf("usage=%+v, want %d tokens in 3 requests", d, want)
	}
}

// Every user message without replyTo looks for the tasks of its chat
// waiting for the user (routeReply).
// The status index spans every user's tasks (the engine's indexes do not
// hold the collection), so the lookup names the user too and seeks the
// (userId, status) index: the user's waiting tasks, not every user's.
func TestWaitingForUser_SeeksTheUsersWaitingTasks(t *testing.T) {
	docs := &queryLog{}
	h := offlineHandlers(t, Config{Docs: docs})
	if waiting, err := h.waitingForUser(context.Background(), chat{uid: "u1", id: "c1"}); len(waiting) != 0 || err != nil {
		t.Fatalf("waiting=%v err=%v with no task", waiting, err)
	}
	n := 0
	for _, q := range docs.queries {
		var fields []string
		for _, f := range q.Filters {
			fields = append(fields, f.Field)
		}
		if slices.Contains(fields, "status") {
			n++
			if !slices.Equal(fields, []string{"userId", "status"}) {
				t.Errorf("query %+v: want filters on userId and status (the index of the user's tasks)", q)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no query on the task status: %+v", docs.queries)
	}
}

// A sub-agent document's tokenBudget outside 4,000–128,000 (not one the
// runtime writes) counts as its role's default.
func TestBudgetOf(t *testing.T) {
	h := &Handlers{log: slog.New(slog.DiscardHandler), cfg: Config{TokenBudget: 9000,
		Roles: map[string]Role{"small": {TokenBudget: 5000}, "general": {}}}}
	for _, tt := range []struct {
		role   string
		budget any
		want   int64
	}{
		{"general", int64(20000), 20000},
		{"general", int64(100), 9000},
		{"general", int64(200000), 9000},
		{"general", "lots", 9000},
		{"small", nil, 5000},
		{"small", int64(4000), 4000},
	} {
		agent := &collections.Document{Path: "p", Data: map[string]any{"role": tt.role, "tokenBudget": tt.budget}}
		if got := h.budgetOf(agent); got != tt.want {
			t.Errorf("%s %v: %d, want %d", tt.role, tt.budget, got, tt.want)
		}
	}
}
