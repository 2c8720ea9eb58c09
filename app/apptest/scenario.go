package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// Change is one change-log entry a request must commit.
type Change struct {
	Type collections.ChangeOp
	Path string
}

func (c Change) String() string { return string(c.Type) + " " + c.Path }

// Created, Updated and Deleted name the entries of ExpectedChanges.
func Created(path string) Change { return Change{collections.OpCreate, path} }
func Updated(path string) Change { return Change{collections.OpUpdate, path} }
func Deleted(path string) Change { return Change{collections.OpDelete, path} }

// Scenario is one request against a running Stack and everything it must
// do, in the spirit of PocketBase's tests.ApiScenario — and beyond it:
// ExpectedChanges is read from the store's change log, so a row proves
// what the request committed, and a row without it proves the request
// committed nothing (the point of every 4xx row).
type Scenario struct {
	Name   string
	Method string
	URL    string // path on the node, e.g. /admin/v1/triggers
	Body   string
	// Headers are sent as Do sends them: the admin key unless they set
	// Authorization or X-API-Key ("" removes a header; see Anonymous,
	// Bearer and User.Header).
	Headers map[string]string

	ExpectedStatus int
	// ExpectedContent and NotExpectedContent are substrings of the
	// compacted JSON body (of the raw body when it is not JSON). For a
	// status of 400 and above the body must also have the error shape.
	ExpectedContent    []string
	NotExpectedContent []string
	// ExpectedChanges are the change-log entries the request commits, in
	// commit order: exactly these, in any database. Empty means none.
	ExpectedChanges []Change

	BeforeTest func(t testing.TB, s *Stack)
	AfterTest  func(t testing.TB, s *Stack, res *Response)
}

// RunScenarios runs each scenario as a subtest on s, in order (they share
// the node, so a row sees what the rows before it committed).
func RunScenarios(t *testing.T, s *Stack, scenarios []Scenario) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) { sc.Test(t, s) })
	}
}

// Test runs the scenario on s.
func (sc Scenario) Test(t testing.TB, s *Stack) {
	t.Helper()
	if sc.BeforeTest != nil {
		sc.BeforeTest(t, s)
	}
	before := s.Head(t)
	res := s.Do(t, sc.Method, sc.URL, sc.Body, sc.Headers)
	changes := s.ChangesSince(t, before)

	if res.Status != sc.ExpectedStatus {
		t.Errorf("%s %s: status=%d, want %d; body %s", sc.Method, sc.URL, res.Status, sc.ExpectedStatus, res.Body)
	}
	if got, want := fmt.Sprint(changes), fmt.Sprint(sc.ExpectedChanges); got != want {
		t.Errorf("%s %s: changes=%v, want %v", sc.Method, sc.URL, got, want)
	}
	CheckContent(t, res, sc.ExpectedContent, sc.NotExpectedContent)
	if res.Status >= 400 {
		CheckErrorShape(t, res)
	}
	if sc.AfterTest != nil {
		sc.AfterTest(t, s, res)
	}
}

// CheckContent asserts that the compacted JSON body (the raw body when it
// is not JSON) holds every string of want and none of unwanted.
func CheckContent(t testing.TB, res *Response, want, unwanted []string) {
	t.Helper()
	body := compact(res.Body)
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("body does not contain %s\nbody: %s", w, body)
		}
	}
	for _, u := range unwanted {
		if strings.Contains(body, u) {
			t.Errorf("body contains %s\nbody: %s", u, body)
		}
	}
}

// ChangesSince lists the document changes committed after seq, up to the
// head now. Loom's own logged state (`_triggers`: trigger switches and the
// counters every node flushes about once a second while it delivers) is
// left out, so a scenario's expectations do not depend on that timing.
func (s *Stack) ChangesSince(t testing.TB, seq int64) []Change {
	t.Helper()
	head := s.Head(t)
	var out []Change
	for seq < head {
		cs, err := s.Store.ReadChanges(context.Background(), seq, 1000)
		if err != nil {
			t.Fatalf("ReadChanges(%d): %v", seq, err)
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			if c.Seq > head {
				return out
			}
			if !collections.IsSystemPath(c.Path) {
				out = append(out, Change{c.Op, c.Path})
			}
			seq = c.Seq
		}
	}
	return out
}

// CheckErrorShape asserts the error body of README "Errors":
// application/json {"code":"UPPER_SNAKE","message":"...","details":{...}?}.
func CheckErrorShape(t testing.TB, res *Response) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type=%q, want application/json", ct)
	}
	var e struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	}
	dec := json.NewDecoder(bytes.NewReader(res.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Errorf("error body %s: %v", res.Body, err)
		return
	}
	if e.Code == "" || strings.ToUpper(e.Code) != e.Code || e.Message == "" {
		t.Errorf("error body %s: want an UPPER_SNAKE code and a message", res.Body)
	}
	if len(e.Details) > 0 && e.Details[0] != '{' {
		t.Errorf("error details %s: want an object", e.Details)
	}
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}
