package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/triggers"
)

// whFixedSecret is a Standard Webhooks secret written into triggers.json.
const whFixedSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// whRequest is one webhook a whReceiver saw.
type whRequest struct {
	Header http.Header
	Raw    []byte
	Body   map[string]any
	At     time.Time
}

// ID is the webhook-id header.
func (r whRequest) ID() string { return r.Header.Get("webhook-id") }

// DocID is the id of the event's document.
func (r whRequest) DocID() string {
	ev, _ := r.Body["event"].(map[string]any)
	id, _ := ev["id"].(string)
	return id
}

// whReceiver is a real HTTP server recording webhooks; respond picks the
// answer (200 by default).
type whReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []whRequest
	respond func(w http.ResponseWriter, r *http.Request, n int) int
}

func newWHReceiver(t testing.TB, respond func(w http.ResponseWriter, r *http.Request, n int) int) *whReceiver {
	t.Helper()
	rc := &whReceiver{respond: respond}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		rc.mu.Lock()
		rc.got = append(rc.got, whRequest{Header: r.Header.Clone(), Raw: raw, Body: body, At: time.Now()})
		n := len(rc.got)
		respond := rc.respond
		rc.mu.Unlock()
		status := http.StatusOK
		if respond != nil {
			status = respond(w, r, n)
		}
		if status == 0 {
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// unavailableOnce answers the first request 503 with Retry-After: 1 and
// the later ones 200.
func unavailableOnce(w http.ResponseWriter, _ *http.Request, n int) int {
	if n == 1 {
		w.Header().Set("Retry-After", "1")
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

func (rc *whReceiver) requests() []whRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]whRequest(nil), rc.got...)
}

// waitFor polls until cond holds over the received requests.
func (rc *whReceiver) waitFor(t testing.TB, what string, cond func([]whRequest) bool) []whRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := rc.requests()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; got %d requests", what, len(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hasDoc reports whether a request for document id arrived.
func hasDoc(id string) func([]whRequest) bool {
	return func(rs []whRequest) bool {
		for _, r := range rs {
			if r.DocID() == id {
				return true
			}
		}
		return false
	}
}

// verifyWebhook checks r with the official Standard Webhooks library.
func verifyWebhook(t testing.TB, secret string, r whRequest) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook(%q): %v", secret, err)
	}
	if err := wh.Verify(r.Raw, r.Header); err != nil {
		t.Fatalf("standardwebhooks.Verify with %q: %v (signature %q)", secret, err, r.Header.Get("webhook-signature"))
	}
}

// trigEnv is a real server with a real trigger pipeline over one SQLite
// store.
type trigEnv struct {
	*testEnv
	Svc  *triggers.Service
	File string
}

type trigEnvOpts struct {
	file    string          // triggers.json content ("[]" if empty)
	tcfg    triggers.Config // Store, File, Transport, PollInterval, NodeID filled in
	guard   []string        // ssrf allow_hosts; nil: 127.0.0.1
	noAllow bool            // guard allows nothing
	auth    bool
}

