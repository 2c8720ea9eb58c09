package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// A handler that read a sub-agent before a cancel was settled must not move
// it back from canceled when it writes its status after the settlement (an
// unversioned status write would revive it: the app shows a live agent for
// a canceled task, forever). Real SQLite through the service key's Docs.
func TestMoveAgent_NeverRevivesACanceledSubAgent(t *testing.T) {
	ctx := context.Background()
	docs := (&rulesEnv{store: openTestStore(t)}).serviceDocs()
	h := offlineHandlers(t, Config{Docs: docs})
	c := chat{uid: "u1", id: "c1"}
	sa := taskID("m1", 0)
	taskPath := c.tasks() + "/" + sa
	task, err := docs.Create(ctx, taskPath, h.seals.seal(taskPath, map[string]any{
		"userId": c.uid, "chatId": c.id, "type": "agent", "name": "agent:general", "instruction": "x",
		"triggerMessageId": "m1", "status": "running", "subAgentId": sa,
	}, taskSeal))
	if err != nil {
		t.Fatal(err)
	}
	agentPath := c.subAgent(sa)
	stale, err := docs.Create(ctx, agentPath, h.seals.seal(agentPath, map[string]any{
		"userId": c.uid, "chatId": c.id, "taskId": sa, "role": "general", "status": "waiting",
	}, subAgentSeal))
	if err != nil {
		t.Fatal(err)
	}
	// The settlement of a cancel ends the sub-agent after the handler read it.
	if _, err := docs.Update(ctx, agentPath, map[string]any{"status": statusCanceled}, 0); err != nil {
		t.Fatal(err)
	}
	wantCanceled := func(when string) {
		t.Helper()
		cur, err := docs.Get(ctx, agentPath)
		if err != nil {
			t.Fatal(err)
		}
		if st := str(cur, "status"); st != statusCanceled {
			t.Fatalf("%s: sub-agent %q, want it to stay canceled", when, st)
		}
	}
	if _, err := h.resumeFromClient(ctx, stale, task); err != nil {
		t.Fatal(err)
	}
	wantCanceled("after a client result resumed it")
	if err := h.failTask(ctx, c, taskPath, "x"); err != nil {
		t.Fatal(err)
	}
	wantCanceled("after its task failed")
	done := &collections.Document{Path: taskPath, Data: map[string]any{"status": "success"}}
	if err := h.finishTask(ctx, c, sa, &collections.Document{Path: agentPath, Data: map[string]any{"status": "active"}}, done, nil, "r", ""); err != nil {
		t.Fatal(err)
	}
	wantCanceled("after a late finish")
	// A live sub-agent still moves.
	if _, err := docs.Update(ctx, agentPath, map[string]any{"status": agentWaiting}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.moveAgent(ctx, agentPath, "active"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := docs.Get(ctx, agentPath); str(cur, "status") != "active" {
		t.Fatalf("a waiting sub-agent did not move: %v", cur.Data)
	}
}

// cancelOnCreate is the service key's Docs, over the real store, with the
// user's cancel of a task landing right after the sub-agent's create (the
// settlement ran before, when there was no sub-agent to end).
type cancelOnCreate struct {
	Docs
	agentPath, taskPath string
}

func (d cancelOnCreate) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	doc, err := d.Docs.Create(ctx, path, data)
	if err == nil && path == d.agentPath {
		if _, err := d.Docs.Update(ctx, d.taskPath, map[string]any{"status": statusCanceled, "canceledBy": "user"}, 0); err != nil {
			return nil, err
		}
	}
	return doc, err
}

// Batch lands the cancel just before a batch that creates the sub-agent
// (a batch is atomic: nothing can land inside it). The batch then fails on
// the task's version, and agent-init writes one by one, Create above.
func (d cancelOnCreate) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	for _, w := range writes {
		if w.Type == collections.WriteCreate && w.Path == d.agentPath {
			if _, err := d.Docs.Update(ctx, d.taskPath, map[string]any{"status": statusCanceled, "canceledBy": "user"}, 0); err != nil {
				return nil, err
			}
		}
	}
	return d.Docs.Batch(ctx, writes)
}

