package tools

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/loomdb/loom/internal/ssrf"
)

type seen struct {
	mu     sync.Mutex
	method string
	uri    string
	header http.Header
	body   string
}

func recordServer(t *testing.T, s *seen, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.method, s.uri, s.header, s.body = r.Method, r.RequestURI, r.Header.Clone(), string(b)
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPGet(t *testing.T) {
	var s seen
	srv := recordServer(t, &s, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/final":
			t.Error("redirect followed")
		case "/big":
			io.WriteString(w, strings.Repeat("é", MaxResponseBody)) // 2 bytes each
		case "/missing":
			http.Error(w, "nope", http.StatusNotFound)
		default:
			io.WriteString(w, "hello")
		}
	})
	r := mustNew(t, nil, Deps{})
	got, err := run(t, r, "http_get", `{"url":"`+srv.URL+`/x"}`, Call{})
	if err != nil || got != `{"body":"hello","status":200}` {
		t.Fatalf("%s %v", got, err)
	}
	got, err = run(t, r, "http_get", `{"url":"`+srv.URL+`/redirect"}`, Call{})
	if err != nil || !strings.Contains(got, `"status":302`) {
		t.Fatalf("redirect: %s %v", got, err)
	}
	got, err = run(t, r, "http_get", `{"url":"`+srv.URL+`/missing"}`, Call{})
	if err != nil || !strings.Contains(got, `"status":404`) {
		t.Fatalf("404: %s %v", got, err)
	}
	v, err := r.Run(t.Context(), "http_get", `{"url":"`+srv.URL+`/big"}`, Call{})
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if b := m["body"].(string); len(b) != MaxResponseBody || m["truncated"] != true || strings.ContainsRune(b, '\uFFFD') {
		t.Fatalf("big: %d bytes, truncated %v", len(b), m["truncated"])
	}
	for _, u := range []string{"file:///etc/passwd", "example.com/x", "http://", "::"} {
		_, err := run(t, r, "http_get", `{"url":"`+u+`"}`, Call{})
		wantInvalid(t, err, "url")
	}
}

