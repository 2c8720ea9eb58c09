package triggers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomdb/loom/app/apptest"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

func TestCompile_SyntrixFormat(t *testing.T) {
	base := func(format string, scope []string) triggers.Trigger {
		d := valid()
		d.Collection = "users/{userId}/chats/{chatId}/messages"
		d.Format, d.TokenScope = format, scope
		return d
	}
	for _, ok := range []triggers.Trigger{
		base("", nil), base("loom", nil), base("syntrix", nil),
		base("syntrix", []string{"users/{userId}/**"}),
		base("syntrix", []string{"users/{userId}/chats/{chatId}/**", "audit/{chatId}", "shared/*"}),
	} {
		c, err := triggers.Compile(ok, nil)
		if err != nil {
			t.Errorf("%q %v: %v", ok.Format, ok.TokenScope, err)
			continue
		}
		if c.Def.Format != ok.Format || fmt.Sprint(c.Def.TokenScope) != fmt.Sprint(ok.TokenScope) {
			t.Errorf("Def %q %v, want the definition's", c.Def.Format, c.Def.TokenScope)
		}
	}
	many := make([]string, triggers.MaxTokenScope+1)
	for i := range many {
		many[i] = fmt.Sprintf("x%d/**", i)
	}
	for _, c := range []struct {
		def  triggers.Trigger
		want string
	}{
		{base("Syntrix", nil), `format: "Syntrix" is not a webhook format`},
		{base("", []string{"users/{userId}/**"}), `tokenScope: only with "format": "syntrix"`},
		{base("loom", []string{"users/{userId}/**"}), `tokenScope: only with`},
		{base("syntrix", []string{}), "tokenScope: 1 to 16 path patterns"},
		{base("syntrix", many), "tokenScope: 1 to 16 path patterns"},
		{base("syntrix", []string{"users/{uid}/**"}), `{uid} is not a capture of the collection pattern`},
		{base("syntrix", []string{"users/{userId}/{rest=**}"}), `{rest=**} cannot be bound`},
		{base("syntrix", []string{"_users/{userId}"}), "system collections"},
		{base("syntrix", []string{"users/{userId}/notes"}), "3 segments name a collection"},
		{base("syntrix", []string{"users//x"}), "segment 2 is empty"},
	} {
		_, err := triggers.Compile(c.def, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %v: err %v, want %q", c.def.Format, c.def.TokenScope, err, c.want)
		}
	}
}

// tokenRecorder is a Config.IssueToken that records what it was asked.
type tokenRecorder struct {
	mu   sync.Mutex
	reqs []triggers.TokenRequest
	fail error
}

func (r *tokenRecorder) issue(q triggers.TokenRequest) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return "", r.fail
	}
	r.reqs = append(r.reqs, q)
	return fmt.Sprintf("tok-%d-%s", len(r.reqs), q.TriggerID), nil
}

func (r *tokenRecorder) requests() []triggers.TokenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]triggers.TokenRequest(nil), r.reqs...)
}

func TestSyntrixFormat_RefusedWithoutIssuer(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/triggers.json"
	def := "[" + triggerJSON("sx", "https://example.com/h", `, "format": "syntrix"`) + "]"
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dir)
	defer st.Close()
	_, err := triggers.New(context.Background(), triggers.Config{Store: st, File: file})
	if err == nil || !strings.Contains(err.Error(), `format "syntrix" needs the auth service`) || !strings.Contains(err.Error(), `"sx"`) {
		t.Fatalf("New without IssueToken: %v", err)
	}
	rec := &tokenRecorder{}
	svc, err := triggers.New(context.Background(), triggers.Config{Store: st, File: file, IssueToken: rec.issue})
	if err != nil {
		t.Fatalf("New with IssueToken: %v", err)
	}
	_ = svc

	// Registration and reload without an issuer.
	e := startEnv(t, "[]", triggers.Config{})
	var d triggers.Trigger
	d.ID, d.Collection, d.Events, d.URL, d.Format = "api-sx", "users/{userId}/inbox", []string{"create"}, "https://example.com/h", "syntrix"
	if _, _, err := e.svc.Register(context.Background(), d); !errors.Is(err, triggers.ErrInvalid) || !strings.Contains(err.Error(), "auth service") {
		t.Fatalf("Register without IssueToken: %v", err)
	}
	d.Format = ""
	if _, _, err := e.svc.Register(context.Background(), d); err != nil {
		t.Fatalf("Register loom format: %v", err)
	}
	if err := os.WriteFile(e.file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "auth service") {
		t.Fatalf("Reload without IssueToken: %v", err)
	}
}