// A task canceled while agent-init creates its sub-agent: the sub-agent
// does not stay active (nothing else would ever end it).
func TestAgentInit_CanceledMeanwhileEndsTheSubAgent(t *testing.T) {
	ctx := context.Background()
	docs := (&rulesEnv{store: openTestStore(t)}).serviceDocs()
	c := chat{uid: "u1", id: "c1"}
	sa := taskID("m1", 0)
	taskPath := c.tasks() + "/" + sa
	h := offlineHandlers(t, Config{Docs: cancelOnCreate{Docs: docs, agentPath: c.subAgent(sa), taskPath: taskPath}})
	task, err := docs.Create(ctx, taskPath, h.seals.seal(taskPath, map[string]any{
		"userId": c.uid, "chatId": c.id, "type": "agent", "name": "agent:general", "instruction": "x",
		"triggerMessageId": "m1", "status": "pending",
	}, taskSeal))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.agentInit(ctx, &Event{Path: taskPath, ID: sa, Doc: task}); err != nil {
		t.Fatal(err)
	}
	agent, err := docs.Get(ctx, c.subAgent(sa))
	if err != nil {
		t.Fatal(err)
	}
	if st := str(agent, "status"); st != statusCanceled {
		t.Fatalf("sub-agent %q after its task was canceled during agent-init", st)
	}
	if m, _ := h.getOpt(ctx, c.subMessages(sa)+"/"+msgID(1)); m != nil {
		t.Fatalf("the instruction was written: %v", m.Data)
	}
}

// A chat's cancel cancels every unfinished task from before it, however
// many there are (more than one page of the query), and none after it.
func TestChatCancel_MoreTasksThanOnePage(t *testing.T) {
	old := chatCancelPage
	chatCancelPage = 3
	t.Cleanup(func() { chatCancelPage = old })
	ctx := context.Background()
	docs := (&rulesEnv{store: openTestStore(t)}).serviceDocs()
	h := offlineHandlers(t, Config{Docs: docs})
	c := chat{uid: "u1", id: "c1"}
	mk := func(i int, status string) string {
		path := c.tasks() + "/" + taskID("m"+string(rune('a'+i)), 0)
		if _, err := docs.Create(ctx, path, h.seals.seal(path, map[string]any{
			"userId": c.uid, "chatId": c.id, "type": "tool", "name": "tool:x", "instruction": "{}",
			"triggerMessageId": "m" + string(rune('a'+i)), "status": status,
		}, taskSeal)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var before []string
	for i := range 8 {
		before = append(before, mk(i, []string{"waiting", "running"}[i%2]))
	}
	// A forged task (a rules file that lets users write tasks): never
	// canceled, and it does not keep the cancel going round.
	forged := c.tasks() + "/forged"
	if _, err := docs.Create(ctx, forged, map[string]any{"userId": c.uid, "status": "waiting"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // the store's clock is in ms
	chatDoc, err := docs.Create(ctx, c.path(), map[string]any{"userId": c.uid, "runStatus": statusCanceled})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	after := mk(20, "waiting")
	ev := &Event{Path: c.path(), ID: c.id, Doc: chatDoc}
	if err := h.chatCancel(ctx, ev); err != nil {
		t.Fatal(err)
	}
	for _, p := range before {
		if d, _ := docs.Get(ctx, p); str(d, "status") != statusCanceled {
			t.Errorf("%s: %q after the chat's cancel", p, str(d, "status"))
		}
	}
	if d, _ := docs.Get(ctx, after); str(d, "status") != "waiting" {
		t.Errorf("the task after the cancel: %q", str(d, "status"))
	}
	if d, _ := docs.Get(ctx, forged); str(d, "status") != "waiting" {
		t.Errorf("the forged task: %q", str(d, "status"))
	}
}
