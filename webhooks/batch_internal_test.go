package webhooks

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/llm"
)

// batchLog is a Docs that counts the writes made one by one and the
// batches. fail, when set, is the next batch's fate: "lost" commits it and
// answers an error (a lost HTTP answer), "outage" commits nothing and
// answers an error, "moved" first writes the document at movePath (a
// concurrent write the batch did not expect).
type batchLog struct {
	Docs
	singles, batches int
	fail             string
	movePath         string
}

func (d *batchLog) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	d.singles++
	return d.Docs.Create(ctx, path, data)
}

func (d *batchLog) Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	d.singles++
	return d.Docs.Update(ctx, path, data, ifVersion)
}

func (d *batchLog) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	d.batches++
	fail := d.fail
	d.fail = ""
	switch fail {
	case "outage":
		return nil, errors.New("store unavailable")
	case "moved":
		if _, err := d.Docs.Update(ctx, d.movePath, map[string]any{"touched": true}, 0); err != nil {
			return nil, err
		}
	}
	docs, err := d.Docs.Batch(ctx, writes)
	if fail == "lost" && err == nil {
		return nil, errors.New("connection reset after the commit")
	}
	return docs, err
}

// agentInitState is what agent-init leaves: the sub-agent, its messages
// and the task, with their versions (a write more shows).
func agentInitState(t *testing.T, docs Docs, c chat, sa, taskPath string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	agent := mustGet(t, docs, c.subAgent(sa))
	task := mustGet(t, docs, taskPath)
	// (A task that moved under agent-init's version-checked update keeps
	// its status: the writes one by one read it again and go on.)
	moved := task.Data["touched"] == true
	if str(agent, "status") != "active" || !moved && (str(task, "status") != "running" || str(task, "subAgentId") != sa) {
		t.Fatalf("sub-agent %v, task %v", agent.Data, task.Data)
	}
	out[agent.Path] = agent.Version
	if !moved {
		out[task.Path] = task.Version // (a redelivery finishes a moved task's start)
	}
	msgs, err := docs.Query(ctx, collections.Query{Collection: c.subMessages(sa), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || str(msgs[0], "role") != "system" || str(msgs[1], "role") != "user" || str(msgs[1], "content") != "x" {
		t.Fatalf("%d sub-agent messages, want the system prompt and the instruction", len(msgs))
	}
	for _, m := range msgs {
		out[m.Path] = m.Version
	}
	return out
}

// agent-init writes a pending task's sub-agent, messages and status in one
// batch; whatever becomes of that batch (committed with its answer lost,
// refused on a task that moved, not committed at all), a redelivery of the
// same event ends in the same documents, each written once.
func TestAgentInit_OneBatchAndRedeliveries(t *testing.T) {
	for _, fail := range []string{"", "lost", "moved", "outage"} {
		t.Run("fail="+fail, func(t *testing.T) {
			ctx := context.Background()
			c := chat{uid: "u1", id: "c1"}
			sa := taskID("m1", 0)
			taskPath := c.tasks() + "/" + sa
			docs := &batchLog{Docs: (&rulesEnv{store: openTestStore(t)}).serviceDocs(), fail: fail, movePath: taskPath}
			h := offlineHandlers(t, Config{Docs: docs})
			task, err := docs.Docs.Create(ctx, taskPath, h.seals.seal(taskPath, map[string]any{
				"userId": c.uid, "chatId": c.id, "type": "agent", "name": "agent:general", "instruction": "x",
				"triggerMessageId": "m1", "status": "pending",
			}, taskSeal))
			if err != nil {
				t.Fatal(err)
			}
			ev := &Event{Type: "create", Path: taskPath, ID: sa, Doc: task}
			err = h.agentInit(ctx, ev)
			switch fail {
			case "":
				if err != nil || docs.batches != 1 || docs.singles != 0 {
					t.Fatalf("err=%v, %d batches and %d single writes; want one batch", err, docs.batches, docs.singles)
				}
			case "moved":
				if err != nil {
					t.Fatalf("a batch refused on a moved task: %v (the writes one by one settle it)", err)
				}
			case "lost", "outage":
				if err == nil {
					t.Fatal("a failed batch did not fail the delivery")
				}
				if _, gerr := docs.Get(ctx, c.subAgent(sa)); fail == "outage" && !errors.Is(gerr, collections.ErrNotFound) {
					t.Fatalf("a batch that failed left its sub-agent behind: %v", gerr)
				}
				if err := h.agentInit(ctx, ev); err != nil {
					t.Fatalf("the retry: %v", err)
				}
			}
			want := agentInitState(t, docs, c, sa, taskPath)
			if err := h.agentInit(ctx, ev); err != nil {
				t.Fatalf("a redelivery: %v", err)
			}
			got := agentInitState(t, docs, c, sa, taskPath)
			for p, v := range want {
				if got[p] != v {
					t.Errorf("%s: version %d after a redelivery, %d before", p, got[p], v)
				}
			}
		})
	}
}

// The orchestrator writes a fresh decision's reply, its task and the chat
// document's turn fields in one batch; whatever becomes of that batch, the
// retry and a redelivery end in one reply, one task, runStatus running and
// each decision's tokens counted once.
func TestOrchestrator_OneBatchAndRedeliveries(t *testing.T) {
	var want int64 // the decision's tokens, as the batch without a failure counts them
	for _, fail := range []string{"", "lost", "moved", "outage"} {
		t.Run("fail="+fail, func(t *testing.T) {
			ctx := context.Background()
			c := chat{uid: "u1", id: "c1"}
			docs := &batchLog{Docs: (&rulesEnv{store: openTestStore(t)}).serviceDocs(), fail: fail, movePath: c.path()}
			h := offlineHandlers(t, Config{Docs: docs})
			msg, err := docs.Docs.Create(ctx, c.messages()+"/m1", map[string]any{"userId": c.uid, "chatId": c.id, "role": "user", "content": "What is 6*7?"})
			if err != nil {
				t.Fatal(err)
			}
			ev := &Event{Type: "create", Path: msg.Path, ID: msg.ID, Doc: msg}
			err = h.orchestrator(ctx, ev)
			switch fail {
			case "", "moved":
				if err != nil {
					t.Fatal(err)
				}
				if fail == "" && docs.batches != 1 {
					t.Fatalf("%d batches, want one", docs.batches)
				}
			case "lost", "outage":
				if err == nil {
					t.Fatal("a failed batch did not fail the delivery")
				}
				if _, gerr := docs.Get(ctx, c.tasks()+"/"+taskID(msg.ID, 0)); fail == "outage" && !errors.Is(gerr, collections.ErrNotFound) {
					t.Fatalf("a batch that failed left its task behind: %v", gerr)
				}
				if err := h.orchestrator(ctx, ev); err != nil {
					t.Fatalf("the retry: %v", err)
				}
			}
			check := func(when string) *collections.Document {
				t.Helper()
				for _, coll := range []string{c.messages(), c.tasks()} {
					ds, err := docs.Query(ctx, collections.Query{Collection: coll, Limit: 10})
					if err != nil {
						t.Fatal(err)
					}
					if want := map[string]int{c.messages(): 2, c.tasks(): 1}[coll]; len(ds) != want {
						t.Fatalf("%s: %d documents in %s, want %d", when, len(ds), coll, want)
					}
				}
				cd := mustGet(t, docs, c.path())
				if str(cd, "runStatus") != "running" {
					t.Fatalf("%s: chat %v, want runStatus running", when, cd.Data)
				}
				return cd
			}
			first := check("first")
			tokens := num(first, "tokensUsed")
			if fail == "" {
				want = tokens
			}
			spent := want
			if fail == "outage" {
				spent = 2 * want // the retry asked the model again: both decisions count
			}
			if tokens <= 0 || tokens != spent {
				t.Errorf("tokensUsed %d, want %d (each decision's tokens once)", tokens, spent)
			}
			if err := h.orchestrator(ctx, ev); err != nil {
				t.Fatalf("a redelivery: %v", err)
			}
			if cd := check("after a redelivery"); num(cd, "tokensUsed") != tokens {
				t.Errorf("tokensUsed %d after a redelivery, %d before", num(cd, "tokensUsed"), tokens)
			}
		})
	}
}

// overBatchLimit is a Docs whose Batch refuses more than
// maxBatchWrites writes, as POST /batch does for `loom agents`.
type overBatchLimit struct {
	Docs
	refused int
}

func (d *overBatchLimit) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	if len(writes) > maxBatchWrites {
		d.refused++
		return nil, fmt.Errorf("POST batch: 400 BAD_REQUEST: %w", collections.ErrInvalidDocument)
	}
	return d.Docs.Batch(ctx, writes)
}

// manyDelegates is a model whose every answer delegates n tasks.
type manyDelegates struct{ n int }

func (m manyDelegates) Name() string { return "many" }

func (m manyDelegates) Complete(context.Context, llm.Request) (*llm.Response, error) {
	res := &llm.Response{Content: "Many at once.", Usage: llm.Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}}
	for i := range m.n {
		res.ToolCalls = append(res.ToolCalls, llm.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: "delegate_task",
			Arguments: fmt.Sprintf(`{"agent":"general","instruction":"part %d"}`, i)})
	}
	return res, nil
}

