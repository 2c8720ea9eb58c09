package triggers_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// secret24 and secret64 are valid secrets at the two size limits.
var (
	secret24 = "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24))
	secret64 = "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 64))
)

// env is a fixed Expander.
func env(vars map[string]string) triggers.Expander {
	return func(name string) (string, error) {
		if v, ok := vars[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
}

var testEnv = env(map[string]string{
	"LOOM_URL":            "http://127.0.0.1:8080",
	"LOOM_WEBHOOK_SECRET": secret24,
	"TOKEN":               "t0k3n",
})

// valid returns a minimal valid definition.
func valid() triggers.Trigger {
	return triggers.Trigger{
		ID:         "t1",
		Collection: "users/{userId}/chats/{chatId}/messages",
		Events:     []string{"create"},
		URL:        "https://example.com/hook",
	}
}

func TestCompile_Defaults(t *testing.T) {
	c, err := triggers.Compile(valid(), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Def.Database != "default" || c.Def.Enabled == nil || !*c.Def.Enabled {
		t.Errorf("defaults: database=%q enabled=%v", c.Def.Database, c.Def.Enabled)
	}
	if c.Timeout != 30*time.Second {
		t.Errorf("Timeout=%v, want 30s", c.Timeout)
	}
	if c.MaxAttempts() != 8 {
		t.Errorf("MaxAttempts=%d, want 8", c.MaxAttempts())
	}
	off := false
	def := valid()
	def.Enabled = &off
	def.Timeout = "2m"
	if c, err = triggers.Compile(def, testEnv); err != nil {
		t.Fatal(err)
	}
	if *c.Def.Enabled || c.Timeout != 2*time.Minute {
		t.Errorf("enabled=%v timeout=%v", *c.Def.Enabled, c.Timeout)
	}
}

func TestCompile_Errors(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*triggers.Trigger)
		want   string // besides the trigger id, which every message names
	}{
		{"empty id", func(d *triggers.Trigger) { d.ID = "" }, "triggerId"},
		{"bad id", func(d *triggers.Trigger) { d.ID = "a b" }, `triggerId: "a b"`},
		{"long id", func(d *triggers.Trigger) { d.ID = strings.Repeat("a", 65) }, "triggerId"},
		{"bad database", func(d *triggers.Trigger) { d.Database = "my db" }, `database: "my db"`},
		{"long database", func(d *triggers.Trigger) { d.Database = strings.Repeat("d", 65) }, "database:"},
		{"no collection", func(d *triggers.Trigger) { d.Collection = "" }, "collection: missing"},
		{"bad pattern", func(d *triggers.Trigger) { d.Collection = "users/{uid" }, `collection "users/{uid": segment 2`},
		{"document pattern", func(d *triggers.Trigger) { d.Collection = "users/{uid}" }, "name a document"},
		{"dup capture", func(d *triggers.Trigger) { d.Collection = "a/{x}/b/{x}/c" }, `duplicate capture name "x"`},
		{"** not last", func(d *triggers.Trigger) { d.Collection = "a/**/b" }, "must be the last segment"},
		{"no events", func(d *triggers.Trigger) { d.Events = nil }, "events: empty"},
		{"unknown event", func(d *triggers.Trigger) { d.Events = []string{"create", "write"} }, `events: unknown event "write"`},
		{"dup event", func(d *triggers.Trigger) { d.Events = []string{"update", "update"} }, `events: "update" listed twice`},
		{"cel syntax", func(d *triggers.Trigger) { d.Condition = "event.type ==" }, `condition "event.type ==": ERROR`},
		{"cel undeclared", func(d *triggers.Trigger) { d.Condition = "evnt.type == 'create'" }, "undeclared reference to 'evnt'"},
		{"cel type", func(d *triggers.Trigger) { d.Condition = "1 + 2" }, "has type int, want bool"},
		{"cel unknown field", func(d *triggers.Trigger) { d.Condition = "event.documnt.data.x == 1" }, `condition "event.documnt.data.x == 1": event has no field "documnt"`},
		{"cel unknown envelope field", func(d *triggers.Trigger) { d.Condition = "event.document.role == 'user'" }, `event.document has no field "role"`},
		{"cel unknown field in has", func(d *triggers.Trigger) { d.Condition = "has(event.paramz.x)" }, `no field "paramz"`},
		{"key type", func(d *triggers.Trigger) { d.OrderingKey = "event.timestamp > 1" }, `orderingKey "event.timestamp > 1": expression has type bool, want string`},
		{"key unknown field", func(d *triggers.Trigger) { d.OrderingKey = "event.param.chatId" }, `orderingKey "event.param.chatId": event has no field "param"`},
		{"no url", func(d *triggers.Trigger) { d.URL = "" }, "url: missing"},
		{"url scheme", func(d *triggers.Trigger) { d.URL = "ftp://example.com/x" }, "url: \"ftp://example.com/x\": the scheme must be http or https"},
		{"url no host", func(d *triggers.Trigger) { d.URL = "http:///x" }, "has no host"},
		{"url parse", func(d *triggers.Trigger) { d.URL = "http://exa mple.com/%zz" }, "does not parse"},
		{"url relative", func(d *triggers.Trigger) { d.URL = "/hook" }, "scheme must be http or https"},
		{"url unset var", func(d *triggers.Trigger) { d.URL = "${NOPE}/hook" }, "url: ${NOPE}: environment variable NOPE is not set"},
		{"url unterminated var", func(d *triggers.Trigger) { d.URL = "${LOOM_URL/hook" }, "url: unterminated ${"},
		{"url bad var name", func(d *triggers.Trigger) { d.URL = "${1X}/hook" }, "url: ${1X}: not a variable name"},
		{"bad header name", func(d *triggers.Trigger) { d.Headers = map[string]string{"X Team": "a"} }, `headers: "X Team" is not a valid header name`},
		{"content-type header", func(d *triggers.Trigger) { d.Headers = map[string]string{"content-type": "text/plain"} }, `headers: "content-type" is set by Loom`},
		{"user-agent header", func(d *triggers.Trigger) { d.Headers = map[string]string{"User-Agent": "x"} }, `"User-Agent" is set by Loom`},
		{"webhook header", func(d *triggers.Trigger) { d.Headers = map[string]string{"Webhook-Signature": "x"} }, `"Webhook-Signature" is set by Loom`},
		{"header value CRLF", func(d *triggers.Trigger) { d.Headers = map[string]string{"X-A": "a\r\nB: c"} }, "contains CR, LF or NUL"},
		{"header unset var", func(d *triggers.Trigger) { d.Headers = map[string]string{"Authorization": "Bearer ${NOPE}"} }, `headers: "Authorization": ${NOPE}: environment variable NOPE is not set`},
		{"secret prefix", func(d *triggers.Trigger) { d.Secret = "abc" }, "secret: must be whsec_"},
		{"secret base64", func(d *triggers.Trigger) { d.Secret = "whsec_!!!" }, "secret: the part after whsec_ is not standard base64"},
		{"secret short", func(d *triggers.Trigger) {
			d.Secret = "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23))
		}, "secret: decodes to 23 bytes"},
		{"secret long", func(d *triggers.Trigger) {
			d.Secret = "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))
		}, "secret: decodes to 65 bytes"},
		{"secret unset var", func(d *triggers.Trigger) { d.Secret = "${NOPE}" }, "secret: ${NOPE}"},
		{"timeout syntax", func(d *triggers.Trigger) { d.Timeout = "30" }, `timeout: "30" is not a duration`},
		{"timeout small", func(d *triggers.Trigger) { d.Timeout = "500ms" }, "timeout: 500ms is outside 1s..5m0s"},
		{"timeout large", func(d *triggers.Trigger) { d.Timeout = "6m" }, "timeout: 6m0s is outside"},
		{"attempts", func(d *triggers.Trigger) { d.RetryPolicy = &triggers.RetryPolicy{MaxAttempts: 101} }, "retryPolicy.maxAttempts: 101"},
		{"attempts negative", func(d *triggers.Trigger) { d.RetryPolicy = &triggers.RetryPolicy{MaxAttempts: -1} }, "retryPolicy.maxAttempts: -1"},
		{"initial syntax", func(d *triggers.Trigger) { d.RetryPolicy = &triggers.RetryPolicy{InitialBackoff: "soon"} }, `retryPolicy.initialBackoff: "soon"`},
		{"initial zero", func(d *triggers.Trigger) { d.RetryPolicy = &triggers.RetryPolicy{InitialBackoff: "0s"} }, "retryPolicy.initialBackoff: 0s is not positive"},
		{"max negative", func(d *triggers.Trigger) { d.RetryPolicy = &triggers.RetryPolicy{MaxBackoff: "-1h"} }, "retryPolicy.maxBackoff: -1h0m0s is not positive"},
		{"initial > max", func(d *triggers.Trigger) {
			d.RetryPolicy = &triggers.RetryPolicy{InitialBackoff: "2h", MaxBackoff: "1h"}
		}, "retryPolicy: initialBackoff 2h0m0s is more than maxBackoff 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := valid()
			tt.modify(&def)
			_, err := triggers.Compile(def, testEnv)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("trigger %q", def.ID)) && !strings.Contains(msg, fmt.Sprintf("invalid triggerId %q", def.ID)) {
				t.Errorf("%q does not name the trigger %q", msg, def.ID)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("err=%q, want it to contain %q", msg, tt.want)
			}
		})
	}
}

