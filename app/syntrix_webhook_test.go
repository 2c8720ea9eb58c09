package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/crypto/bcrypt"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/config"
)

// The Syntrix webhook format end to end: what Syntrix's TriggerHandler
// reads from the body and how its TriggerClient writes back with the
// preIssuedToken. Shapes from:
//   - sdk/syntrix-client-ts/src/trigger/trigger-handler.ts @ 5f04c6496158f906fe6b161e9e8c77a045100d6d
//     (WebhookPayload {triggerId, collection, docKey?, preIssuedToken?, before?, after?};
//     new TriggerClient(baseUrl, payload.preIssuedToken), database 'default')
//   - tests/integration/main_test.go, WebhookDelivery struct (newest indexed, id 39443165001):
//     triggerId, database, event, collection, documentId, lsn, seq, before, after, ts,
//     url, headers, secretsRef, retryPolicy, timeout, preIssuedToken, payload, subjectHashed
//   - sdk/syntrix-client-ts/src/trigger/trigger-client.ts @ 94d499013f864b6dfd84eb9749c24914e89e98af
//     (the /trigger/v1 requests made with the token)

const sxTriggers = `[
 {"triggerId":"sx","collection":"users/{userId}/inbox","events":["create"],"url":"%[1]s/sx?k=secret","format":"syntrix","secret":%[2]q,"headers":{"X-Hook-Key":"hdr-secret"}},
 {"triggerId":"sx-wide","collection":"users/{userId}/inbox","events":["create"],"url":"%[1]s/wide","format":"syntrix","tokenScope":["users/{userId}/notes/**"],"secret":%[2]q,"timeout":"10s"},
 {"triggerId":"plain","collection":"users/{userId}/inbox","events":["create"],"url":"%[1]s/plain","secret":%[2]q}
]`

func sxStack(t *testing.T, rc *apptest.Receiver) *apptest.Stack {
	t.Helper()
	return apptest.Start(t, apptest.Options{
		Triggers: fmt.Sprintf(sxTriggers, rc.URL, apptest.WebhookSecret),
		Config:   func(c *config.Config) { c.Auth.JWTSecret = apptest.JWTSecret },
	})
}

func onPath(path string) func([]apptest.Request) bool {
	return func(rs []apptest.Request) bool {
		for _, r := range rs {
			if r.Path == path {
				return true
			}
		}
		return false
	}
}

func requestOn(t *testing.T, rc *apptest.Receiver, path string) apptest.Request {
	t.Helper()
	for _, r := range rc.WaitFor(t, "a delivery to "+path, onPath(path)) {
		if r.Path == path {
			return r
		}
	}
	return apptest.Request{}
}

// requestFor is the first delivery to path of a change in collection
// (the body's "collection"): with documents in several collections, the
// deliveries arrive in any order.
func requestFor(t *testing.T, rc *apptest.Receiver, path, collection string) apptest.Request {
	t.Helper()
	match := func(r apptest.Request) bool { return r.Path == path && r.Body["collection"] == collection }
	for _, r := range rc.WaitFor(t, "a delivery to "+path+" for "+collection, func(rs []apptest.Request) bool { return slices.ContainsFunc(rs, match) }) {
		if match(r) {
			return r
		}
	}
	return apptest.Request{}
}