// startTrigEnv opens a store with the trigger indexes, runs the pipeline
// and serves it; cleanup stops the server, then the pipeline, then closes
// the store.
func startTrigEnv(t *testing.T, o trigEnvOpts) *trigEnv {
	t.Helper()
	dir := t.TempDir()
	store, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "loom.db"), Indexes: triggers.Indexes})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	file := filepath.Join(dir, "triggers.json")
	if o.file == "" {
		o.file = "[]"
	}
	if err := os.WriteFile(file, []byte(o.file), 0o600); err != nil {
		t.Fatal(err)
	}
	allow := o.guard
	if allow == nil && !o.noAllow {
		allow = []string{"127.0.0.1"}
	}
	guard, err := ssrf.New(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := o.tcfg
	cfg.Store, cfg.File, cfg.Transport, cfg.NodeID, cfg.Registerer = store, file, guard.Transport(), "t", reg
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	svc, err := triggers.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("triggers.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = svc.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	scfg := server.Config{Triggers: svc, Registry: reg, RateLimit: -1}
	if o.auth {
		scfg.Auth = MustAuth(t, store, nil)
	}
	return &trigEnv{testEnv: MustStartServer(t, store, scfg), Svc: svc, File: file}
}

// put writes a document through the public API.
func (e *trigEnv) put(t testing.TB, path, data string) {
	t.Helper()
	r := e.Do(t, "PUT", api+"/documents/"+path, `{"doc":`+data+`}`, nil)
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("PUT %s: status=%d %s", path, r.Status, r.Body)
	}
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
	ID        string       `json:"id"`
	TriggerID string       `json:"triggerId"`
	EventID   string       `json:"eventId"`
	Status    string       `json:"status"`
	Attempts  []attemptOut `json:"attempts"`
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

func extDef(id, u, extra string) string {
	return fmt.Sprintf(`{"triggerId":%q,"collection":"items","events":["create","update"],"url":%q%s}`, id, u, extra)
}

func fileDef(id, u, extra string) string {
	return fmt.Sprintf(`{"triggerId":%q,"collection":"files","events":["create"],"url":%q%s}`, id, u, extra)
}

func TestTriggersAdmin_ListShowsFileTriggersAndSecretOnce(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f-gen", rc.srv.URL, "") + "," +
		fileDef("f-fixed", rc.srv.URL, `,"secret":"`+whFixedSecret+`"`) + "]"})
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
	e.put(t, "files/a", `{"n":1}`)
	got := rc.waitFor(t, "two deliveries", func(rs []whRequest) bool { return len(rs) >= 2 })
	for _, g := range got {
		if g.Body["triggerId"] == "f-gen" {
			verifyWebhook(t, *gen.Secret, g)
		} else {
			verifyWebhook(t, whFixedSecret, g)
		}
	}
}

func TestTriggersAdmin_RegisterDeliversSignedWebhook(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	r := e.MustDo(t, http.StatusCreated, "POST", "/admin/v1/triggers",
		extDef("ext", rc.srv.URL, `,"condition":"event.document.data.role == 'user'","headers":{"X-Team":"core"}`))
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

	e.put(t, "items/skip", `{"role":"assistant"}`)
	e.put(t, "items/m1", `{"role":"user"}`)
	got := rc.waitFor(t, "delivery of m1", hasDoc("m1"))
	time.Sleep(200 * time.Millisecond)
	got = rc.requests()
	if len(got) != 1 {
		t.Fatalf("got %d requests, want 1 (the condition filters skip)", len(got))
	}
	g := got[0]
	verifyWebhook(t, secret, g)
	if g.Header.Get("X-Team") != "core" || g.Header.Get("Content-Type") != "application/json" ||
		!strings.HasPrefix(g.Header.Get("User-Agent"), "Loom/") {
		t.Errorf("headers %v", g.Header)
	}
	if g.Body["type"] != "document.create" || g.Body["triggerId"] != "ext" || g.Body["id"] != g.ID() {
		t.Errorf("body %s", g.Raw)
	}
	if strings.Contains(string(g.Raw), testAdminKey) {
		t.Error("the admin key travels in the body")
	}

	wantErr(t, "duplicate id", e.Do(t, "POST", "/admin/v1/triggers", extDef("ext", rc.srv.URL, ""), nil), http.StatusConflict, "ext")
	wantErr(t, "bad CEL", e.Do(t, "POST", "/admin/v1/triggers", extDef("bad1", rc.srv.URL, `,"condition":"event.document.data.role ==="`), nil), http.StatusBadRequest, "condition")
	wantErr(t, "bad events", e.Do(t, "POST", "/admin/v1/triggers",
		fmt.Sprintf(`{"triggerId":"bad2","collection":"items","events":["insert"],"url":%q}`, rc.srv.URL), nil), http.StatusBadRequest, "insert")
	wantErr(t, "no events", e.Do(t, "POST", "/admin/v1/triggers",
		fmt.Sprintf(`{"triggerId":"bad3","collection":"items","events":[],"url":%q}`, rc.srv.URL), nil), http.StatusBadRequest, "events")
	wantErr(t, "unknown key", e.Do(t, "POST", "/admin/v1/triggers", extDef("bad4", rc.srv.URL, `,"bogusKey":1`), nil), http.StatusBadRequest, "bogusKey")
	wantErr(t, "bad url", e.Do(t, "POST", "/admin/v1/triggers", extDef("bad5", "ftp://x", ""), nil), http.StatusBadRequest, "url")
	wantErr(t, "bad id", e.Do(t, "POST", "/admin/v1/triggers", extDef("bad id!", rc.srv.URL, ""), nil), http.StatusBadRequest, "triggerId")
	for _, id := range []string{"bad1", "bad2", "bad3", "bad4", "bad5"} {
		wantErr(t, "GET "+id, e.Do(t, "GET", "/admin/v1/triggers/"+id, "", nil), http.StatusNotFound)
	}
}

