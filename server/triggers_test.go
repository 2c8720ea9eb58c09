package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
)

// whFixedSecret is a Standard Webhooks secret written into triggers.json.
const whFixedSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// trigEnv is a whole node (the composition root, through apptest) with a
// real trigger pipeline, driven over its admin API.
type trigEnv struct {
	*apptest.Stack
}

type trigEnvOpts struct {
	file   string               // triggers.json content ("[]" if empty)
	agents bool                 // [agents] on: the built-in handlers' triggers are those under ${LOOM_URL}/webhooks/
	config func(*config.Config) // e.g. [delivery] settings
}

// startTrigEnv starts the node; cleanup stops it in the root's order.
// Deliveries may reach 127.0.0.1 (the receivers), as [delivery]
// allow_hosts says.
func startTrigEnv(t *testing.T, o trigEnvOpts) *trigEnv {
	t.Helper()
	if o.file == "" {
		o.file = "[]"
	}
	return &trigEnv{Stack: apptest.Start(t, apptest.Options{Triggers: o.file, Agents: o.agents, Config: o.config})}
}

// triggerOut is a trigger in an admin response.
type triggerOut struct {
	ID             string `json:"triggerId"`
	Condition      string `json:"condition"`
	Source         string `json:"source"`
	Status         string `json:"status"`
	DisabledReason string `json:"disabledReason"`
	Counts         *struct {
		Matched, Delivered, Dead, FailedAttempts, EvalErrors int64
	} `json:"counts"`
	LastError           string  `json:"lastError"`
	SecretRotatingUntil int64   `json:"secretRotatingUntil"`
	FileError           string  `json:"fileError"`
	Secret              *string `json:"secret"`
}

type attemptOut struct {
	At        int64  `json:"at"`
	Status    int    `json:"status"`
	LatencyMs *int64 `json:"latencyMs"`
	Error     string `json:"error"`
	Response  string `json:"response"`
}

type deliveryOut struct {
	ID            string       `json:"id"`
	TriggerID     string       `json:"triggerId"`
	EventID       string       `json:"eventId"`
	Status        string       `json:"status"`
	Attempts      []attemptOut `json:"attempts"`
	NextAttemptAt int64        `json:"nextAttemptAt"`
}

// parked reports whether d is pending and put back for about a minute, as
// a disabled trigger's rows are (not due again within 45 s). Only for
// triggers with a short timeout ("1s"): a row leased for an attempt is
// not due before the timeout and 30 s of slack either.
func (d deliveryOut) parked() bool {
	return d.Status == "pending" && d.NextAttemptAt > time.Now().Add(45*time.Second).UnixMilli()
}

func decodeInto(t testing.TB, r *response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

func (e *trigEnv) listTriggers(t testing.TB) map[string]triggerOut {
	t.Helper()
	var out struct {
		Triggers []triggerOut `json:"triggers"`
	}
	decodeInto(t, e.MustDo(t, http.StatusOK, "GET", "/admin/v1/triggers", ""), &out)
	m := map[string]triggerOut{}
	for _, tr := range out.Triggers {
		m[tr.ID] = tr
	}
	return m
}

func (e *trigEnv) getTrigger(t testing.TB, id string) triggerOut {
	t.Helper()
	var out triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "GET", "/admin/v1/triggers/"+id, ""), &out)
	return out
}

// register registers def and returns the shown secret.
func (e *trigEnv) register(t testing.TB, def string) string {
	t.Helper()
	var out triggerOut
	decodeInto(t, e.MustDo(t, http.StatusCreated, "POST", "/admin/v1/triggers", def), &out)
	if out.Secret == nil || !strings.HasPrefix(*out.Secret, "whsec_") {
		t.Fatalf("register: no generated secret in %+v", out)
	}
	return *out.Secret
}

func (e *trigEnv) deliveries(t testing.TB, query string) ([]deliveryOut, string) {
	t.Helper()
	var out struct {
		Deliveries []deliveryOut `json:"deliveries"`
		NextCursor *string       `json:"nextCursor"`
	}
	r := e.MustDo(t, http.StatusOK, "GET", "/admin/v1/deliveries?"+query, "")
	decodeInto(t, r, &out)
	if out.Deliveries == nil || out.NextCursor == nil {
		t.Fatalf("deliveries: want deliveries and nextCursor keys, got %s", r.Body)
	}
	return out.Deliveries, *out.NextCursor
}

// waitDeliveries polls the delivery log until cond holds.
func (e *trigEnv) waitDeliveries(t testing.TB, what, query string, cond func([]deliveryOut) bool) []deliveryOut {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, _ := e.deliveries(t, query)
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; deliveries %+v", what, ds)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// evaluatedThrough waits until the trigger evaluator's stored cursor is at
// the head of the log: every change committed so far has been evaluated
// and the outbox rows it matched are committed (they commit with the
// cursor). "No row for that change" is checked after this, never after a
// sleep.
func (e *trigEnv) evaluatedThrough(t testing.TB) {
	t.Helper()
	head := e.Head(t)
	apptest.WaitFor(t, fmt.Sprintf("the trigger cursor at the head (%d)", head), func() bool {
		pos, err := e.Store.Cursor(context.Background(), "triggers")
		return err == nil && pos >= head
	})
}

func wantErr(t testing.TB, what string, r *response, status int, contains ...string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, status, r.Body)
	}
	checkErrorShape(t, r)
	for _, c := range contains {
		if !strings.Contains(strings.ToLower(string(r.Body)), strings.ToLower(c)) {
			t.Errorf("%s: error %s does not mention %q", what, r.Body, c)
		}
	}
}