// jwtClaims decodes the (unverified) claims of a compact JWT.
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWT", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSyntrixWebhook_Delivery(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	s := sxStack(t, rc)
	s.Put(t, "users/u1/inbox/m1", `{"text":"hi","n":1}`)

	r := requestOn(t, rc, "/sx")
	apptest.Verify(t, apptest.WebhookSecret, r)
	if r.Header.Get("webhook-id") == "" || r.Header.Get("X-Hook-Key") != "hdr-secret" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("headers %v", r.Header)
	}
	var body struct {
		TriggerID      string            `json:"triggerId"`
		Database       string            `json:"database"`
		Event          string            `json:"event"`
		Collection     string            `json:"collection"`
		DocumentID     string            `json:"documentId"`
		DocKey         string            `json:"docKey"`
		LSN            string            `json:"lsn"`
		Seq            int64             `json:"seq"`
		Before         map[string]any    `json:"before"`
		After          map[string]any    `json:"after"`
		Timestamp      int64             `json:"ts"`
		URL            string            `json:"url"`
		Headers        map[string]string `json:"headers"`
		SecretsRef     string            `json:"secretsRef"`
		RetryPolicy    json.RawMessage   `json:"retryPolicy"`
		Timeout        json.RawMessage   `json:"timeout"`
		PreIssuedToken string            `json:"preIssuedToken"`
		Payload        map[string]any    `json:"payload"`
		SubjectHashed  bool              `json:"subjectHashed"`
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatalf("body %s: %v", r.Raw, err)
	}
	if body.TriggerID != "sx" || body.Database != "default" || body.Event != "create" ||
		body.Collection != "users/u1/inbox" || body.DocumentID != "m1" || body.DocKey != "users/u1/inbox/m1" ||
		body.Seq <= 0 || body.LSN != fmt.Sprint(body.Seq) || body.Before != nil || body.Timestamp <= 0 {
		t.Fatalf("body %s", r.Raw)
	}
	if body.After["id"] != "m1" || body.After["text"] != "hi" || body.After["version"] != float64(1) || body.After["collection"] != "users/u1/inbox" {
		t.Fatalf("after %v", body.After)
	}
	if body.Payload["id"] != "m1" || body.Payload["text"] != "hi" || len(body.Payload) != 3 {
		t.Fatalf("payload %v", body.Payload)
	}
	// The trigger's own secrets stay out of the body: the query of the url
	// and the header values.
	if body.URL != rc.URL+"/sx" || len(body.Headers) != 0 || body.SecretsRef != "" || strings.Contains(string(r.Raw), "k=secret") || strings.Contains(string(r.Raw), "hdr-secret") {
		t.Fatalf("url %q, headers %v, secretsRef %q in %s", body.URL, body.Headers, body.SecretsRef, r.Raw)
	}
	if string(body.Timeout) != `"30s"` || !strings.Contains(string(body.RetryPolicy), `"maxAttempts":8`) {
		t.Fatalf("timeout %s retryPolicy %s", body.Timeout, body.RetryPolicy)
	}
	// The token: per attempt, for this trigger and database, scoped to the
	// event's collection, living the timeout plus 5 minutes.
	c := jwtClaims(t, body.PreIssuedToken)
	if c["sub"] != "trigger:sx" || c["db"] != "default" || c["typ"] != "trigger" {
		t.Fatalf("claims %v", c)
	}
	if scope, _ := json.Marshal(c["scope"]); string(scope) != `["users/u1/inbox/**"]` {
		t.Fatalf("scope %s", scope)
	}
	if life := c["exp"].(float64) - c["iat"].(float64); life != (30*time.Second + 5*time.Minute).Seconds() {
		t.Fatalf("token lifetime %vs", life)
	}

	// The default format carries no token.
	plain := requestOn(t, rc, "/plain")
	apptest.Verify(t, apptest.WebhookSecret, plain)
	if strings.Contains(string(plain.Raw), "preIssuedToken") || strings.Contains(string(plain.Raw), body.PreIssuedToken) || plain.Event()["id"] != "m1" {
		t.Fatalf("default-format body %s", plain.Raw)
	}
	// tokenScope: bound from the event's params; the timeout is shorter.
	wc := jwtClaims(t, requestOn(t, rc, "/wide").Body["preIssuedToken"].(string))
	if scope, _ := json.Marshal(wc["scope"]); string(scope) != `["users/u1/notes/**"]` || wc["exp"].(float64)-wc["iat"].(float64) != 310 {
		t.Fatalf("tokenScope claims %v", wc)
	}

	// The admin API echoes the new fields.
	def := s.MustDo(t, http.StatusOK, "GET", "/admin/v1/triggers/sx-wide", "").JSON(t)
	if def["format"] != "syntrix" || fmt.Sprint(def["tokenScope"]) != "[users/{userId}/notes/**]" {
		t.Fatalf("trigger view %v", def)
	}
}

