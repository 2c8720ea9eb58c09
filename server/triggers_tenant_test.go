package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/config"
)

// waitTrigger polls the admin API until cond holds for trigger id.
func (e *trigEnv) waitTrigger(t testing.TB, id, what string, cond func(triggerOut) bool) triggerOut {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr := e.getTrigger(t, id)
		if cond(tr) {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, tr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func deadCount(n int64) func(triggerOut) bool {
	return func(tr triggerOut) bool { return tr.Counts != nil && tr.Counts.Dead == n }
}

// notesDef is a trigger on users/{uid}/notes ordered per note, so every
// note is its own ordering key.
func notesDef(id, u string) string {
	return `{"triggerId":"` + id + `","collection":"users/{uid}/notes","events":["create"],"url":"` + u +
		`","retryPolicy":{"maxAttempts":1},"orderingKey":"event.params.uid + '/' + event.id"}`
}

// Dead deliveries from one user's documents cannot auto-disable a trigger,
// however many there are and whatever their ordering keys; the same streak
// spread over enough users still does.
func TestTriggersWebhook_OneTenantCannotAutoDisable(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	e := startTrigEnv(t, trigEnvOpts{config: func(c *config.Config) {
		c.Delivery.DisableAfterDead, c.Delivery.DisableAfterDeadOrigins = 3, 3
	}})
	e.register(t, notesDef("notes", rc.URL))

	// One user: twice the streak, six distinct ordering keys.
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		e.Put(t, "users/mallory/notes/"+n, `{"text":"poison"}`)
	}
	tr := e.waitTrigger(t, "notes", "six dead deliveries", deadCount(6))
	if tr.Status != "enabled" {
		t.Fatalf("one user's documents disabled the trigger: %+v", tr)
	}
	if !strings.Contains(tr.LastError, "500") {
		t.Errorf("lastError = %q", tr.LastError)
	}

	// Two more users' deliveries go dead in the same streak: three origins.
	e.Put(t, "users/bob/notes/n1", `{"text":"hi"}`)
	e.Put(t, "users/carol/notes/n1", `{"text":"hi"}`)
	tr = e.waitTrigger(t, "notes", "the trigger disabled", func(tr triggerOut) bool { return tr.Status == "disabled" })
	if !strings.Contains(tr.DisabledReason, "dead") || !strings.Contains(tr.DisabledReason, "3 origins") {
		t.Fatalf("disabled reason %q", tr.DisabledReason)
	}

	// A delivery ends the streak: one user alone cannot disable it again.
	rc.SetRespond(nil)
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/notes/enable", "")
	e.Put(t, "users/bob/notes/n2", `{"text":"hi"}`)
	e.waitTrigger(t, "notes", "a delivery", func(tr triggerOut) bool { return tr.Counts != nil && tr.Counts.Delivered == 1 })
	rc.SetRespond(apptest.Status(http.StatusInternalServerError))
	for _, n := range []string{"m1", "m2", "m3", "m4"} {
		e.Put(t, "users/mallory/notes/"+n, `{"text":"poison"}`)
	}
	if tr := e.waitTrigger(t, "notes", "ten dead deliveries", deadCount(12)); tr.Status != "enabled" {
		t.Fatalf("one user disabled the trigger after a re-enable: %+v", tr)
	}
}

// The built-in handlers' triggers (delivering under BuiltinURL) are never
// disabled automatically: not by dead deliveries from any number of users,
// not by a 410.
func TestTriggersWebhook_BuiltinHandlerTriggerNeverAutoDisabled(t *testing.T) {
	// The built-in handlers answer 410 twice, then 500; the other URL 500.
	var builtinCalls atomic.Int32
	rc := apptest.NewReceiver(t, func(_ context.Context, _ http.ResponseWriter, r apptest.Request) int {
		if strings.HasPrefix(r.Path, "/webhooks/") && builtinCalls.Add(1) <= 2 {
			return http.StatusGone
		}
		return http.StatusInternalServerError
	})
	file := `[` + notesDef("builtin", rc.URL+"/webhooks/orchestrator") + `,` + notesDef("external", rc.URL+"/hooks/x") + `]`
	// The node takes the triggers under ${LOOM_URL}/webhooks/ for its
	// built-in handlers' (with [agents] on): LOOM_URL names the receiver.
	t.Setenv("LOOM_URL", rc.URL)
	e := startTrigEnv(t, trigEnvOpts{file: file, agents: true, config: func(c *config.Config) {
		c.Delivery.DisableAfterDead, c.Delivery.DisableAfterDeadOrigins = 2, 1
	}})
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		e.Put(t, "users/"+u+"/notes/n1", `{"text":"x"}`)
	}
	tr := e.waitTrigger(t, "builtin", "four dead deliveries", deadCount(4))
	if tr.Status != "enabled" || builtinCalls.Load() != 4 {
		t.Fatalf("the built-in handler's trigger was disabled (after %d requests): %+v", builtinCalls.Load(), tr)
	}
	// The same failures disable a trigger to any other URL.
	if ext := e.waitTrigger(t, "external", "the external trigger disabled", func(tr triggerOut) bool { return tr.Status == "disabled" }); ext.DisabledReason == "" {
		t.Fatalf("external trigger %+v", ext)
	}
}