func TestHTTPGetSSRF(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "internal") }))
	defer srv.Close()
	guard, err := ssrf.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := mustNew(t, nil, Deps{Transport: guard.Transport()})
	_, err = run(t, r, "http_get", `{"url":"`+srv.URL+`"}`, Call{})
	if !errors.Is(err, ssrf.ErrBlocked) || errors.Is(err, ErrInvalidArgs) {
		t.Fatalf("loopback: %v", err)
	}

	// The same guard also covers http tools.
	r = mustNew(t, []Def{{Name: "hook", ExecutionType: "http", Execution: &HTTPExecution{URL: srv.URL, Method: "POST"}}}, Deps{Transport: guard.Transport()})
	if _, err := run(t, r, "hook", `{}`, Call{}); !errors.Is(err, ssrf.ErrBlocked) {
		t.Fatalf("http tool loopback: %v", err)
	}

	guard, err = ssrf.New([]string{"127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r = mustNew(t, nil, Deps{Transport: guard.Transport()})
	got, err := run(t, r, "http_get", `{"url":"`+srv.URL+`"}`, Call{})
	if err != nil || got != `{"body":"internal","status":200}` {
		t.Fatalf("allowed: %s %v", got, err)
	}
}

func TestHTTPTool(t *testing.T) {
	var s seen
	srv := recordServer(t, &s, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/fail"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"down"}`)
		case strings.HasPrefix(r.URL.Path, "/redirect"):
			http.Redirect(w, r, "/final", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/final"):
			t.Error("redirect followed")
		case strings.HasPrefix(r.URL.Path, "/text"):
			io.WriteString(w, "plain text")
		default:
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			io.WriteString(w, `{"temp": 21.5, "ok": true}`)
		}
	})
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"},
		"user": map[string]any{"type": "object"},
	}, "required": []any{"city"}}
	defs := []Def{
		{Name: "weather", ExecutionType: "http", InputSchema: schema, Execution: &HTTPExecution{
			URL:     srv.URL + "/w/{{input.city}}?q={{ input.city }}&n={{input.user.n}}",
			Headers: map[string]string{"X-City": "{{input.city}}", "Authorization": "Bearer k-{{input.user.name}}"},
		}},
		{Name: "post", ExecutionType: "http", Visibility: "result-only", InputSchema: schema, Execution: &HTTPExecution{
			URL: srv.URL + "/p", Method: "post", Timeout: 5000,
			Body: `{"city": "{{input.city}}", "n": {{input.user.n}}}`,
		}},
		{Name: "postdefault", ExecutionType: "http", InputSchema: schema, Execution: &HTTPExecution{URL: srv.URL + "/text", Method: "PUT"}},
		{Name: "fail", ExecutionType: "http", InputSchema: schema, Execution: &HTTPExecution{URL: srv.URL + "/fail"}},
		{Name: "redir", ExecutionType: "http", InputSchema: schema, Execution: &HTTPExecution{URL: srv.URL + "/redirect"}},
	}
	r := mustNew(t, defs, Deps{})
	if d, _ := r.Get("post"); d.Visibility != "result-only" {
		t.Fatalf("visibility %q", d.Visibility)
	}

	got, err := run(t, r, "weather", `{"city": "São Paulo/&x=1", "user": {"n": 3, "name": "ann"}}`, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"body":{"ok":true,"temp":21.5},"status":200}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	if want := "/w/S%C3%A3o%20Paulo%2F%26x%3D1?q=S%C3%A3o%20Paulo%2F%26x%3D1&n=3"; s.uri != want {
		t.Errorf("uri %s\nwant %s", s.uri, want)
	}
	if s.method != "GET" || s.header.Get("X-City") != "São Paulo/&x=1" || s.header.Get("Authorization") != "Bearer k-ann" || s.body != "" {
		t.Errorf("GET request: %s %v %q", s.method, s.header, s.body)
	}

	_, err = run(t, r, "weather", `{"city": "x"}`, Call{})
	wantInvalid(t, err, "weather", `missing field "user.n"`)
	_, err = run(t, r, "weather", `{"city": "x", "user": {"n": 1, "name": "a\r\nX-Evil: 1"}}`, Call{})
	wantInvalid(t, err, "line breaks")

	got, err = run(t, r, "post", `{"city": "say \"hi\"", "user": {"n": 7}}`, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if s.method != "POST" || s.body != `{"city": "say \"hi\"", "n": 7}` || s.header.Get("Content-Type") != "application/json" {
		t.Errorf("POST request: %s %q %v", s.method, s.body, s.header)
	}

	got, err = run(t, r, "postdefault", `{"city": "x", "user": {"n": 1}}`, Call{})
	if err != nil || got != `{"body":"plain text","status":200}` {
		t.Fatalf("text: %s %v", got, err)
	}
	if s.method != "PUT" || s.body != `{"city":"x","user":{"n":1}}` || s.header.Get("Content-Type") != "application/json" {
		t.Errorf("PUT default body: %s %q", s.method, s.body)
	}

	_, err = run(t, r, "fail", `{"city": "x"}`, Call{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 503 || errors.Is(err, ErrInvalidArgs) ||
		!strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), `"error":"down"`) {
		t.Fatalf("non-2xx: %v", err)
	}
	_, err = run(t, r, "redir", `{"city": "x"}`, Call{})
	if !errors.As(err, &se) || se.Status != 302 {
		t.Fatalf("redirect: %v", err)
	}
}

// A failed request's error, which the model and the user's chat see, does
// not quote the tool's URL (the operator's, which may carry a key).
func TestHTTPTool_ErrorDoesNotQuoteTheURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Close() // connection refused
	r := mustNew(t, []Def{{Name: "hook", ExecutionType: "http", Execution: &HTTPExecution{URL: srv.URL + "/v1?apikey=SECRET&q={{input.q}}"}}}, Deps{})
	_, err := run(t, r, "hook", `{"q": "x"}`, Call{})
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "hook") {
		t.Fatalf("err %v: want the tool's failure without its URL", err)
	}
}