// Every attempt gets its own token, scoped to the event's collection (or
// the bound tokenScope), living the timeout plus 5 minutes; a failing
// issuer fails the attempt without sending anything.
func TestSyntrixFormat_TokenPerAttempt(t *testing.T) {
	var sxSeen sync.Once
	rc := apptest.NewReceiver(t, func(_ context.Context, w http.ResponseWriter, req apptest.Request) int {
		status := http.StatusOK
		if req.Path == "/sx" {
			sxSeen.Do(func() { status = http.StatusServiceUnavailable }) // sx's first attempt fails
		}
		return status
	})
	rec := &tokenRecorder{}
	file := "[" + triggerJSON("sx", rc.URL+"/sx", `, "format": "syntrix", "timeout": "20s", "retryPolicy": {"maxAttempts": 3, "initialBackoff": "10ms"}`) + "," +
		triggerJSON("scoped", rc.URL+"/scoped", `, "format": "syntrix", "tokenScope": ["users/{userId}/profile/**", "audit/{chatId}"]`) + "]"
	e := startEnv(t, file, triggers.Config{IssueToken: rec.issue})
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m1", map[string]any{"text": "hi"})

	got := rc.WaitFor(t, "two attempts of sx and one of scoped", func(rs []apptest.Request) bool {
		n := map[string]int{}
		for _, r := range rs {
			n[r.Path]++
		}
		return n["/sx"] >= 2 && n["/scoped"] >= 1
	})
	seen := map[string]bool{}
	for _, r := range got {
		apptest.Verify(t, testSecret, r)
		tok, _ := r.Body["preIssuedToken"].(string)
		if tok == "" || seen[tok] {
			t.Fatalf("request %d to %s: token %q (reused or missing)", r.N, r.Path, tok)
		}
		seen[tok] = true
		if r.Body["docKey"] != "users/u1/chats/c1/messages/m1" || r.Body["collection"] != "users/u1/chats/c1/messages" {
			t.Fatalf("body %s", r.Raw)
		}
	}
	for _, q := range rec.requests() {
		switch q.TriggerID {
		case "sx":
			if fmt.Sprint(q.Scope) != "[users/u1/chats/c1/messages/**]" || q.TTL != 20*time.Second+5*time.Minute || q.Database != "default" || q.Delivery == "" {
				t.Fatalf("sx token request %+v", q)
			}
		case "scoped":
			if fmt.Sprint(q.Scope) != "[users/u1/profile/** audit/c1]" || q.TTL != 30*time.Second+5*time.Minute {
				t.Fatalf("scoped token request %+v", q)
			}
		default:
			t.Fatalf("token request %+v", q)
		}
	}

	// An issuer that fails: the attempt fails with its error, nothing is
	// sent.
	rec.mu.Lock()
	rec.fail = errors.New("signer down")
	rec.mu.Unlock()
	before := len(rc.Requests())
	e.write(t, collections.WriteCreate, "users/u1/chats/c1/messages/m2", map[string]any{"text": "again"})
	ds := waitDeliveries(t, e.svc, triggers.DeliveryQuery{TriggerID: "scoped"}, func(ds []*triggers.Delivery) bool {
		for _, d := range ds {
			if len(d.Attempts) > 0 && strings.Contains(d.Attempts[0].Error, "preIssuedToken: signer down") {
				return true
			}
		}
		return false
	})
	if len(ds) == 0 {
		t.Fatal("no delivery")
	}
	for _, r := range rc.Requests()[before:] {
		if r.Body["docKey"] == "users/u1/chats/c1/messages/m2" {
			t.Fatalf("a request was sent without a token: %s", r.Raw)
		}
	}
}
