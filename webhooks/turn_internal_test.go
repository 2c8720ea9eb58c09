package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// writeCounter is a Docs that counts the creates and updates of each path
// and the queries of each collection.
type writeCounter struct {
	Docs
	writes  map[string]int
	queries map[string]int
}

func (w *writeCounter) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	w.writes[path]++
	return w.Docs.Create(ctx, path, data)
}

func (w *writeCounter) Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	w.writes[path]++
	return w.Docs.Update(ctx, path, data, ifVersion)
}

func (w *writeCounter) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	for _, wr := range writes {
		w.writes[wr.Path]++
	}
	return w.Docs.Batch(ctx, writes)
}

func (w *writeCounter) Query(ctx context.Context, q collections.Query) ([]*collections.Document, error) {
	w.queries[q.Collection]++
	return w.Docs.Query(ctx, q)
}

// A user message in an active chat whose idle timer stays writes the chat
// document once, after the plan's tasks exist: the activity, the
// decision's tokens and runStatus "running" in one commit. The tasks
// waiting for the user are read once (for the routing and the prompt).
func TestOrchestrator_OneChatWritePerMessage(t *testing.T) {
	env := &rulesEnv{store: openTestStore(t)}
	docs := &writeCounter{Docs: env.serviceDocs(), writes: map[string]int{}, queries: map[string]int{}}
	h := offlineHandlers(t, Config{Docs: docs})
	ctx := context.Background()
	c := chat{uid: "u1", id: "c1"}
	before := time.Now().Add(-time.Minute).UnixMilli()
	if _, err := docs.Create(ctx, c.path(), map[string]any{
		"userId": c.uid, "status": chatActive, "lastActivityAt": before,
		"idleAt": time.Now().Add(time.Hour).UnixMilli(), "tokensUsed": 5, "compressionCount": 0,
	}); err != nil {
		t.Fatal(err)
	}
	msg, err := docs.Create(ctx, c.messages()+"/m1", map[string]any{"userId": c.uid, "chatId": c.id, "role": "user", "content": "What is 6*7?"})
	if err != nil {
		t.Fatal(err)
	}
	clear(docs.writes)
	clear(docs.queries)
	if err := h.orchestrator(ctx, &Event{Type: "create", Path: msg.Path, ID: msg.ID, Doc: msg}); err != nil {
		t.Fatal(err)
	}
	task := mustGet(t, docs, c.tasks()+"/"+taskID(msg.ID, 0))
	if str(task, "status") != "pending" {
		t.Fatalf("task %v: want a pending task (the offline model delegates)", task.Data)
	}
	if n := docs.writes[c.path()]; n != 1 {
		t.Errorf("the chat document was written %d times, want 1", n)
	}
	if n := docs.queries[c.tasks()]; n != 2 {
		t.Errorf("%d queries of the chat's tasks, want 2 (the waiting ones, then the unfinished ones)", n)
	}
	cd := mustGet(t, docs, c.path())
	if num(cd, "lastActivityAt") <= before || str(cd, "runStatus") != "running" || str(cd, "lastModel") == "" || num(cd, "tokensUsed") < 5 {
		t.Errorf("chat %v: want the activity moved, runStatus running, the decision's tokens and model", cd.Data)
	}

	// A redelivery finds the reply and the task: it asks the model
	// nothing, and writes only the activity.
	clear(docs.writes)
	tokens := num(cd, "tokensUsed")
	if err := h.orchestrator(ctx, &Event{Type: "create", Path: msg.Path, ID: msg.ID, Doc: msg}); err != nil {
		t.Fatal(err)
	}
	if n := docs.writes[c.path()]; n != 1 {
		t.Errorf("redelivery: the chat document was written %d times, want 1", n)
	}
	if cd := mustGet(t, docs, c.path()); num(cd, "tokensUsed") != tokens || str(cd, "runStatus") != "running" {
		t.Errorf("redelivery: chat %v: want tokensUsed %d and runStatus running", cd.Data, tokens)
	}
}

// finishTask tries its compare-and-swap first against the task its caller
// read: a cancel written since must still win (the stale attempt
// conflicts, the task is read again and left canceled, and the sub-agent
// is not completed). A task not read from the store (version 0) is read,
// never written unconditionally.
func TestFinishTask_StaleTaskNeverOverwritesACancel(t *testing.T) {
	ctx := context.Background()
	docs := (&rulesEnv{store: openTestStore(t)}).serviceDocs()
	h := offlineHandlers(t, Config{Docs: docs})
	c := chat{uid: "u1", id: "c1"}
	for _, versionless := range []bool{false, true} {
		sa := taskID("m1", 0)
		if versionless {
			sa = taskID("m2", 0)
		}
		taskPath := c.tasks() + "/" + sa
		stale, err := docs.Create(ctx, taskPath, h.seals.seal(taskPath, map[string]any{
			"userId": c.uid, "chatId": c.id, "type": "agent", "name": "agent:general", "instruction": "x",
			"triggerMessageId": "m1", "status": "running", "subAgentId": sa,
		}, taskSeal))
		if err != nil {
			t.Fatal(err)
		}
		agentPath := c.subAgent(sa)
		agent, err := docs.Create(ctx, agentPath, h.seals.seal(agentPath, map[string]any{
			"userId": c.uid, "chatId": c.id, "taskId": sa, "role": "general", "status": "active",
		}, subAgentSeal))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.cancelTask(ctx, taskPath, "user"); err != nil {
			t.Fatal(err)
		}
		if versionless {
			stale = &collections.Document{Path: stale.Path, ID: stale.ID, Data: stale.Data}
		}
		if err := h.finishTask(ctx, c, sa, agent, stale, nil, "late answer", ""); err != nil {
			t.Fatal(err)
		}
		task, err := docs.Get(ctx, taskPath)
		if err != nil {
			t.Fatal(err)
		}
		if st := str(task, "status"); st != statusCanceled || str(task, "result") != "" {
			t.Fatalf("versionless %v: task %v, want it to stay canceled without the late result", versionless, task.Data)
		}
		cur, err := docs.Get(ctx, agentPath)
		if err != nil {
			t.Fatal(err)
		}
		if st := str(cur, "status"); st != "active" {
			t.Fatalf("versionless %v: sub-agent %q, want it left to the cancel's settlement (active)", versionless, st)
		}
	}
}