func TestCompile_Valid(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*triggers.Trigger)
	}{
		{"wildcards", func(d *triggers.Trigger) { d.Collection = "users/*/chats" }},
		{"rest", func(d *triggers.Trigger) { d.Collection = "users/{rest=**}" }},
		{"bare rest", func(d *triggers.Trigger) { d.Collection = "**" }},
		{"even with rest", func(d *triggers.Trigger) { d.Collection = "a/b/**" }},
		{"all events", func(d *triggers.Trigger) { d.Events = []string{"delete", "update", "create"} }},
		{"database", func(d *triggers.Trigger) { d.Database = "tenant_1-a" }},
		{"secret sizes", func(d *triggers.Trigger) { d.Secret = secret64 }},
		{"timeout limits", func(d *triggers.Trigger) { d.Timeout = "5m" }},
		{"timeout min", func(d *triggers.Trigger) { d.Timeout = "1s" }},
		{"headers", func(d *triggers.Trigger) {
			d.Headers = map[string]string{"X-Team": "core", "Authorization": "Bearer x"}
		}},
		{"dyn key", func(d *triggers.Trigger) { d.OrderingKey = "event.document.data.userId" }},
		{"string key", func(d *triggers.Trigger) { d.OrderingKey = "event.params.chatId + '/' + event.id" }},
		{"key string()", func(d *triggers.Trigger) { d.OrderingKey = "string(event.document.data.n)" }},
		{"shadowed event", func(d *triggers.Trigger) { d.Condition = "[{'x': 1}].exists(event, event.x == 1)" }},
		{"any data field", func(d *triggers.Trigger) {
			d.Condition = "event.document.data.whatever == 1 || event.before.data.other == 2"
		}},
		{"same policy bounds", func(d *triggers.Trigger) {
			d.RetryPolicy = &triggers.RetryPolicy{MaxAttempts: 100, InitialBackoff: "1h", MaxBackoff: "1h"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := valid()
			tt.modify(&def)
			if _, err := triggers.Compile(def, testEnv); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCompile_Expansion(t *testing.T) {
	def := valid()
	def.URL = "${LOOM_URL}/webhooks/$literal?x=${TOKEN}"
	def.Headers = map[string]string{"Authorization": "Bearer ${TOKEN}", "X-Price": "$5"}
	def.Secret = "${LOOM_WEBHOOK_SECRET}"
	def.Condition = "event.document.data.x == '${TOKEN}'"
	def.OrderingKey = "'${TOKEN}'"
	c, err := triggers.Compile(def, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://127.0.0.1:8080/webhooks/$literal?x=t0k3n"; c.Def.URL != want {
		t.Errorf("url=%q, want %q", c.Def.URL, want)
	}
	if want := map[string]string{"Authorization": "Bearer t0k3n", "X-Price": "$5"}; !reflect.DeepEqual(c.Def.Headers, want) {
		t.Errorf("headers=%v, want %v", c.Def.Headers, want)
	}
	if c.Def.Secret != secret24 {
		t.Errorf("secret=%q", c.Def.Secret)
	}
	if c.Def.Condition != def.Condition || c.Def.OrderingKey != def.OrderingKey {
		t.Errorf("condition/orderingKey expanded: %q %q", c.Def.Condition, c.Def.OrderingKey)
	}
	// The caller's definition is not modified.
	if def.Headers["Authorization"] != "Bearer ${TOKEN}" {
		t.Errorf("Compile modified the caller's headers")
	}
	// No expander: a ${VAR} is an error, a definition without one is fine.
	if _, err := triggers.Compile(def, nil); err == nil || !strings.Contains(err.Error(), "${LOOM_URL}") {
		t.Errorf("nil expander: err=%v", err)
	}
	if _, err := triggers.Compile(valid(), nil); err != nil {
		t.Errorf("nil expander, no vars: %v", err)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern    string
		events     []string
		db         string
		op         collections.ChangeOp
		collection string
		ok         bool
		params     map[string]string
	}{
		{"users/{userId}/chats/{chatId}/messages", []string{"create"}, "default", collections.OpCreate,
			"users/u1/chats/c1/messages", true, map[string]string{"userId": "u1", "chatId": "c1"}},
		{"users/{userId}/chats/{chatId}/messages", []string{"create"}, "default", collections.OpUpdate,
			"users/u1/chats/c1/messages", false, nil},
		{"users/{userId}/chats/{chatId}/messages", []string{"create"}, "other", collections.OpCreate,
			"users/u1/chats/c1/messages", false, nil},
		{"users/{userId}/chats/{chatId}/messages", []string{"create"}, "default", collections.OpCreate,
			"users/u1/chats/c1/notes", false, nil},
		{"users/*/chats", []string{"update", "delete"}, "default", collections.OpDelete, "users/u9/chats", true, nil},
		{"users/*/chats", []string{"update"}, "default", collections.OpUpdate, "users/u9/chats/c/x", false, nil},
		{"users/**", []string{"update"}, "default", collections.OpUpdate, "users/u9/chats", true, nil},
		{"users/**", []string{"update"}, "default", collections.OpUpdate, "users", false, nil},
		{"users/{rest=**}", []string{"update"}, "default", collections.OpUpdate, "users/u9/chats",
			true, map[string]string{"rest": "u9/chats"}},
		{"orders", []string{"create"}, "default", collections.OpCreate, "orders", true, nil},
		{"orders", []string{"create"}, "default", collections.ChangeOp("bogus"), "orders", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"@"+tt.collection, func(t *testing.T) {
			def := valid()
			def.Collection, def.Events = tt.pattern, tt.events
			c, err := triggers.Compile(def, nil)
			if err != nil {
				t.Fatal(err)
			}
			params, ok := c.Match(tt.db, tt.op, tt.collection)
			if ok != tt.ok || !reflect.DeepEqual(params, tt.params) {
				t.Fatalf("Match=%v, %v; want %v, %v", params, ok, tt.params, tt.ok)
			}
		})
	}
}

func TestBackoff_Default(t *testing.T) {
	c, err := triggers.Compile(valid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
		5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour}
	for i, w := range want {
		n := i + 1
		if got := c.Backoff(n, func() float64 { return 0.5 }); got != w {
			t.Errorf("Backoff(%d) without jitter=%v, want %v", n, got, w)
		}
		lo, hi := c.Backoff(n, func() float64 { return 0 }), c.Backoff(n, func() float64 { return 0.999999 })
		if lo != time.Duration(float64(w)*0.8) || hi > time.Duration(float64(w)*1.2) || hi < time.Duration(float64(w)*1.19) {
			t.Errorf("Backoff(%d) range=[%v, %v], want ±20%% of %v", n, lo, hi, w)
		}
		for range 20 {
			if got := c.Backoff(n, nil); got < time.Duration(float64(w)*0.8) || got > time.Duration(float64(w)*1.2) {
				t.Errorf("Backoff(%d, nil)=%v, not within ±20%% of %v", n, got, w)
			}
		}
	}
	if c.MaxAttempts() != 8 {
		t.Errorf("MaxAttempts=%d", c.MaxAttempts())
	}
}

func TestBackoff_Policy(t *testing.T) {
	mid := func() float64 { return 0.5 }
	tests := []struct {
		policy   triggers.RetryPolicy
		attempts int
		want     []time.Duration // Backoff(1), Backoff(2), ...
	}{
		{triggers.RetryPolicy{}, 8, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}},
		{triggers.RetryPolicy{MaxAttempts: 3, InitialBackoff: "1s", MaxBackoff: "5s"}, 3,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{triggers.RetryPolicy{MaxAttempts: 1, InitialBackoff: "1m", MaxBackoff: "1m"}, 1,
			[]time.Duration{time.Minute, time.Minute}},
	}
	for _, tt := range tests {
		def := valid()
		p := tt.policy
		def.RetryPolicy = &p
		c, err := triggers.Compile(def, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.MaxAttempts() != tt.attempts {
			t.Errorf("%+v: MaxAttempts=%d, want %d", p, c.MaxAttempts(), tt.attempts)
		}
		for i, w := range tt.want {
			if got := c.Backoff(i+1, mid); got != w {
				t.Errorf("%+v: Backoff(%d)=%v, want %v", p, i+1, got, w)
			}
		}
	}
	// Far attempts stay capped at maxBackoff (no overflow).
	def := valid()
	def.RetryPolicy = &triggers.RetryPolicy{MaxAttempts: 100}
	c, _ := triggers.Compile(def, nil)
	if got := c.Backoff(100, mid); got != 10*time.Hour {
		t.Errorf("Backoff(100)=%v, want 10h", got)
	}
	if got := c.Backoff(100, func() float64 { return 0 }); got != 8*time.Hour {
		t.Errorf("Backoff(100) low jitter=%v, want 8h", got)
	}
}

const goodFile = `[
  {
    "triggerId": "on-user-message",
    "database": "default",
    "collection": "users/{userId}/orch-chats/{chatId}/messages",
    "events": ["create"],
    "condition": "event.document.data.role == 'user'",
    "url": "${LOOM_URL}/webhooks/orchestrator",
    "headers": {"X-Team": "core"},
    "secret": "${LOOM_WEBHOOK_SECRET}",
    "timeout": "120s",
    "retryPolicy": {"maxAttempts": 8, "initialBackoff": "5s", "maxBackoff": "10h"},
    "orderingKey": "event.params.chatId",
    "enabled": true
  },
  {"triggerId": "second", "collection": "orders", "events": ["update", "delete"], "url": "https://example.com/x"}
]`

func TestParseFile(t *testing.T) {
	cs, err := triggers.ParseFile([]byte(goodFile), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Def.ID != "on-user-message" || cs[1].Def.ID != "second" {
		t.Fatalf("got %d triggers", len(cs))
	}
	if cs[0].Def.URL != "http://127.0.0.1:8080/webhooks/orchestrator" || cs[0].Timeout != 120*time.Second {
		t.Errorf("first: url=%q timeout=%v", cs[0].Def.URL, cs[0].Timeout)
	}
	if cs, err := triggers.ParseFile([]byte(" [ ] "), nil); err != nil || len(cs) != 0 {
		t.Errorf("empty array: %v, %v", cs, err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(path, []byte(goodFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if cs, err := triggers.LoadFile(path, testEnv); err != nil || len(cs) != 2 {
		t.Errorf("LoadFile: %d, %v", len(cs), err)
	}
	if _, err := triggers.LoadFile(filepath.Join(dir, "missing.json"), testEnv); err == nil {
		t.Errorf("LoadFile of a missing file: no error")
	}
}

func TestParseFile_Errors(t *testing.T) {
	const ok = `{"triggerId": "a", "collection": "c", "events": ["create"], "url": "https://e.com"}`
	tests := []struct{ src, want string }{
		{``, "not a JSON array"},
		{`null`, "not a JSON array"},
		{`{}`, "not a JSON array"},
		{`[` + ok + `] x`, "not a JSON array"},
		{`[null]`, "trigger #1: null is not a trigger"},
		{`[1]`, "trigger #1"},
		{`[{"triggerId": "a", "colection": "c"}]`, `trigger #1 (triggerId "a"): json: unknown field "colection"`},
		{`[` + ok + `, {"triggerId": "b", "collection": "c", "events": ["create"], "url": "https://e.com", "retryPolicy": {"attempts": 3}}]`,
			`trigger #2 (triggerId "b"): json: unknown field "attempts"`},
		{`[` + ok + `,` + ok + `]`, `trigger #2: triggerId "a" is already used by trigger #1`},
		{`[{"triggerId": "x", "collection": "c", "events": ["create"], "url": "https://e.com", "condition": "event.document.data.n >"}]`,
			`trigger #1: trigger "x": condition "event.document.data.n >": ERROR`},
		{`[{"triggerId": "x", "collection": "c", "events": ["create"], "url": "${UNSET}"}]`,
			`trigger #1: trigger "x": url: ${UNSET}: environment variable UNSET is not set`},
		{`[{"collection": "c", "events": ["create"], "url": "https://e.com"}]`, `trigger #1: trigger with invalid triggerId "": triggerId`},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := triggers.ParseFile([]byte(tt.src), testEnv)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err=%v, want it to contain %q", err, tt.want)
			}
		})
	}
}