func TestTriggersAdmin_UpdateAndDelete(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f1", rc.srv.URL, "") + "]"})
	wantErr(t, "PUT file trigger", e.Do(t, "PUT", "/admin/v1/triggers/f1", fileDef("f1", rc.srv.URL, `,"condition":"false"`), nil), http.StatusConflict, "triggers.json")
	wantErr(t, "DELETE file trigger", e.Do(t, "DELETE", "/admin/v1/triggers/f1", "", nil), http.StatusConflict, "triggers.json")
	wantErr(t, "PUT unknown", e.Do(t, "PUT", "/admin/v1/triggers/nope", extDef("nope", rc.srv.URL, ""), nil), http.StatusNotFound)
	wantErr(t, "DELETE unknown", e.Do(t, "DELETE", "/admin/v1/triggers/nope", "", nil), http.StatusNotFound)

	secret := e.register(t, extDef("ext", rc.srv.URL, `,"condition":"event.document.data.n == 1"`))
	var upd triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "PUT", "/admin/v1/triggers/ext", extDef("ext", rc.srv.URL, `,"condition":"event.document.data.n == 2"`)), &upd)
	if upd.Condition != "event.document.data.n == 2" || upd.Secret != nil {
		t.Fatalf("PUT answer %+v", upd)
	}
	wantErr(t, "PUT id mismatch", e.Do(t, "PUT", "/admin/v1/triggers/ext", extDef("other", rc.srv.URL, ""), nil), http.StatusBadRequest, "other")
	wantErr(t, "PUT bad CEL", e.Do(t, "PUT", "/admin/v1/triggers/ext", extDef("ext", rc.srv.URL, `,"condition":"((("`), nil), http.StatusBadRequest, "condition")
	if tr := e.getTrigger(t, "ext"); tr.Condition != "event.document.data.n == 2" {
		t.Fatalf("after a bad PUT the condition is %q", tr.Condition)
	}
	e.put(t, "items/one", `{"n":1}`)
	e.put(t, "items/two", `{"n":2}`)
	got := rc.waitFor(t, "delivery of two", hasDoc("two"))
	verifyWebhook(t, secret, got[0]) // the secret is kept by an update without one
	ds := e.waitDeliveries(t, "one delivered row", "triggerId=ext", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "delivered" })
	if hasDoc("one")(rc.requests()) || len(ds) != 1 {
		t.Fatalf("the old condition still applies: %d rows", len(ds))
	}

	e.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/triggers/ext", "")
	wantErr(t, "GET deleted", e.Do(t, "GET", "/admin/v1/triggers/ext", "", nil), http.StatusNotFound)
	if _, ok := e.listTriggers(t)["ext"]; ok {
		t.Fatal("deleted trigger still listed")
	}
	// The id can be registered again.
	e.register(t, extDef("ext", rc.srv.URL, ""))
}

