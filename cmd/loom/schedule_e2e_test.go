package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestServe_ScheduledDeliverySurvivesSIGKILL: scheduled deliveries are
// outbox rows. The server is killed with SIGKILL while two are waiting;
// one falls due while it is down. After the restart each is delivered
// exactly once, never before its deliverAt.
func TestServe_ScheduledDeliverySurvivesSIGKILL(t *testing.T) {
	rc := newHookReceiver(t, nil)
	trigs := []map[string]any{{
		"triggerId": "remind", "collection": "reminders", "events": []string{"create"},
		"url": rc.URL, "secret": e2eSecret, "deliverAt": "event.document.data.remindAt",
	}}
	_, env := writeTriggerFiles(t, t.TempDir(), trigs, allowLoopback)
	data := t.TempDir()
	p := startLoom(t, data, env...)

	create := func(base, id string, at int64) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"id": id, "remindAt": at})
		req, _ := http.NewRequest("POST", base+"/api/v1/databases/default/documents/reminders", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("create %s: status %d", id, resp.StatusCode)
		}
	}
	start := time.Now()
	dueWhileDown := start.Add(800 * time.Millisecond).UnixMilli()
	dueAfter := start.Add(2500 * time.Millisecond).UnixMilli()
	create(p.url, "down", dueWhileDown)
	create(p.url, "after", dueAfter)
	deadline := time.Now().Add(10 * time.Second)
	for len(listDeliveries(t, p.url, "scheduled")) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not scheduled: %+v", listDeliveries(t, p.url, ""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if n := len(rc.hooks()); n != 0 {
		t.Fatalf("%d webhooks before their time", n)
	}
	time.Sleep(time.Until(time.UnixMilli(dueWhileDown)) + 100*time.Millisecond)

	p2 := startLoom(t, data, env...)
	deadline = time.Now().Add(15 * time.Second)
	for {
		rows := listDeliveries(t, p2.url, "delivered")
		if len(rows) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: %+v\n%s", listDeliveries(t, p2.url, ""), p2.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a duplicate would show by now (poll interval 1 s: the rows are finished)
	byID := map[string]int{}
	for _, r := range rc.Requests() {
		byID[r.ID()]++
		want := dueWhileDown
		if r.DocID() == "after" {
			want = dueAfter
		}
		if r.At.UnixMilli() < want {
			t.Errorf("%s delivered at %d, before its deliverAt %d", r.DocID(), r.At.UnixMilli(), want)
		}
	}
	if len(byID) != 2 {
		t.Fatalf("webhook-ids %v, want 2", byID)
	}
	for id, n := range byID {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", id, n)
		}
	}
	if rows := listDeliveries(t, p2.url, "scheduled"); len(rows) != 0 {
		t.Fatalf("still scheduled: %+v", rows)
	}
}
