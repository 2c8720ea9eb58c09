package apptest_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/loomdb/loom/app/apptest"
)

// recorder is a testing.TB that records failures instead of failing, to
// check that the kit's assertions fail when they should.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Fatalf records and ends the goroutine, as testing's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// run runs f with a recorder on its own goroutine (Fatalf ends it) and
// returns what failed.
func run(t *testing.T, f func(tb testing.TB)) []string {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
	}()
	<-done
	return rec.errors
}

func TestReceiver_SignedDeliveryFromANode(t *testing.T) {
	rc := apptest.NewReceiver(t, apptest.UnavailableOnce)
	s := apptest.Start(t, apptest.Options{Triggers: fmt.Sprintf(
		`[{"triggerId":"t1","collection":"items","events":["create"],"url":%q,"secret":%q,"retryPolicy":{"initialBackoff":"10ms"}}]`,
		rc.URL+"/hook", apptest.WebhookSecret)})
	s.Put(t, "items/a", `{"n":1}`)
	got := rc.WaitFor(t, "the retry after the 503", apptest.AtLeast(2))
	r := got[1]
	if r.N != 2 || r.Path != "/hook" || r.DocID() != "a" || r.TriggerID() != "t1" || r.ID() != got[0].ID() {
		t.Fatalf("second request N=%d path=%q doc=%q trigger=%q id=%q (first %q)", r.N, r.Path, r.DocID(), r.TriggerID(), r.ID(), got[0].ID())
	}
	apptest.Verify(t, apptest.WebhookSecret, r)
	if errs := run(t, func(tb testing.TB) { apptest.Verify(tb, "whsec_"+strings.Repeat("A", 32), r) }); len(errs) != 1 {
		t.Fatalf("Verify with another secret: %v, want one failure", errs)
	}
}

func TestScenario_ExpectedChanges(t *testing.T) {
	s := apptest.Start(t, apptest.Options{})
	user := s.SignUp(t, "alice")
	apptest.RunScenarios(t, s, []apptest.Scenario{
		{
			Name: "create", Method: "PUT", URL: "/api/v1/databases/default/documents/items/a", Body: `{"doc":{"n":1}}`,
			ExpectedStatus: http.StatusCreated, ExpectedContent: []string{`"n":1`},
			ExpectedChanges: []apptest.Change{apptest.Created("items/a")},
		},
		{
			Name: "update", Method: "PATCH", URL: "/api/v1/databases/default/documents/items/a", Body: `{"doc":{"n":2}}`,
			ExpectedStatus: http.StatusOK, ExpectedChanges: []apptest.Change{apptest.Updated("items/a")},
		},
		{
			Name: "refused", Method: "DELETE", URL: "/api/v1/databases/default/documents/items/a", Headers: user.Header(),
			ExpectedStatus: http.StatusForbidden, NotExpectedContent: []string{`"n":2`},
		},
		{
			Name: "delete", Method: "DELETE", URL: "/api/v1/databases/default/documents/items/a",
			ExpectedStatus: http.StatusNoContent, ExpectedChanges: []apptest.Change{apptest.Deleted("items/a")},
		},
	})

	// A row that misstates what the request committed fails.
	wrong := apptest.Scenario{Method: "PUT", URL: "/api/v1/databases/default/documents/items/b", Body: `{"doc":{}}`, ExpectedStatus: http.StatusCreated}
	errs := run(t, func(tb testing.TB) { wrong.Test(tb, s) })
	if len(errs) != 1 || !strings.Contains(errs[0], "changes=[create items/b], want []") {
		t.Fatalf("a row missing a change: %q", errs)
	}
}

func TestStart_RestartOnTheSameDataDir(t *testing.T) {
	s := apptest.Start(t, apptest.Options{})
	s.Put(t, "items/a", `{"n":1}`)
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	again := apptest.Start(t, apptest.Options{DataDir: s.DataDir})
	again.MustDo(t, http.StatusOK, "GET", "/api/v1/databases/default/documents/items/a", "")
}