func TestTriggersAdmin_DisableEnable(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, ""))
	var tr triggerOut
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/disable", ""), &tr)
	if tr.Status != "disabled" || tr.DisabledReason == "" {
		t.Fatalf("after disable: %+v", tr)
	}
	if g := e.getTrigger(t, "ext"); g.Status != "disabled" {
		t.Fatalf("GET after disable: %+v", g)
	}
	e.put(t, "items/while-off", `{"n":1}`)
	time.Sleep(500 * time.Millisecond)
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("disabled trigger delivered %d requests", n)
	}
	tr = triggerOut{}
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", ""), &tr)
	if tr.Status != "enabled" || tr.DisabledReason != "" {
		t.Fatalf("after enable: %+v", tr)
	}
	e.put(t, "items/after-on", `{"n":2}`)
	rc.waitFor(t, "delivery after enable", hasDoc("after-on"))
	time.Sleep(200 * time.Millisecond)
	if hasDoc("while-off")(rc.requests()) {
		t.Error("a change committed while the trigger was disabled was delivered")
	}
	wantErr(t, "enable unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/enable", "", nil), http.StatusNotFound)
	wantErr(t, "disable unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/disable", "", nil), http.StatusNotFound)
}

func TestTriggersAdmin_RotateSecretSignsWithBoth(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f-fixed", rc.srv.URL, `,"secret":"`+whFixedSecret+`"`) + "]"})
	oldSecret := e.register(t, extDef("ext", rc.srv.URL, ""))
	e.put(t, "items/before", `{"n":1}`)
	got := rc.waitFor(t, "first delivery", hasDoc("before"))
	verifyWebhook(t, oldSecret, got[0])
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
	e.put(t, "items/after", `{"n":2}`)
	var after whRequest
	for _, g := range rc.waitFor(t, "delivery after rotation", hasDoc("after")) {
		if g.DocID() == "after" {
			after = g
		}
	}
	sig := after.Header.Get("webhook-signature")
	parts := strings.Split(sig, " ")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "v1,") || !strings.HasPrefix(parts[1], "v1,") {
		t.Fatalf("signature during rotation %q, want two space-separated v1 signatures", sig)
	}
	verifyWebhook(t, oldSecret, after)
	verifyWebhook(t, newSecret, after)

	wantErr(t, "rotate file secret", e.Do(t, "POST", "/admin/v1/triggers/f-fixed/rotate-secret", "", nil), http.StatusConflict, "triggers.json")
	wantErr(t, "rotate unknown", e.Do(t, "POST", "/admin/v1/triggers/nope/rotate-secret", "", nil), http.StatusNotFound)

	// A file trigger with a generated secret can rotate it, and a reload
	// keeps the rotated secret.
	if err := os.WriteFile(e.File, []byte("["+fileDef("f-gen", rc.srv.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	rot = triggerOut{}
	decodeInto(t, e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/f-gen/rotate-secret", ""), &rot)
	if rot.Secret == nil {
		t.Fatal("rotate f-gen: no secret")
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	e.put(t, "files/z", `{"n":1}`)
	for _, g := range rc.waitFor(t, "f-gen delivery", hasDoc("z")) {
		if g.DocID() == "z" {
			verifyWebhook(t, *rot.Secret, g)
		}
	}
}

func TestTriggersAdmin_DeliveriesLogPagingAndReplay(t *testing.T) {
	rc := newWHReceiver(t, nil)
	other := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, ""))
	e.register(t, fmt.Sprintf(`{"triggerId":"other","collection":"others","events":["create"],"url":%q}`, other.srv.URL))
	for i := 1; i <= 3; i++ {
		e.put(t, fmt.Sprintf("items/d%d", i), `{"n":1}`)
	}
	e.put(t, "others/o1", `{"n":1}`)
	e.waitDeliveries(t, "3 delivered", "triggerId=ext&status=delivered", func(ds []deliveryOut) bool { return len(ds) == 3 })
	other.waitFor(t, "other delivery", hasDoc("o1"))
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
	byEvent := map[string]whRequest{}
	for _, g := range rc.requests() {
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
	wantErr(t, "bad status", e.Do(t, "GET", "/admin/v1/deliveries?status=bogus", "", nil), http.StatusBadRequest, "bogus")
	wantErr(t, "bad limit", e.Do(t, "GET", "/admin/v1/deliveries?limit=0", "", nil), http.StatusBadRequest, "limit")
	wantErr(t, "bad cursor", e.Do(t, "GET", "/admin/v1/deliveries?cursor=garbage", "", nil), http.StatusBadRequest, "cursor")

	target := page2[0]
	before := len(rc.requests())
	r := e.MustDo(t, http.StatusAccepted, "POST", "/admin/v1/deliveries/"+target.ID+"/replay", "")
	if m := r.JSON(t); m["id"] != target.ID {
		t.Errorf("replay answer %s", r.Body)
	}
	got := rc.waitFor(t, "replayed request", func(rs []whRequest) bool { return len(rs) > before })
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
	wantErr(t, "replay unknown", e.Do(t, "POST", "/admin/v1/deliveries/nope/replay", "", nil), http.StatusNotFound)
}

func TestTriggersAdmin_Reload(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{file: "[" + fileDef("f1", rc.srv.URL, "") + "]"})
	if _, ok := e.listTriggers(t)["f1"]; !ok {
		t.Fatal("f1 not listed")
	}
	if err := os.WriteFile(e.File, []byte("["+fileDef("f2", rc.srv.URL, "")+"]"), 0o600); err != nil {
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
	e.put(t, "files/x", `{"n":1}`)
	got := rc.waitFor(t, "delivery from f2", hasDoc("x"))
	if got[0].Body["triggerId"] != "f2" {
		t.Fatalf("delivered by %v", got[0].Body["triggerId"])
	}

	bad := "[" + fileDef("f3", rc.srv.URL, `,"condition":"event.nope(("`) + "]"
	if err := os.WriteFile(e.File, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "bad reload", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest, "f3")
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
	if err := os.WriteFile(e.File, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "unparsable reload", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest)
	if _, ok := e.listTriggers(t)["f2"]; !ok {
		t.Fatal("f2 dropped by an unparsable file")
	}

	// A file id that a registered trigger already uses is refused.
	e.register(t, extDef("ext", rc.srv.URL, ""))
	if err := os.WriteFile(e.File, []byte("["+fileDef("f2", rc.srv.URL, "")+","+fileDef("ext", rc.srv.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "reload with a registered id", e.Do(t, "POST", "/admin/v1/triggers/reload", "", nil), http.StatusBadRequest, "ext")
	if tr := e.getTrigger(t, "ext"); tr.Source != "api" {
		t.Fatalf("ext source %q after a refused reload", tr.Source)
	}
	// A good file clears fileError.
	if err := os.WriteFile(e.File, []byte("["+fileDef("f2", rc.srv.URL, "")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/reload", "")
	if tr := e.getTrigger(t, "f2"); tr.FileError != "" {
		t.Errorf("fileError %q after a good reload", tr.FileError)
	}
}

func TestTriggersAdmin_AuthRequired(t *testing.T) {
	e := startTrigEnv(t, trigEnvOpts{auth: true})
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
	}
	u := e.signup(t, "alice")
	for _, rt := range routes {
		wantStatus(t, "anonymous "+rt.method+" "+rt.path, e.Do(t, rt.method, rt.path, rt.body, anon), http.StatusUnauthorized)
		wantStatus(t, "bad key "+rt.method+" "+rt.path, e.Do(t, rt.method, rt.path, rt.body, map[string]string{"Authorization": "Bearer wrong-key"}), http.StatusUnauthorized)
		wantStatus(t, "user "+rt.method+" "+rt.path, e.Do(t, rt.method, rt.path, rt.body, u.h()), http.StatusForbidden)
	}
	if len(e.listTriggers(t)) != 0 {
		t.Fatal("a rejected request registered a trigger")
	}
}

func TestTriggersAdmin_DisabledServer404(t *testing.T) {
	env := MustStartServer(t, MustOpenStore(t), server.Config{})
	r := env.Do(t, "GET", "/admin/v1/triggers", "", nil)
	wantStatus(t, "no pipeline", r, http.StatusNotFound)
}

func TestTriggersWebhook_Metrics(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, ""))
	e.put(t, "items/m", `{"n":1}`)
	rc.waitFor(t, "delivery", hasDoc("m"))
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
	rc := newWHReceiver(t, unavailableOnce)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, `,"retryPolicy":{"maxAttempts":3,"initialBackoff":"10ms","maxBackoff":"10ms"}`))
	e.put(t, "items/r", `{"n":1}`)
	got := rc.waitFor(t, "the retry", func(rs []whRequest) bool { return len(rs) >= 2 })
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
	rc := newWHReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return 0
	})
	t.Cleanup(func() { close(release) }) // runs before the receiver closes
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, `,"timeout":"1s","retryPolicy":{"maxAttempts":1}`))
	start := time.Now()
	e.put(t, "items/slow", `{"n":1}`)
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
		e.put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=meta", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "169.254.169.254") || !strings.Contains(a[0].Error, "link-local") {
			t.Fatalf("attempts %+v, want the blocked range named", a)
		}
	})
	t.Run("loopback-not-allowed", func(t *testing.T) {
		rc := newWHReceiver(t, nil)
		e := startTrigEnv(t, trigEnvOpts{noAllow: true})
		e.register(t, extDef("lo", rc.srv.URL, `,"retryPolicy":{"maxAttempts":1}`))
		e.put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=lo", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "127.0.0.0/8") || !strings.Contains(a[0].Error, "loopback") {
			t.Fatalf("attempts %+v, want the loopback range named", a)
		}
		if n := len(rc.requests()); n != 0 {
			t.Fatalf("blocked receiver saw %d requests", n)
		}
	})
	t.Run("redirect-not-followed", func(t *testing.T) {
		target := newWHReceiver(t, nil)
		rc := newWHReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) int {
			w.Header().Set("Location", target.srv.URL+"/elsewhere")
			return http.StatusFound
		})
		e := startTrigEnv(t, trigEnvOpts{})
		e.register(t, extDef("redir", rc.srv.URL, `,"retryPolicy":{"maxAttempts":1}`))
		e.put(t, "items/a", `{"n":1}`)
		ds := e.waitDeliveries(t, "dead", "triggerId=redir", func(ds []deliveryOut) bool { return len(ds) == 1 && ds[0].Status == "dead" })
		if a := ds[0].Attempts; len(a) != 1 || a[0].Status != http.StatusFound {
			t.Fatalf("attempts %+v, want one with status 302", a)
		}
		time.Sleep(100 * time.Millisecond)
		if n := len(target.requests()); n != 0 {
			t.Fatalf("the redirect was followed: target saw %d requests", n)
		}
		if tr := e.getTrigger(t, "redir"); tr.Counts == nil || tr.Counts.Dead != 1 || tr.Counts.Delivered != 0 {
			t.Fatalf("counts %+v", tr.Counts)
		}
	})
}