// A decision that delegates more tasks than one /batch may hold is carried
// out one write at a time, as before batching, instead of failing its
// delivery on every retry.
func TestOrchestrator_DecisionOverTheBatchLimit(t *testing.T) {
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	docs := &overBatchLimit{Docs: (&rulesEnv{store: openTestStore(t)}).serviceDocs()}
	h := offlineHandlers(t, Config{Docs: docs})
	n := maxBatchWrites // the reply and the chat make it n+2 writes
	h.model = meteredModel{Model: manyDelegates{n: n}, m: h.model.(meteredModel).m}
	msg, err := docs.Docs.Create(ctx, c.messages()+"/m1", map[string]any{"userId": c.uid, "chatId": c.id, "role": "user", "content": "Many"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.orchestrator(ctx, &Event{Type: "create", Path: msg.Path, ID: msg.ID, Doc: msg}); err != nil {
		t.Fatalf("orchestrator: %v (%d batches refused)", err, docs.refused)
	}
	tasks, err := docs.Query(ctx, collections.Query{Collection: c.tasks(), Limit: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != n {
		t.Fatalf("%d tasks, want %d", len(tasks), n)
	}
	if cd := mustGet(t, docs, c.path()); str(cd, "runStatus") != "running" || num(cd, "tokensUsed") != 2 {
		t.Fatalf("chat %v, want runStatus running and the decision's 2 tokens", cd.Data)
	}
}

// The agent loop writes a step and counts it (iterationCount, tokensUsed)
// in one batch: a delivery whose batch committed but whose answer was lost,
// retried on the state it read, writes the step once and counts its tokens
// once, and a batch that did not commit leaves neither behind.
func TestWriteStep_OneBatchAndRetries(t *testing.T) {
	for _, fail := range []string{"", "lost", "outage"} {
		t.Run("fail="+fail, func(t *testing.T) {
			ctx := context.Background()
			c := chat{uid: "u1", id: "c1"}
			sa := taskID("m1", 0)
			docs := &batchLog{Docs: (&rulesEnv{store: openTestStore(t)}).serviceDocs(), fail: fail}
			h := offlineHandlers(t, Config{Docs: docs})
			agent, err := docs.Docs.Create(ctx, c.subAgent(sa), h.seals.seal(c.subAgent(sa), map[string]any{
				"userId": c.uid, "chatId": c.id, "taskId": sa, "role": "general", "status": "active",
				"iterationCount": 0, "tokenBudget": 1000, "tokensUsed": 5, "model": "offline",
			}, subAgentSeal))
			if err != nil {
				t.Fatal(err)
			}
			var msgs []*collections.Document
			for seq, role := range []string{"system", "user"} {
				w := h.subMessageWrite(c, sa, map[string]any{"userId": c.uid, "subAgentId": sa, "role": role, "content": role, "seq": seq})
				m, err := docs.Docs.Create(ctx, w.Path, w.Data)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, m)
			}
			res := &llm.Response{Content: "done", Usage: llm.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}}
			step, updated, err := h.writeStep(ctx, c, sa, agent, msgs, msgs[1].ID, res, nil)
			switch {
			case fail == "" && (err != nil || step == nil || num(updated, "tokensUsed") != 12):
				t.Fatalf("step %v, agent %v, err %v", step, updated, err)
			case fail != "" && err == nil:
				t.Fatal("a failed batch did not fail the step")
			}
			if fail == "outage" {
				stepPath := c.subMessages(sa) + "/" + msgID(2)
				if _, err := docs.Get(ctx, stepPath); !errors.Is(err, collections.ErrNotFound) {
					t.Fatalf("a batch that failed left its step behind: %v", err)
				}
				if a := mustGet(t, docs, agent.Path); num(a, "tokensUsed") != 5 || num(a, "iterationCount") != 0 {
					t.Fatalf("a batch that failed counted its step: %v", a.Data)
				}
			}
			// The retry, on the state the first delivery read.
			if _, _, err := h.writeStep(ctx, c, sa, agent, msgs, msgs[1].ID, res, nil); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			all, err := docs.Query(ctx, collections.Query{Collection: c.subMessages(sa), Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 3 || str(all[2], "role") != "assistant" {
				t.Fatalf("%d sub-agent messages, want the step once after the two", len(all))
			}
			if a := mustGet(t, docs, agent.Path); num(a, "tokensUsed") != 12 || num(a, "iterationCount") != 1 {
				t.Fatalf("sub-agent %v, want the step counted once (tokensUsed 12, iterationCount 1)", a.Data)
			}
		})
	}
}