// wantCode is wantErr that checks the error's code name too: the body is
// the contract, and two errors of one status (BAD_REQUEST, INVALID_JSON)
// tell a client different things.
func wantCode(t testing.TB, what string, r *response, status int, code string, contains ...string) {
	t.Helper()
	wantErr(t, what, r, status, contains...)
	var e struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Code != code {
		t.Errorf("%s: error code %q (%v), want %q; body %s", what, e.Code, err, code, r.Body)
	}
}

func extDef(id, u, extra string) string {
	return fmt.Sprintf(`{"triggerId":%q,"collection":"items","events":["create","update"],"url":%q%s}`, id, u, extra)
}

func fileDef(id, u, extra string) string {
	return fmt.Sprintf(`{"triggerId":%q,"collection":"files","events":["create"],"url":%q%s}`, id, u, extra)
}

func TestTriggersAdmin_ListShowsFileTriggersAndSecretOnce(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f-gen", rc.URL, "") + "," +
		fileDef("f-fixed", rc.URL, `,"secret":"`+whFixedSecret+`"`) + "]"})
	first := e.listTriggers(t)
	gen, fixed := first["f-gen"], first["f-fixed"]
	if gen.Source != "file" || gen.Status != "enabled" || gen.Counts == nil {
		t.Fatalf("f-gen = %+v, want source file, status enabled, counts", gen)
	}
	if fixed.Source != "file" || fixed.Status != "enabled" || fixed.Counts == nil {
		t.Fatalf("f-fixed = %+v", fixed)
	}
	if gen.Secret == nil || !strings.HasPrefix(*gen.Secret, "whsec_") {
		t.Fatalf("f-gen: first list shows no generated secret: %+v", gen)
	}
	if fixed.Secret != nil {
		t.Fatalf("f-fixed: the file's secret is shown: %q", *fixed.Secret)
	}
	r := e.MustDo(t, http.StatusOK, "GET", "/admin/v1/triggers", "")
	if strings.Contains(string(r.Body), `"secret"`) || strings.Contains(string(r.Body), "whsec_") {
		t.Fatalf("second list shows a secret: %s", r.Body)
	}
	for _, id := range []string{"f-gen", "f-fixed"} {
		if tr := e.getTrigger(t, id); tr.Secret != nil {
			t.Fatalf("GET %s shows a secret after it was shown", id)
		}
	}
	// The shown generated secret signs the file trigger's deliveries.
	e.Put(t, "files/a", `{"n":1}`)
	got := rc.WaitFor(t, "two deliveries", apptest.AtLeast(2))
	for _, g := range got {
		if g.Body["triggerId"] == "f-gen" {
			apptest.Verify(t, *gen.Secret, g)
		} else {
			apptest.Verify(t, whFixedSecret, g)
		}
	}
}

func TestTriggersAdmin_RegisterDeliversSignedWebhook(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	r := e.MustDo(t, http.StatusCreated, "POST", "/admin/v1/triggers",
		extDef("ext", rc.URL, `,"condition":"event.document.data.role == 'user'","headers":{"X-Team":"core"}`))
	if loc := r.Header.Get("Location"); loc != "/admin/v1/triggers/ext" {
		t.Errorf("Location = %q", loc)
	}
	var reg triggerOut
	decodeInto(t, r, &reg)
	if reg.Secret == nil || !strings.HasPrefix(*reg.Secret, "whsec_") || reg.Source != "api" || reg.Status != "enabled" {
		t.Fatalf("201 body %s", r.Body)
	}
	secret := *reg.Secret
	if tr := e.getTrigger(t, "ext"); tr.Secret != nil {
		t.Fatal("GET after register shows the secret again")
	}
	if tr := e.listTriggers(t)["ext"]; tr.Secret != nil || tr.Source != "api" {
		t.Fatalf("list after register: %+v", tr)
	}

	e.Put(t, "items/skip", `{"role":"assistant"}`)
	e.Put(t, "items/m1", `{"role":"user"}`)
	rc.WaitFor(t, "delivery of m1", apptest.HasDoc("m1"))
	e.evaluatedThrough(t)
	e.waitDeliveries(t, "the one row delivered", "triggerId=ext", func(ds []deliveryOut) bool {
		if len(ds) != 1 {
			t.Fatalf("%d rows, want 1 (the condition filters skip): %+v", len(ds), ds)
		}
		return ds[0].Status == "delivered"
	})
	got := rc.Requests()
	if len(got) != 1 {
		t.Fatalf("got %d requests, want 1 (the condition filters skip)", len(got))
	}
	g := got[0]
	apptest.Verify(t, secret, g)
	if g.Header.Get("X-Team") != "core" || g.Header.Get("Content-Type") != "application/json" ||
		!strings.HasPrefix(g.Header.Get("User-Agent"), "Loom/") {
		t.Errorf("headers %v", g.Header)
	}
	if g.Body["type"] != "document.create" || g.Body["triggerId"] != "ext" || g.Body["id"] != g.ID() {
		t.Errorf("body %s", g.Raw)
	}
	if strings.Contains(string(g.Raw), apptest.AdminKey) {
		t.Error("the admin key travels in the body")
	}

	// Refused registrations answer the error and commit nothing.
	post := func(name, def string, status int, mentions string) apptest.Scenario {
		code := map[int]string{http.StatusConflict: "CONFLICT", http.StatusBadRequest: "BAD_REQUEST"}[status]
		return apptest.Scenario{Name: name, Method: "POST", URL: "/admin/v1/triggers", Body: def,
			ExpectedStatus: status, ExpectedContent: []string{mentions, `"code":"` + code + `"`}}
	}
	scenarios := []apptest.Scenario{
		post("duplicate id", extDef("ext", rc.URL, ""), http.StatusConflict, "ext"),
		post("bad CEL", extDef("bad1", rc.URL, `,"condition":"event.document.data.role ==="`), http.StatusBadRequest, "condition"),
		post("bad events", fmt.Sprintf(`{"triggerId":"bad2","collection":"items","events":["insert"],"url":%q}`, rc.URL), http.StatusBadRequest, "insert"),
		post("no events", fmt.Sprintf(`{"triggerId":"bad3","collection":"items","events":[],"url":%q}`, rc.URL), http.StatusBadRequest, "events"),
		post("unknown key", extDef("bad4", rc.URL, `,"bogusKey":1`), http.StatusBadRequest, "bogusKey"),
		post("bad url", extDef("bad5", "ftp://x", ""), http.StatusBadRequest, "url"),
		post("bad id", extDef("bad id!", rc.URL, ""), http.StatusBadRequest, "triggerId"),
	}
	for _, id := range []string{"bad1", "bad2", "bad3", "bad4", "bad5"} {
		scenarios = append(scenarios, apptest.Scenario{Name: "GET " + id, Method: "GET", URL: "/admin/v1/triggers/" + id, ExpectedStatus: http.StatusNotFound, ExpectedContent: []string{`"code":"NOT_FOUND"`}})
	}
	apptest.RunScenarios(t, e.Stack, scenarios)
}