func TestTriggersWebhook_AutoDisableAfterDead(t *testing.T) {
	rc := newWHReceiver(t, func(http.ResponseWriter, *http.Request, int) int { return http.StatusInternalServerError })
	// items/a and items/b are two origins: enough with DisableOrigins 2.
	e := startTrigEnv(t, trigEnvOpts{tcfg: triggers.Config{DisableAfterDead: 2, DisableOrigins: 2}})
	e.register(t, extDef("ext", rc.srv.URL, `,"retryPolicy":{"maxAttempts":1}`))
	e.put(t, "items/a", `{"n":1}`)
	e.waitDeliveries(t, "first dead", "triggerId=ext&status=dead", func(ds []deliveryOut) bool { return len(ds) == 1 })
	if tr := e.getTrigger(t, "ext"); tr.Status != "enabled" {
		t.Fatalf("disabled after one dead delivery: %+v", tr)
	}
	e.put(t, "items/b", `{"n":1}`)
	e.waitDeliveries(t, "second dead", "triggerId=ext&status=dead", func(ds []deliveryOut) bool { return len(ds) == 2 })
	deadline := time.Now().Add(5 * time.Second)
	var tr triggerOut
	for {
		tr = e.getTrigger(t, "ext")
		if tr.Status == "disabled" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tr.Status != "disabled" || !strings.Contains(tr.DisabledReason, "dead") {
		t.Fatalf("after two dead deliveries: status %q reason %q", tr.Status, tr.DisabledReason)
	}
	if !strings.Contains(tr.LastError, "500") {
		t.Errorf("lastError = %q", tr.LastError)
	}
	// Enabling resumes.
	rc.mu.Lock()
	rc.respond = nil
	rc.mu.Unlock()
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", "")
	e.put(t, "items/c", `{"n":1}`)
	rc.waitFor(t, "delivery after enable", func(rs []whRequest) bool {
		for _, r := range rs {
			if r.DocID() == "c" {
				return true
			}
		}
		return false
	})
}

func TestTriggersAdmin_RegisteredTriggerIgnoresPastChanges(t *testing.T) {
	rc := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.put(t, "items/old", `{"n":1}`)
	time.Sleep(100 * time.Millisecond)
	e.register(t, extDef("ext", rc.srv.URL, ""))
	e.put(t, "items/new", `{"n":1}`)
	rc.waitFor(t, "new", hasDoc("new"))
	time.Sleep(300 * time.Millisecond)
	if hasDoc("old")(rc.requests()) {
		t.Fatal("a trigger registered later fired for a past change")
	}
}

func TestTriggersAdmin_DisableParksPendingRetries(t *testing.T) {
	rc := newWHReceiver(t, unavailableOnce)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, `,"retryPolicy":{"maxAttempts":3,"initialBackoff":"10ms","maxBackoff":"10ms"}`))
	e.put(t, "items/p", `{"n":1}`)
	rc.waitFor(t, "first attempt", func(rs []whRequest) bool { return len(rs) >= 1 })
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/disable", "")
	time.Sleep(1500 * time.Millisecond)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("a disabled trigger retried: %d requests", n)
	}
	if ds, _ := e.deliveries(t, "triggerId=ext&status=pending"); len(ds) != 1 {
		t.Fatalf("pending rows while disabled: %+v", ds)
	}
	e.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/ext/enable", "")
	got := rc.waitFor(t, "the parked retry after enable", func(rs []whRequest) bool { return len(rs) >= 2 })
	if got[0].ID() != got[1].ID() {
		t.Fatalf("the resumed retry has a new webhook-id")
	}
	e.waitDeliveries(t, "delivered", "triggerId=ext&status=delivered", func(ds []deliveryOut) bool { return len(ds) == 1 })
}