func TestSyntrixWebhook_TokenUse(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	s := sxStack(t, rc)
	s.Put(t, "users/u1/inbox/m1", `{"text":"hi"}`)
	s.Put(t, "users/u2/inbox/x", `{"text":"other"}`)
	// u1's delivery: u2's, scoped to users/u2/inbox, may arrive first.
	tok := requestFor(t, rc, "/sx", "users/u1/inbox").Body["preIssuedToken"].(string)
	h := apptest.Bearer(tok)
	const tv1 = "/trigger/v1/databases/default"

	// Inside the scope: the TriggerClient's batch, get and query.
	wantCode(t, "write inside", s.Do(t, "POST", tv1+"/write", `{"writes":[{"type":"update","path":"users/u1/inbox/m1","data":{"handled":true}},{"type":"create","path":"users/u1/inbox/m1/replies/r1","data":{"text":"re"}}]}`, h), 200, "")
	r := s.Do(t, "POST", tv1+"/get", `{"path":"users/u1/inbox/m1"}`, h)
	wantCode(t, "get inside", r, 200, "")
	if !strings.Contains(string(r.Body), `"handled":true`) {
		t.Fatalf("get: %s", r.Body)
	}
	wantCode(t, "query inside", s.Do(t, "POST", tv1+"/query", `{"collection":"users/u1/inbox","filters":[],"orderBy":[]}`, h), 200, "")

	// Outside it (the built-in rules would let a service key do all of
	// these): refused, nothing written.
	head := s.Head(t)
	for _, c := range []struct{ name, route, body string }{
		{"write sibling collection", "/write", `{"writes":[{"type":"create","path":"users/u1/notes/n1","data":{}}]}`},
		{"write other user", "/write", `{"writes":[{"type":"update","path":"users/u2/inbox/x","data":{"text":"pwned"}}]}`},
		{"write mixed", "/write", `{"writes":[{"type":"create","path":"users/u1/inbox/ok","data":{}},{"type":"create","path":"users/u2/inbox/y","data":{}}]}`},
		{"get other user", "/get", `{"paths":["users/u1/inbox/m1","users/u2/inbox/x"]}`},
		{"query other user", "/query", `{"collection":"users/u2/inbox"}`},
		{"query collection group", "/query", `{"collection":"users/*/inbox"}`},
		{"query parent", "/query", `{"collection":"users"}`},
	} {
		wantCode(t, c.name, s.Do(t, "POST", tv1+c.route, c.body, h), http.StatusForbidden, "PERMISSION_DENIED")
	}
	wantCode(t, "other database", s.Do(t, "POST", "/trigger/v1/databases/other/get", `{"path":"users/u1/inbox/m1"}`, h), http.StatusForbidden, "PERMISSION_DENIED")
	if s.Head(t) != head {
		t.Fatal("a refused trigger-token write changed the data")
	}

	// Every other surface refuses the token as a credential.
	wantCode(t, "REST get", s.Do(t, "GET", "/api/v1/databases/default/documents/users/u1/inbox/m1", "", h), 401, "UNAUTHENTICATED")
	wantCode(t, "REST batch", s.Do(t, "POST", "/api/v1/databases/default/batch", `{"writes":[{"type":"create","path":"users/u1/inbox/z","data":{}}]}`, h), 401, "UNAUTHENTICATED")
	wantCode(t, "auth me", s.Do(t, "GET", "/auth/v1/me", "", h), 401, "UNAUTHENTICATED")
	wantCode(t, "admin API", s.Do(t, "GET", "/admin/v1/triggers", "", h), 401, "UNAUTHENTICATED")
	wantCode(t, "rxdb pull", s.Do(t, "GET", "/replication/rxdb/default/users/u1/inbox/0/pull?lwt=0&id=&limit=10", "", h), 401, "UNAUTHENTICATED")
	wantCode(t, "SSE header", s.Do(t, "GET", "/realtime/sse?collection=users/u1/inbox", "", h), 401, "UNAUTHENTICATED")
	wantCode(t, "SSE query token", s.Do(t, "GET", "/realtime/sse?collection=users/u1/inbox&access_token="+tok, "", apptest.Anonymous), 401, "UNAUTHENTICATED")
	wsURL := "ws" + strings.TrimPrefix(s.URL, "http") + "/realtime/ws"
	if conn, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Authorization": {"Bearer " + tok}}); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("WS upgrade with the token: err=%v resp=%v, want 401", err, resp)
	}
	conn, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		t.Fatalf("anonymous WS: %v", err)
	}
	defer conn.Close()
	if err := conn.WriteJSON(map[string]any{"type": "auth", "id": "a1", "payload": map[string]any{"token": tok}}); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(apptest.WaitTimeout))
	var msg struct {
		Type    string         `json:"type"`
		Payload map[string]any `json:"payload"`
	}
	if err := conn.ReadJSON(&msg); err != nil || msg.Type != "error" || msg.Payload["code"] != "UNAUTHENTICATED" {
		t.Fatalf("WS auth with the token: %+v %v, want an UNAUTHENTICATED error", msg, err)
	}

	// An expired token (minted by the same secret 20 minutes ago) is 401.
	past, err := auth.New(context.Background(), s.Store, auth.Config{
		Secret: []byte(apptest.JWTSecret), BcryptCost: bcrypt.MinCost,
		Now: func() time.Time { return time.Now().Add(-20 * time.Minute) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer past.Close()
	old, err := past.IssueTriggerToken(auth.TriggerGrant{TriggerID: "sx", Database: "default", Scope: []string{"users/u1/inbox/**"}}, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "expired", s.Do(t, "POST", tv1+"/get", `{"path":"users/u1/inbox/m1"}`, apptest.Bearer(old)), 401, "UNAUTHENTICATED")
	// The same grant minted now works: the expiry is what refused it.
	fresh, err := s.Auth.IssueTriggerToken(auth.TriggerGrant{TriggerID: "sx", Database: "default", Scope: []string{"users/u1/inbox/**"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "fresh", s.Do(t, "POST", tv1+"/get", `{"path":"users/u1/inbox/m1"}`, apptest.Bearer(fresh)), 200, "")
	// A token whose signature does not check is 401 too.
	wantCode(t, "tampered", s.Do(t, "POST", tv1+"/get", `{"path":"users/u1/inbox/m1"}`, apptest.Bearer(tok[:len(tok)-2]+"xx")), 401, "UNAUTHENTICATED")
}

// A receiver that echoes its request: the delivery log keeps its answer,
// with the token cut out.
func TestSyntrixWebhook_LogNeverHoldsTheToken(t *testing.T) {
	rc := apptest.NewReceiver(t, func(_ context.Context, w http.ResponseWriter, req apptest.Request) int {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(req.Raw)
		return 0
	})
	s := sxStack(t, rc)
	s.Put(t, "users/u1/inbox/m1", `{"text":"hi"}`)
	tok := requestOn(t, rc, "/sx").Body["preIssuedToken"].(string)
	var list string
	apptest.WaitFor(t, "the sx delivery recorded", func() bool {
		list = string(s.MustDo(t, http.StatusOK, "GET", "/admin/v1/deliveries?triggerId=sx", "").Body)
		return strings.Contains(list, `"delivered"`)
	})
	if strings.Contains(list, tok) || !strings.Contains(list, "[preIssuedToken]") {
		t.Fatalf("delivery log %s", list)
	}
}

// A syntrix trigger registered through the admin API, its tokenScope
// bound at delivery; definitions the validation refuses.
func TestSyntrixWebhook_RegisteredThroughTheAPI(t *testing.T) {
	rc := apptest.NewReceiver(t, nil)
	s := apptest.Start(t, apptest.Options{})
	def := fmt.Sprintf(`{"triggerId":"api-sx","collection":"users/{userId}/inbox","events":["create"],"url":%q,"format":"syntrix","tokenScope":["users/{userId}/**"]}`, rc.URL+"/api")
	s.MustDo(t, http.StatusCreated, "POST", "/admin/v1/triggers", def)
	for _, bad := range []string{
		`"format":"syntrx"`,
		`"tokenScope":["users/{other}/**"]`,
		`"format":"loom","tokenScope":["users/{userId}/**"]`,
		`"format":"syntrix","tokenScope":["_users/{userId}"]`,
		`"format":"syntrix","tokenScope":["users/{userId}/notes"]`,
		`"format":"syntrix","tokenScope":[]`,
	} {
		body := fmt.Sprintf(`{"triggerId":"bad","collection":"users/{userId}/inbox","events":["create"],"url":%q,%s}`, rc.URL, bad)
		wantCode(t, bad, s.Do(t, "POST", "/admin/v1/triggers", body, nil), http.StatusBadRequest, "BAD_REQUEST")
	}
	s.Put(t, "users/u9/inbox/m1", `{"text":"hi"}`)
	r := requestOn(t, rc, "/api")
	c := jwtClaims(t, r.Body["preIssuedToken"].(string))
	if scope, _ := json.Marshal(c["scope"]); string(scope) != `["users/u9/**"]` {
		t.Fatalf("scope %s", scope)
	}
	// That scope reaches a sibling collection of the same user only.
	h := apptest.Bearer(r.Body["preIssuedToken"].(string))
	wantCode(t, "sibling", s.Do(t, "POST", "/trigger/v1/databases/default/write", `{"writes":[{"type":"set","path":"users/u9/notes/n1","data":{"a":1}}]}`, h), 200, "")
	wantCode(t, "other user", s.Do(t, "POST", "/trigger/v1/databases/default/write", `{"writes":[{"type":"set","path":"users/u8/notes/n1","data":{"a":1}}]}`, h), 403, "PERMISSION_DENIED")

	// The token is honoured only while its trigger still sends such
	// tokens: not once it is disabled, redefined to another format or
	// deleted, though the token has not expired.
	get := func() *apptest.Response {
		return s.Do(t, "POST", "/trigger/v1/databases/default/get", `{"path":"users/u9/notes/n1"}`, h)
	}
	s.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/api-sx/disable", "")
	wantCode(t, "trigger disabled", get(), 401, "UNAUTHENTICATED")
	s.MustDo(t, http.StatusOK, "POST", "/admin/v1/triggers/api-sx/enable", "")
	wantCode(t, "trigger enabled again", get(), 200, "")
	s.MustDo(t, http.StatusOK, "PUT", "/admin/v1/triggers/api-sx", strings.Replace(strings.Replace(def, `"syntrix"`, `"loom"`, 1), `,"tokenScope":["users/{userId}/**"]`, "", 1))
	wantCode(t, "trigger now in Loom's format", get(), 401, "UNAUTHENTICATED")
	s.MustDo(t, http.StatusOK, "PUT", "/admin/v1/triggers/api-sx", def)
	wantCode(t, "trigger in Syntrix's format again", get(), 200, "")
	s.MustDo(t, http.StatusNoContent, "DELETE", "/admin/v1/triggers/api-sx", "")
	wantCode(t, "trigger deleted", get(), 401, "UNAUTHENTICATED")
}

func wantCode(t *testing.T, what string, r *apptest.Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status=%d, want %d; body %s", what, r.Status, status, r.Body)
	}
	if code != "" {
		if got := r.JSON(t)["code"]; got != code {
			t.Fatalf("%s: code=%v, want %s; body %s", what, got, code, r.Body)
		}
	}
}