func TestTriggersAdmin_UpdateAndDelete(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f1", rc.URL, "") + "]"})
	wantCode(t, "PUT file trigger", e.Do(t, "PUT", "/admin/v1/triggers/f1", fileDef("f1", rc.URL, `,"condition":"false"`), nil), http.StatusConflict, "CONFLICT", "triggers.json")
	wantCode(t, "DELETE file trigger", e.Do(t, "DELETE", "/admin/v1/triggers/f1", "", nil), http.StatusConflict, "CONFLICT", "triggers.json")
	wantCode(t, "PUT unknown", e.Do(t, "PUT", "/admin/v1/triggers/nope", extDef("nope", rc.URL, ""), nil), http.StatusNotFound, "NOT_FOUND")
	wantCode(t, "DELETE unknown", e.Do(t, "DELETE", "/admin/v1/triggers/nope", "", nil), http.StatusNotFound, "NOT_FOUND")

	secret := e.register(t, extDef("ext", rc.URL, `,"condition":"event.document.data.n == 1"`))
	var upd triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "PUT", "/admin/v1/triggers/ext", extDef("ext", rc.URL, `,"condition":"event.document.data.n == 2"`)), &upd)
	if upd.Condition != "event.document.data.n == 2" || upd.Secret != nil {
		t.Fatalf("PUT answer %+v", upd)
	}
	wantCode(t, "PUT id mismatch", e.Do(t, "PUT", "/admin/v1/triggers/ext", extDef("other", rc.URL, ""), nil), http.StatusBadRequest, "BAD_REQUEST", "other")
	wantCode(t, "PUT bad CEL", e.Do(t, "PUT", "/admin/v1/triggers/ext", extDef("ext", rc.URL, `,"condition":"((("`), nil), http.StatusBadRequest, "BAD_REQUEST", "condition")
	if tr := e.getTrigger(t, "ext"); tr.Condition != "event.document.data.n == 2" {
		t.Fatalf("after a bad PUT the condition is %q", tr.Condition)
	}
	e.Put(t, "items/one", `{"n":1}`)
	e.Put(t, "items/two", `{"n":2}`)
	got := rc.WaitFor(t, "delivery of two", apptest.HasDoc("two"))
	apptest.Verify(t, secret, got[0]) // the secret is kept by an update without one
	ds := e.waitDeliveries(t, "one delivered row", "triggerId=ext", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "delivered" })
	if apptest.HasDoc("one")(rc.Requests()) || len(ds) != 1 {
		t.Fatalf("the old condition still applies: %d rows", len(ds))
	}

	e.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/triggers/ext", "")
	wantCode(t, "GET deleted", e.Do(t, "GET", "/admin/v1/triggers/ext", "", nil), http.StatusNotFound, "NOT_FOUND")
	if _, ok := e.listTriggers(t)["ext"]; ok {
		t.Fatal("deleted trigger still listed")
	}
	// The id can be registered again.
	e.register(t, extDef("ext", rc.URL, ""))
}

func TestTriggersAdmin_DisableEnable(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, ""))
	var tr triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/disable", ""), &tr)
	if tr.Status != "disabled" || tr.DisabledReason == "" {
		t.Fatalf("after disable: %+v", tr)
	}
	if g := e.getTrigger(t, "ext"); g.Status != "disabled" {
		t.Fatalf("GET after disable: %+v", g)
	}
	e.Put(t, "items/while-off", `{"n":1}`)
	e.evaluatedThrough(t)
	if ds, _ := e.deliveries(t, "triggerId=ext"); len(ds) != 0 {
		t.Fatalf("a disabled trigger matched: %+v", ds)
	}
	if n := len(rc.Requests()); n != 0 {
		t.Fatalf("disabled trigger delivered %d requests", n)
	}
	tr = triggerOut{}
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", ""), &tr)
	if tr.Status != "enabled" || tr.DisabledReason != "" {
		t.Fatalf("after enable: %+v", tr)
	}
	e.Put(t, "items/after-on", `{"n":2}`)
	rc.WaitFor(t, "delivery after enable", apptest.HasDoc("after-on"))
	// after-on is the last change: with its row delivered, every row is in.
	e.waitDeliveries(t, "the row of after-on delivered", "triggerId=ext", func(ds []deliveryOut) bool {
		if len(ds) > 1 {
			t.Fatalf("%d rows, want 1 (after-on): %+v", len(ds), ds)
		}
		return len(ds) == 1 && ds[0].Status == "delivered"
	})
	if apptest.HasDoc("while-off")(rc.Requests()) {
		t.Error("a change committed while the trigger was disabled was delivered")
	}
	wantCode(t, "enable unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/enable", "", nil), http.StatusNotFound, "NOT_FOUND")
	wantCode(t, "disable unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/disable", "", nil), http.StatusNotFound, "NOT_FOUND")
}

