package webhooks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/webhooks"
)

// The agent handlers' request checks over real HTTP, on both wirings the
// runtime has: inside `loom serve` (the node's router, POST
// /webhooks/*name) and standalone as `loom agents` serves it (a ServeMux
// in front of the same Handlers). Every refused request must leave the
// store untouched: the handlers run synchronously and answer only after
// their writes, so once the refusal's response has arrived, any write it
// caused is already in the change log — the response is the barrier, no
// sleep is needed. The test ends with the same event, correctly signed,
// being accepted and writing: the refusals were for the reason each case
// names, not for a mistake in how the test builds its requests.

// webhookTarget is one way the agent handlers are served.
type webhookTarget struct {
	name string
	url  string // base URL; the handlers are under /webhooks/
	// node reports the node's router in front of the handlers (its own
	// 405 and error shape) rather than the bare Handlers.
	node bool
}

func webhookTargets(t *testing.T, s *stack) []webhookTarget {
	t.Helper()
	if s.node.Agents == nil {
		t.Fatal("the node runs no agent handlers")
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", s.node.Agents) // as cmd/loom/agents.go mounts it
	standalone := httptest.NewServer(mux)
	t.Cleanup(standalone.Close)
	return []webhookTarget{{name: "loom serve", url: s.URL, node: true}, {name: "loom agents", url: standalone.URL}}
}

// userMessageEvent is a delivery of the shipped on-user-message trigger:
// a user message in chat c1. The orchestrator handler, given it, writes
// (the chat document at least).
func (s *stack) userMessageEvent(eventID string) []byte {
	c := s.chat("c1")
	body, err := json.Marshal(map[string]any{"id": eventID, "triggerId": "on-user-message", "event": map[string]any{
		"type": "create", "path": c + "/messages/m1", "id": "m1",
		"document": map[string]any{"id": "m1", "collection": c + "/messages", "path": c + "/messages/m1", "version": 1,
			"data": map[string]any{"role": "user", "content": "What is 6*7?", "userId": s.user, "chatId": "c1"}},
	}})
	if err != nil {
		s.t.Fatal(err)
	}
	return body
}

// signedHeaders signs body as the trigger pipeline does, at timestamp at.
func signedHeaders(t *testing.T, eventID string, at time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(eventID, at, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", eventID)
	h.Set("webhook-timestamp", fmt.Sprint(at.Unix()))
	h.Set("webhook-signature", sig)
	return h
}

// webhookReply is a handler's answer: status, Allow header and the error
// it names — the handlers' own {"error": "message"}, or the node router's
// {"code": CODE, "message": ...} as "CODE".
type webhookReply struct {
	status int
	allow  string
	err    string
}

func readReply(t *testing.T, res *http.Response) webhookReply {
	t.Helper()
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("status %d, body %q: not a JSON object: %v", res.StatusCode, raw, err)
	}
	r := webhookReply{status: res.StatusCode, allow: res.Header.Get("Allow"), err: body.Error}
	if body.Code != "" {
		r.err = body.Code
	}
	return r
}

func postWebhook(t *testing.T, method, u string, hdr http.Header, body io.Reader) webhookReply {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return readReply(t, res)
}

// rawPost sends head (the request line and headers, CRLF-terminated, no
// blank line) and then body over a plain TCP connection, half-closes it
// so that the server sees the end of what was sent, and reads the reply:
// a request net/http's client will not send (a truncated body, a broken
// chunked encoding).
func rawPost(t *testing.T, base, head, body string) webhookReply {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, head+"Host: "+u.Host+"\r\nConnection: close\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	return readReply(t, res)
}

// noWrites records the change-log head and the agent documents, and
// returns a check that fails the test if either changed since. Called right
// after a refused request's response has arrived, it sees every write that
// request made (see the top of this file).
func (s *stack) noWrites() func(what string) {
	s.t.Helper()
	headBefore, err := s.store.Head(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	docsBefore := s.agentDocs()
	return func(what string) {
		s.t.Helper()
		head, err := s.store.Head(context.Background())
		if err != nil {
			s.t.Fatal(err)
		}
		if head != headBefore {
			changes, _ := s.store.ReadChanges(context.Background(), headBefore, 20)
			var paths []string
			for _, c := range changes {
				paths = append(paths, fmt.Sprintf("%d %s", c.Seq, c.Path))
			}
			s.t.Fatalf("%s: the change log moved from %d to %d: %v\n%s", what, headBefore, head, paths, s.dump())
		}
		s.wantAgentDocs(docsBefore, "after "+what)
	}
}

func TestAgents_RequestChecks(t *testing.T) {
	s := startStack(t, stackOpts{})
	targets := webhookTargets(t, s)

	// The handlers accept bodies up to the node's limit for a system
	// document (app/agents.go), at least webhooks.DefaultMaxBody.
	maxBody := max(sqlite.SystemDocumentFactor*int64(s.node.Config.Limits.MaxDocumentBytes)+sqlite.SystemDocumentSlack, webhooks.DefaultMaxBody)

	nothingWritten := s.noWrites()
	body := s.userMessageEvent("evt_checks")
	for _, tg := range targets {
		u := tg.url + "/webhooks/orchestrator"

		// A wrong method: 405 naming POST. The node's router answers it
		// before the handler, with its METHOD_NOT_ALLOWED error.
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			got := postWebhook(t, method, u, signedHeaders(t, "evt_checks", time.Now(), body), bytes.NewReader(body))
			want := webhookReply{status: 405, allow: "POST", err: "use POST"}
			if tg.node {
				want.err = "METHOD_NOT_ALLOWED"
			}
			if got != want {
				t.Errorf("%s: %s: %+v, want %+v", tg.name, method, got, want)
			}
			nothingWritten(tg.name + ": " + method)
		}

		// A correctly signed body one byte over the limit: 413, whatever
		// the signature says.
		big := append(append([]byte{}, body[:len(body)-1]...), bytes.Repeat([]byte(" "), int(maxBody)-len(body)+1)...)
		big = append(big, '}')
		if got, want := postWebhook(t, http.MethodPost, u, signedHeaders(t, "evt_big", time.Now(), big), bytes.NewReader(big)),
			(webhookReply{status: 413, err: "body too large"}); got != want {
			t.Errorf("%s: %d-byte body (limit %d): %+v, want %+v", tg.name, len(big), maxBody, got, want)
		}
		nothingWritten(tg.name + ": an over-size body")

		// A body that cannot be read: shorter than its Content-Length, or
		// a broken chunked encoding. 400: not "too large".
		hdr := signedHeaders(t, "evt_checks", time.Now(), body)
		head := "POST /webhooks/orchestrator HTTP/1.1\r\n"
		for _, k := range []string{"Content-Type", "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
			head += k + ": " + hdr.Get(k) + "\r\n"
		}
		for _, c := range []struct{ name, head, body string }{
			{"truncated body", head + fmt.Sprintf("Content-Length: %d\r\n", len(body)), string(body[:len(body)/2])},
			{"broken chunked body", head + "Transfer-Encoding: chunked\r\n", "zz\r\n" + string(body) + "\r\n0\r\n\r\n"},
		} {
			if got, want := rawPost(t, tg.url, c.head, c.body), (webhookReply{status: 400, err: "unreadable body"}); got != want {
				t.Errorf("%s: %s: %+v, want %+v", tg.name, c.name, got, want)
			}
			nothingWritten(tg.name + ": " + c.name)
		}

		// A correctly signed request whose webhook-timestamp is outside
		// the 5-minute tolerance (a replayed delivery), in the past or in
		// the future: 401.
		for _, c := range []struct {
			name string
			at   time.Time
		}{{"stale timestamp", time.Now().Add(-6 * time.Minute)}, {"future timestamp", time.Now().Add(6 * time.Minute)}} {
			got := postWebhook(t, http.MethodPost, u, signedHeaders(t, "evt_checks", c.at, body), bytes.NewReader(body))
			if want := (webhookReply{status: 401, err: "invalid webhook signature"}); got != want {
				t.Errorf("%s: %s: %+v, want %+v", tg.name, c.name, got, want)
			}
			nothingWritten(tg.name + ": " + c.name)
		}
	}

	// The same event, signed now, is accepted and writes: the refusals
	// above were for their own reasons.
	if got := postWebhook(t, http.MethodPost, targets[0].url+"/webhooks/orchestrator", signedHeaders(t, "evt_checks", time.Now(), body), bytes.NewReader(body)); got.status != 200 {
		t.Fatalf("the event signed now: %+v, want 200", got)
	}
	if s.get(s.chat("c1")) == nil {
		t.Fatalf("the accepted event did not create the chat\n%s", s.dump())
	}
}
