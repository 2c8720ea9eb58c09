package apptest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Request is one webhook a Receiver saw, recorded before it was answered.
type Request struct {
	N      int    // 1 for the first request the receiver saw, and so on
	Path   string // the URL path it was sent to
	Header http.Header
	Raw    []byte
	Body   map[string]any // Raw decoded (nil when it is not a JSON object)
	At     time.Time
}

// ID is the webhook-id header: the event id, the same on every retry.
func (r Request) ID() string { return r.Header.Get("webhook-id") }

// TriggerID is the delivering trigger's id (body.triggerId).
func (r Request) TriggerID() string {
	id, _ := r.Body["triggerId"].(string)
	return id
}

// Event is the body's event object.
func (r Request) Event() map[string]any {
	ev, _ := r.Body["event"].(map[string]any)
	return ev
}

// DocID is the id of the event's document.
func (r Request) DocID() string {
	id, _ := r.Event()["id"].(string)
	return id
}

// Param is the event's path parameter name ("" when absent).
func (r Request) Param(name string) string {
	params, _ := r.Event()["params"].(map[string]any)
	v, _ := params[name].(string)
	return v
}

// Respond answers one request: it may set headers on w and returns the
// status to send with the body {"ok":true}; 0 means Respond wrote the
// whole answer itself (or none: the connection just ends). ctx is the
// request's: done when the sender gives up.
type Respond func(ctx context.Context, w http.ResponseWriter, req Request) int

// Status answers every request with status.
func Status(status int) Respond {
	return func(context.Context, http.ResponseWriter, Request) int { return status }
}

// UnavailableOnce answers the first request 503 with Retry-After: 1 and the
// later ones 200.
func UnavailableOnce(_ context.Context, w http.ResponseWriter, req Request) int {
	if req.N == 1 {
		w.Header().Set("Retry-After", "1")
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// Receiver is a real HTTP server (on loopback) that records the webhooks
// it receives and answers them through its Respond (200 when nil).
type Receiver struct {
	URL string

	srv     *httptest.Server
	mu      sync.Mutex
	got     []Request
	respond Respond
	notify  chan struct{} // a request arrived (buffered 1: a wake-up, not a count)
}

// NewReceiver starts a receiver answering through respond (nil: 200) and
// closes it at cleanup.
func NewReceiver(t testing.TB, respond Respond) *Receiver {
	t.Helper()
	rc := &Receiver{respond: respond, notify: make(chan struct{}, 1)}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	rc.URL = rc.srv.URL
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	rc.mu.Lock()
	req := Request{N: len(rc.got) + 1, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw, Body: body, At: time.Now()}
	rc.got = append(rc.got, req)
	respond := rc.respond
	rc.mu.Unlock()
	select {
	case rc.notify <- struct{}{}:
	default:
	}
	status := http.StatusOK
	if respond != nil {
		status = respond(r.Context(), w, req)
	}
	if status == 0 {
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// SetRespond changes how later requests are answered (nil: 200).
func (rc *Receiver) SetRespond(respond Respond) {
	rc.mu.Lock()
	rc.respond = respond
	rc.mu.Unlock()
}

// Requests returns what the receiver saw so far, in arrival order.
func (rc *Receiver) Requests() []Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Request(nil), rc.got...)
}

// WaitFor waits until cond holds over the requests received (up to
// WaitTimeout) and returns them; it fails the test on timeout.
func (rc *Receiver) WaitFor(t testing.TB, what string, cond func([]Request) bool) []Request {
	t.Helper()
	return rc.WaitWithin(t, WaitTimeout, what, cond)
}

// WaitWithin is WaitFor with its own timeout, for waits known to be long.
func (rc *Receiver) WaitWithin(t testing.TB, timeout time.Duration, what string, cond func([]Request) bool) []Request {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := rc.Requests()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; got %d requests", what, len(got))
		}
		select {
		case <-rc.notify:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RequestFor waits for the delivery of the document with id (up to
// WaitTimeout) and returns its first request.
func (rc *Receiver) RequestFor(t testing.TB, id string) Request {
	t.Helper()
	got := rc.WaitFor(t, "the delivery of "+id, HasDoc(id))
	for _, r := range got {
		if r.DocID() == id {
			return r
		}
	}
	t.Fatalf("no request for %s among %d", id, len(got))
	return Request{}
}

// AtLeast holds once n requests arrived.
func AtLeast(n int) func([]Request) bool {
	return func(rs []Request) bool { return len(rs) >= n }
}

// Exactly holds once exactly n requests arrived.
func Exactly(n int) func([]Request) bool {
	return func(rs []Request) bool { return len(rs) == n }
}

// HasDoc holds once a request for the document with id arrived.
func HasDoc(id string) func([]Request) bool {
	return func(rs []Request) bool {
		for _, r := range rs {
			if r.DocID() == id {
				return true
			}
		}
		return false
	}
}

// Verify checks r's signature with the official Standard Webhooks library
// and fails the test unless secret signed it.
func Verify(t testing.TB, secret string, r Request) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("standardwebhooks.NewWebhook(%q): %v", secret, err)
	}
	if err := wh.Verify(r.Raw, r.Header); err != nil {
		t.Fatalf("standardwebhooks.Verify(%s) with %q: %v (signature %q)", r.ID(), secret, err, r.Header.Get("webhook-signature"))
	}
}