func TestTriggersAdmin_RotateSecretSignsWithBoth(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f-fixed", rc.URL, `,"secret":"`+whFixedSecret+`"`) + "]"})
	oldSecret := e.register(t, extDef("ext", rc.URL, ""))
	e.Put(t, "items/before", `{"n":1}`)
	got := rc.WaitFor(t, "first delivery", apptest.HasDoc("before"))
	apptest.Verify(t, oldSecret, got[0])
	if sig := got[0].Header.Get("webhook-signature"); len(strings.Fields(sig)) != 1 {
		t.Fatalf("before rotation: signature %q, want one", sig)
	}

	var rot triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/rotate-secret", ""), &rot)
	if rot.Secret == nil || !strings.HasPrefix(*rot.Secret, "whsec_") || *rot.Secret == oldSecret {
		t.Fatalf("rotate answer %+v", rot)
	}
	newSecret := *rot.Secret
	if rot.SecretRotatingUntil <= time.Now().UnixMilli() {
		t.Errorf("secretRotatingUntil = %d, want in the future", rot.SecretRotatingUntil)
	}
	if g := e.getTrigger(t, "ext"); g.Secret != nil {
		t.Fatal("GET after rotation shows the secret again")
	}
	e.Put(t, "items/after", `{"n":2}`)
	var after apptest.Request
	for _, g := range rc.WaitFor(t, "delivery after rotation", apptest.HasDoc("after")) {
		if g.DocID() == "after" {
			after = g
		}
	}
	sig := after.Header.Get("webhook-signature")
	parts := strings.Split(sig, " ")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "v1,") || !strings.HasPrefix(parts[1], "v1,") {
		t.Fatalf("signature during rotation %q, want two space-separated v1 signatures", sig)
	}
	apptest.Verify(t, oldSecret, after)
	apptest.Verify(t, newSecret, after)

	wantCode(t, "rotate file secret", e.Do(t, "POST", "/admin/v1/triggers/f-fixed/rotate-secret", "", nil), http.StatusConflict, "CONFLICT", "triggers.json")
	wantCode(t, "rotate unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/rotate-secret", "", nil), http.StatusNotFound, "NOT_FOUND")

	// A file trigger with a generated secret can rotate it, and a reload
	// keeps the rotated secret.
	if err := os.WriteFile(e.TriggersFile, []byte("["+fileDef("f-gen", rc.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	rot = triggerOut{}
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/f-gen/rotate-secret", ""), &rot)
	if rot.Secret == nil {
		t.Fatal("rotate f-gen: no secret")
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	e.Put(t, "files/z", `{"n":1}`)
	for _, g := range rc.WaitFor(t, "f-gen delivery", apptest.HasDoc("z")) {
		if g.DocID() == "z" {
			apptest.Verify(t, *rot.Secret, g)
		}
	}
}

func TestTriggersAdmin_DeliveriesLogPagingAndReplay(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	other := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, ""))
	e.register(t, fmt.Sprintf(`{"triggerId":"other","collection":"others","events":["create"],"url":%q}`, other.URL))
	for i := 1; i <= 3; i++ {
		e.Put(t, fmt.Sprintf("items/d%d", i), `{"n":1}`)
	}
	e.Put(t, "others/o1", `{"n":1}`)
	e.waitDeliveries(t, "3 delivered", "triggerId=ext&status=delivered", func(ds []deliveryOut) bool { return len(ds) == 3 })
	other.WaitFor(t, "other delivery", apptest.HasDoc("o1"))
	// The receiver answers before the attempt is recorded: wait for that too.
	e.waitDeliveries(t, "other delivered", "triggerId=other&status=delivered", func(ds []deliveryOut) bool { return len(ds) == 1 })

	page1, cur := e.deliveries(t, "triggerId=ext&status=delivered&limit=2")
	if len(page1) != 2 || cur == "" {
		t.Fatalf("page 1: %d rows, cursor %q", len(page1), cur)
	}
	page2, cur2 := e.deliveries(t, "triggerId=ext&status=delivered&limit=2&cursor="+url.QueryEscape(cur))
	if len(page2) != 1 || cur2 != "" {
		t.Fatalf("page 2: %d rows, cursor %q", len(page2), cur2)
	}
	all := append(page1, page2...)
	seen := map[string]bool{}
	byEvent := map[string]apptest.Request{}
	for _, g := range rc.Requests() {
		byEvent[g.ID()] = g
	}
	for _, d := range all {
		if seen[d.ID] {
			t.Fatalf("delivery %s on two pages", d.ID)
		}
		seen[d.ID] = true
		if d.TriggerID != "ext" || d.Status != "delivered" || d.EventID == "" || len(d.Attempts) != 1 {
			t.Fatalf("delivery %+v", d)
		}
		a := d.Attempts[0]
		if a.At <= 0 || a.Status != 200 || a.LatencyMs == nil || *a.LatencyMs < 0 || a.Response != `{"ok":true}` || a.Error != "" {
			t.Fatalf("attempt %+v", a)
		}
		if _, ok := byEvent[d.EventID]; !ok {
			t.Fatalf("eventId %s is not a webhook-id the receiver saw", d.EventID)
		}
	}
	if ds, _ := e.deliveries(t, "triggerId=other"); len(ds) != 1 || ds[0].TriggerID != "other" {
		t.Fatalf("filter by trigger: %+v", ds)
	}
	if ds, _ := e.deliveries(t, "status=pending"); len(ds) != 0 {
		t.Fatalf("pending: %+v", ds)
	}
	if ds, _ := e.deliveries(t, ""); len(ds) != 4 {
		t.Fatalf("all: %d rows, want 4", len(ds))
	}
	wantCode(t, "bad status", e.Do(t, "GET", "/admin/v1/deliveries?status=bogus", "", nil), http.StatusBadRequest, "BAD_REQUEST", "bogus")
	wantCode(t, "bad limit", e.Do(t, "GET", "/admin/v1/deliveries?limit=0", "", nil), http.StatusBadRequest, "BAD_REQUEST", "limit")
	wantCode(t, "bad cursor", e.Do(t, "GET", "/admin/v1/deliveries?cursor=garbage", "", nil), http.StatusBadRequest, "BAD_REQUEST", "cursor")

	target := page2[0]
	before := len(rc.Requests())
	r := e.MustDo(t, http.StatusAccepted, "POST", "/admin/v1/deliveries/"+target.ID+"/replay", "")
	if m := r.JSON(t); m["id"] != target.ID {
		t.Errorf("replay answer %s", r.Body)
	}
	got := rc.WaitFor(t, "replayed request", func(rs []apptest.Request) bool { return len(rs) > before })
	replayed := got[len(got)-1]
	if replayed.ID() != target.EventID {
		t.Fatalf("replay webhook-id %q, want %q", replayed.ID(), target.EventID)
	}
	ds := e.waitDeliveries(t, "second attempt", "triggerId=ext", func(ds []deliveryOut) bool {
		for _, d := range ds {
			if d.ID == target.ID {
				return len(d.Attempts) == 2 && d.Status == "delivered"
			}
		}
		return false
	})
	_ = ds
	wantCode(t, "replay unknown", e.Do(t, "POST", "/admin/v1/deliveries/nope/replay", "", nil), http.StatusNotFound, "NOT_FOUND")
}

func TestTriggersAdmin_Reload(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f1", rc.URL, "") + "]"})
	if _, ok := e.listTriggers(t)["f1"]; !ok {
		t.Fatal("f1 not listed")
	}
	if err := os.WriteFile(e.TriggersFile, []byte("["+fileDef("f2", rc.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	list := e.listTriggers(t)
	if _, ok := list["f2"]; !ok {
		t.Fatalf("f2 not listed after reload: %v", list)
	}
	// The reload itself does not use up the new trigger's one showing of
	// its generated secret.
	if sec := list["f2"].Secret; sec == nil || !strings.HasPrefix(*sec, "whsec_") {
		t.Fatalf("f2's generated secret was not shown after the reload: %+v", list["f2"])
	}
	if _, ok := list["f1"]; ok {
		t.Fatal("f1 still listed after reload")
	}
	e.Put(t, "files/x", `{"n":1}`)
	got := rc.WaitFor(t, "delivery from f2", apptest.HasDoc("x"))
	if got[0].Body["triggerId"] != "f2" {
		t.Fatalf("delivered by %v", got[0].Body["triggerId"])
	}

	bad := "[" + fileDef("f3", rc.URL, `,"condition":"event.nope(("`) + "]"
	if err := os.WriteFile(e.TriggersFile, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "bad reload", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest, "BAD_REQUEST", "f3")
	list = e.listTriggers(t)
	if _, ok := list["f3"]; ok {
		t.Fatal("f3 listed after a failed reload")
	}
	f2, ok := list["f2"]
	if !ok {
		t.Fatal("f2 dropped by a failed reload")
	}
	if f2.FileError == "" {
		t.Error("fileError not reported after a failed reload")
	}
	if err := os.WriteFile(e.TriggersFile, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "unparsable reload", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest, "BAD_REQUEST")
	if _, ok := e.listTriggers(t)["f2"]; !ok {
		t.Fatal("f2 dropped by an unparsable file")
	}

	// A file id that a registered trigger already uses is refused.
	e.register(t, extDef("ext", rc.URL, ""))
	if err := os.WriteFile(e.TriggersFile, []byte("["+fileDef("f2", rc.URL, "")+","+fileDef("ext", rc.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "reload with a registered id", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest, "BAD_REQUEST", "ext")
	if tr := e.getTrigger(t, "ext"); tr.Source != "api" {
		t.Fatalf("ext source %q after a refused reload", tr.Source)
	}
	// A good file clears fileError.
	if err := os.WriteFile(e.TriggersFile, []byte("["+fileDef("f2", rc.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	if tr := e.getTrigger(t, "f2"); tr.FileError != "" {
		t.Errorf("fileError %q after a good reload", tr.FileError)
	}
}

func TestTriggersAdmin_AuthRequired(t *testing.T) {
	e := startTrigEnv(t, trigEnvOpts{})
	routes := []struct{ method, path, body string }{
		{"GET", "/admin/v1/triggers", ""},
		{"POST", "/admin/v1/triggers", extDef("x", "http://127.0.0.1:1/", "")},
		{"POST", "/admin/v1/triggers/reload", ""},
		{"GET", "/admin/v1/triggers/x", ""},
		{"PUT", "/admin/v1/triggers/x", extDef("x", "http://127.0.0.1:1/", "")},
		{"DELETE", "/admin/v1/triggers/x", ""},
		{"POST", "/admin/v1/triggers/x/enable", ""},
		{"POST", "/admin/v1/triggers/x/disable", ""},
		{"POST", "/admin/v1/triggers/x/rotate-secret", ""},
		{"GET", "/admin/v1/deliveries", ""},
		{"POST", "/admin/v1/deliveries/x/replay", ""},
		{"POST", "/admin/v1/deliveries/x/cancel", ""},
	}
	u := e.SignUp(t, "alice")
	var scenarios []apptest.Scenario
	for _, rt := range routes {
		for _, who := range []struct {
			name    string
			headers map[string]string
			status  int
			code    string
		}{
			{"anonymous", apptest.Anonymous, http.StatusUnauthorized, "UNAUTHENTICATED"},
			{"bad key", apptest.Bearer("wrong-key"), http.StatusUnauthorized, "UNAUTHENTICATED"},
			{"user", u.Header(), http.StatusForbidden, "PERMISSION_DENIED"},
		} {
			scenarios = append(scenarios, apptest.Scenario{Name: who.name + " " + rt.method + " " + rt.path,
				Method: rt.method, URL: rt.path, Body: rt.body, Headers: who.headers, ExpectedStatus: who.status,
				ExpectedContent: []string{`"code":"` + who.code + `"`}})
		}
	}
	apptest.RunScenarios(t, e.Stack, scenarios)
	if len(e.listTriggers(t)) != 0 {
		t.Fatal("a rejected request registered a trigger")
	}
}

func TestTriggersAdmin_DisabledServer404(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	r := env.Do(t, "GET", "/admin/v1/triggers", "", nil)
	wantCode(t, "no pipeline", r, http.StatusNotFound, "NOT_FOUND", "not enabled")
}

func TestTriggersWebhook_Metrics(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, ""))
	e.Put(t, "items/m", `{"n":1}`)
	rc.WaitFor(t, "delivery", apptest.HasDoc("m"))
	e.waitDeliveries(t, "delivered", "status=delivered", func(ds []deliveryOut) bool { return len(ds) == 1 })
	body := string(e.MustDo(t, http.StatusOK, "GET", "/metrics", "").Body)
	for _, want := range []string{
		`loom_trigger_matches_total{trigger="ext"} 1`,
		`loom_webhook_attempts_total{outcome="delivered",trigger="ext"} 1`,
		`loom_webhook_attempt_duration_seconds_count{trigger="ext"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestTriggersWebhook_RetryAfterHonoured(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.UnavailableOnce)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, `,"retryPolicy":{"maxAttempts":3,"initialBackoff":"10ms","maxBackoff":"10ms"}`))
	e.Put(t, "items/r", `{"n":1}`)
	got := rc.WaitFor(t, "the retry", apptest.AtLeast(2))
	if gap := got[1].At.Sub(got[0].At); gap < 950*time.Millisecond {
		t.Fatalf("retry came %v after a 503 with Retry-After: 1", gap)
	}
	if got[0].ID() != got[1].ID() {
		t.Fatalf("webhook-id changed across retries: %q, %q", got[0].ID(), got[1].ID())
	}
	if got[1].Body["attempt"] != float64(2) {
		t.Errorf("attempt = %v, want 2", got[1].Body["attempt"])
	}
	ds := e.waitDeliveries(t, "delivered", "triggerId=ext", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "delivered" })
	if as := ds[0].Attempts; len(as) != 2 || as[0].Status != 503 || as[1].Status != 200 {
		t.Fatalf("attempts %+v", as)
	}
}

func TestTriggersWebhook_TimeoutRecorded(t *testing.T) {
	release := make(chan struct{})
	rc := apptest.NewReceiver(t, func(ctx context.Context, _ http.ResponseWriter, _ apptest.Request) int {
		select {
		case <-ctx.Done():
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return 0
	})
	t.Cleanup(func() { close(release) }) // runs before the receiver closes
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, `,"timeout":"1s","retryPolicy":{"maxAttempts":1}`))
	start := time.Now()
	e.Put(t, "items/slow", `{"n":1}`)
	ds := e.waitDeliveries(t, "dead delivery", "triggerId=ext", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
	if el := time.Since(start); el < time.Second {
		t.Errorf("gave up after %v, before the 1s timeout", el)
	}
	a := ds[0].Attempts
	if len(a) != 1 || !strings.Contains(strings.ToLower(a[0].Error), "timeout") || a[0].Status != 0 {
		t.Fatalf("attempts %+v, want one with a timeout error", a)
	}
	if tr := e.getTrigger(t, "ext"); !strings.Contains(strings.ToLower(tr.LastError), "timeout") {
		t.Errorf("lastError = %q", tr.LastError)
	}
}

func TestTriggersWebhook_SSRFBlocked(t *testing.T) {
	t.Run("metadata", func(t *testing.T) {
		e := startTrigEnv(t, trigEnvOpts{})
		e.register(t, extDef("meta", "http://169.254.169.254/latest/meta-data/", `,"timeout":"2s","retryPolicy":{"maxAttempts":1}`))
		e.Put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=meta", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "169.254.169.254") || !strings.Contains(a[0].Error, "link-local") {
			t.Fatalf("attempts %+v, want the blocked range named", a)
		}
	})
	t.Run("loopback-not-allowed", func(t *testing.T) {
		rc := apptest.NewReceiver(t, nil)
		e := startTrigEnv(t, trigEnvOpts{config: func(c *config.Config) { c.Delivery.AllowHosts = nil }})
		e.register(t, extDef("lo", rc.URL, `,"retryPolicy":{"maxAttempts":1}`))
		e.Put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=lo", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "127.0.0.0/8") || !strings.Contains(a[0].Error, "loopback") {
			t.Fatalf("attempts %+v, want the loopback range named", a)
		}
		if n := len(rc.Requests()); n != 0 {
			t.Fatalf("blocked receiver saw %d requests", n)
		}
	})
	t.Run("redirect-not-followed", func(t *testing.T) {
		target := apptest.NewReceiver(t, nil)
		rc := apptest.NewReceiver(t, func(_ context.Context, w http.ResponseWriter, _ apptest.Request) int {
			w.Header().Set("Location", target.URL+"/elsewhere")
			return http.StatusFound
		})
		e := startTrigEnv(t, trigEnvOpts{})
		e.register(t, extDef("redir", rc.URL, `,"retryPolicy":{"maxAttempts":1}`))
		e.Put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=redir", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || a[0].Status != http.StatusFound {
			t.Fatalf("attempts %+v, want one with status 302", a)
		}
		// A followed redirect reaches the target before the attempt
		// returns, so before the row is recorded dead.
		if n := len(target.Requests()); n != 0 {
			t.Fatalf("the redirect was followed: target saw %d requests", n)
		}
		if tr := e.getTrigger(t, "redir"); tr.Counts == nil || tr.Counts.Dead != 1 || tr.Counts.Delivered != 0 {
			t.Fatalf("counts %+v", tr.Counts)
		}
	})
}

func TestTriggersWebhook_AutoDisableAfterDead(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	// items/a and items/b are two origins: enough with DisableOrigins 2.
	e := startTrigEnv(t, trigEnvOpts{config: func(c *config.Config) {
		c.Delivery.DisableAfterDead, c.Delivery.DisableAfterDeadOrigins = 2, 2
	}})
	e.register(t, extDef("ext", rc.URL, `,"retryPolicy":{"maxAttempts":1}`))
	e.Put(t, "items/a", `{"n":1}`)
	e.waitDeliveries(t, "first dead", "triggerId=ext&status=dead", func(ds []deliveryOut) bool { return len(ds) == 1 })
	if tr := e.getTrigger(t, "ext"); tr.Status != "enabled" {
		t.Fatalf("disabled after one dead delivery: %+v", tr)
	}
	e.Put(t, "items/b", `{"n":1}`)
	e.waitDeliveries(t, "second dead", "triggerId=ext&status=dead", func(ds []deliveryOut) bool { return len(ds) == 2 })
	tr := e.waitTrigger(t, "ext", "the trigger disabled", func(tr triggerOut) bool { return tr.Status == "disabled" })
	if tr.Status != "disabled" || !strings.Contains(tr.DisabledReason, "dead") {
		t.Fatalf("after two dead deliveries: status %q reason %q", tr.Status, tr.DisabledReason)
	}
	if !strings.Contains(tr.LastError, "500") {
		t.Errorf("lastError = %q", tr.LastError)
	}
	// Enabling resumes.
	rc.SetRespond(nil)
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", "")
	e.Put(t, "items/c", `{"n":1}`)
	rc.WaitFor(t, "delivery after enable", func(rs []apptest.Request) bool {
		for _, r := range rs {
			if r.DocID() == "c" {
				return true
			}
		}
		return false
	})
}

// A trigger registered after a change does not fire for it, even when the
// evaluator reaches the change only after the registration: the test holds
// the evaluator lease for another node while the change is committed and
// the trigger registered, so the only thing that can keep the change from
// matching is the trigger's ActiveFrom (not the evaluator having passed the
// change already, which a sleep before the registration would ensure).
func TestTriggersAdmin_RegisteredTriggerIgnoresPastChanges(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	ctx := context.Background()
	dir := t.TempDir()
	st := apptest.OpenStore(t, dir)
	release := holdEvaluatorLease(t, st)
	e := &trigEnv{Stack: apptest.Start(t, apptest.Options{Store: st, DataDir: dir, Triggers: "[]"})}
	e.Put(t, "items/old", `{"n":1}`)
	old := e.Head(t)
	e.register(t, extDef("ext", rc.URL, ""))
	if pos, err := st.Cursor(ctx, "triggers"); err != nil || pos >= old {
		t.Fatalf("trigger cursor %d (%v) at the registration, want it before items/old (%d): the test would check nothing", pos, err, old)
	}
	e.Put(t, "items/new", `{"n":1}`)
	release()
	// The evaluator now reads items/old, the registration and items/new,
	// in that order: a row for items/old would be committed no later than
	// the row for items/new.
	rc.WaitFor(t, "new", apptest.HasDoc("new"))
	ds := e.waitDeliveries(t, "the row of items/new delivered", "triggerId=ext", func(ds []deliveryOut) bool {
		for _, d := range ds {
			if d.Status == "delivered" {
				return true
			}
		}
		return false
	})
	if len(ds) != 1 {
		t.Fatalf("a trigger registered later has %d outbox rows, want 1 (items/new only): %+v", len(ds), ds)
	}
	if apptest.HasDoc("old")(rc.Requests()) {
		t.Fatal("a trigger registered later fired for a past change")
	}
}

// evaluatorLease is the document whose lease makes a node the one trigger
// evaluator (triggers/evaluator.go, claimEvaluator).
const evaluatorLease = "_trigger_meta/evaluator-lease"

// holdEvaluatorLease makes a node that does not exist the trigger
// evaluator of st, so a node started on st evaluates nothing until
// release; it must be called before that node starts (a running node
// renews its own lease). The node retries the claim every few seconds.
func holdEvaluatorLease(t *testing.T, st collections.Store) (release func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Commit(ctx, triggers.SystemDB, []collections.Write{{Type: collections.WriteCreate, Path: evaluatorLease, Data: map[string]any{}}}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := collections.Claim(ctx, st, triggers.SystemDB, evaluatorLease, "test-holder", time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		// A lease that ended an hour ago: free for the next claim.
		if _, err := collections.Claim(ctx, st, triggers.SystemDB, evaluatorLease, "test-holder", -time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTriggersAdmin_DisableParksPendingRetries(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.UnavailableOnce)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, `,"timeout":"1s","retryPolicy":{"maxAttempts":3,"initialBackoff":"10ms","maxBackoff":"10ms"}`))
	e.Put(t, "items/p", `{"n":1}`)
	rc.WaitFor(t, "first attempt", apptest.AtLeast(1))
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/disable", "")
	// The retry (10 ms after the 503) falls due, finds the trigger
	// disabled and puts the row back for a minute: after that, a retry
	// that was made would show.
	e.waitDeliveries(t, "the retry parked", "triggerId=ext", func(ds []deliveryOut) bool {
		return len(ds) == 1 && (ds[0].parked() && len(ds[0].Attempts) > 0 || ds[0].Status != "pending")
	})
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("a disabled trigger retried: %d requests", n)
	}
	if ds, _ := e.deliveries(t, "triggerId=ext&status=pending"); len(ds) != 1 || len(ds[0].Attempts) != 1 {
		t.Fatalf("pending rows while disabled: %+v", ds)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", "")
	got := rc.WaitFor(t, "the parked retry after enable", apptest.AtLeast(2))
	if got[0].ID() != got[1].ID() {
		t.Fatalf("the resumed retry has a new webhook-id")
	}
	e.waitDeliveries(t, "delivered", "triggerId=ext&status=delivered", func(ds []deliveryOut) bool { return len(ds) == 1 })
}

func TestTriggersWebhook_GoneDisablesTrigger(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.Status(http.StatusGone))
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.URL, `,"timeout":"1s"`))
	e.Put(t, "items/g", `{"n":1}`)
	rc.WaitFor(t, "the 410", apptest.HasDoc("g"))
	tr := e.waitTrigger(t, "ext", "the trigger disabled", func(tr triggerOut) bool { return tr.Status == "disabled" })
	if tr.Status != "disabled" || !strings.Contains(tr.DisabledReason, "410") {
		t.Fatalf("after a 410: status %q reason %q", tr.Status, tr.DisabledReason)
	}
	// The 410's row is parked, not retried.
	e.waitDeliveries(t, "the 410's row parked", "triggerId=ext", func(ds []deliveryOut) bool {
		return len(ds) == 1 && (ds[0].parked() && len(ds[0].Attempts) > 0 || ds[0].Status != "pending")
	})
	if ds, _ := e.deliveries(t, "triggerId=ext"); len(ds) != 1 || !ds[0].parked() || len(ds[0].Attempts) != 1 {
		t.Fatalf("after a 410: %+v, want the row pending and parked after one attempt", ds)
	}
	if n := len(rc.Requests()); n != 1 {
		t.Fatalf("%d requests after a 410, want 1", n)
	}
}

// A deleted trigger's pending deliveries must not go to a new trigger that
// reuses its id (Delete: "Its pending deliveries go dead"; README: a
// trigger added later fires only for changes after it was added).
func TestTriggersAdmin_DeleteThenReregisterDropsOldDeliveries(t *testing.T) {
	a := apptest.NewReceiver(t, apptest.Status(http.StatusInternalServerError))
	b := apptest.NewReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", a.URL, `,"retryPolicy":{"maxAttempts":5,"initialBackoff":"1s","maxBackoff":"1s"}`))
	e.Put(t, "items/old", `{"n":1}`)
	a.WaitFor(t, "first attempt at the old url", apptest.HasDoc("old"))
	e.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/triggers/ext", "")
	e.register(t, extDef("ext", b.URL, ""))
	e.Put(t, "items/new", `{"n":1}`)
	b.WaitFor(t, "new", apptest.HasDoc("new"))
	// The old row's retry (1 s after its 500) finds it belongs to the
	// deleted trigger and ends it dead without a request.
	ds := e.waitDeliveries(t, "the old row dead", "triggerId=ext&status=dead", func(ds []deliveryOut) bool { return len(ds) == 1 })
	if a := ds[0].Attempts; len(a) != 2 || a[0].Status != http.StatusInternalServerError || a[1].Status != 0 ||
		!strings.Contains(a[1].Error, "was deleted") {
		t.Fatalf("the deleted trigger's row: %+v; want the 500, then dead without a request", ds[0])
	}
	if apptest.HasDoc("old")(b.Requests()) {
		t.Fatal("the deleted trigger's pending delivery of items/old was sent to the re-registered trigger's url")
	}
}