func TestTriggersWebhook_GoneDisablesTrigger(t *testing.T) {
	rc := newWHReceiver(t, func(http.ResponseWriter, *http.Request, int) int { return http.StatusGone })
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", rc.srv.URL, ""))
	e.put(t, "items/g", `{"n":1}`)
	rc.waitFor(t, "the 410", hasDoc("g"))
	deadline := time.Now().Add(5 * time.Second)
	var tr triggerOut
	for {
		tr = e.getTrigger(t, "ext")
		if tr.Status == "disabled" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tr.Status != "disabled" || !strings.Contains(tr.DisabledReason, "410") {
		t.Fatalf("after a 410: status %q reason %q", tr.Status, tr.DisabledReason)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("%d requests after a 410, want 1", n)
	}
}

// A deleted trigger's pending deliveries must not go to a new trigger that
// reuses its id (Delete: "Its pending deliveries go dead"; README: a
// trigger added later fires only for changes after it was added).
func TestTriggersAdmin_DeleteThenReregisterDropsOldDeliveries(t *testing.T) {
	a := newWHReceiver(t, func(http.ResponseWriter, *http.Request, int) int { return http.StatusInternalServerError })
	b := newWHReceiver(t, nil)
	e := startTrigEnv(t, trigEnvOpts{})
	e.register(t, extDef("ext", a.srv.URL, `,"retryPolicy":{"maxAttempts":5,"initialBackoff":"1s","maxBackoff":"1s"}`))
	e.put(t, "items/old", `{"n":1}`)
	a.waitFor(t, "first attempt at the old url", hasDoc("old"))
	e.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/triggers/ext", "")
	e.register(t, extDef("ext", b.srv.URL, ""))
	e.put(t, "items/new", `{"n":1}`)
	b.waitFor(t, "new", hasDoc("new"))
	time.Sleep(2 * time.Second) // past the old row's retry
	if hasDoc("old")(b.requests()) {
		t.Fatal("the deleted trigger's pending delivery of items/old was sent to the re-registered trigger's url")
	}
}
