package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
)

// TestBench_MixAndUser runs every phase against the embedded server with
// a small data set: each phase completes operations without an error.
// (Whether a probe warns is a matter of timing, which TestBenchProbe_WarnsOnScan
// covers without a real server.)
func TestBench_MixAndUser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and seeds documents")
	}
	var out bytes.Buffer
	args := []string{"--mix", "--user", "--clients", "4", "--duration", "150ms", "--seed", "1000", "--user-seed", "200"}
	if err := bench(context.Background(), args, &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, phase := range []string{
		"create (durable, REST)", "get by path (REST)", "query ==, limit 20 (REST)",
		"mix a: ==, limit 20", "mix b: == orderBy n desc, limit 20", "mix c: group bench/*/items ==, limit 20",
		"mix d: in (3 values), limit 20", "mix e: user's own ==, limit 20 (default rules)",
		"user: create (durable, default rules)", "user: get by path (default rules)",
	} {
		row := rowOf(text, phase)
		if row == nil {
			t.Fatalf("no row for %q in\n%s", phase, text)
		}
		if len(row) != 7 || row[1] == "0" || row[6] != "0" || !strings.HasSuffix(row[5], " µs") {
			t.Errorf("phase %q: row %q: want ops, CPU/op and no errors", phase, row)
		}
	}
	if strings.Contains(text, "errors, the first") || strings.Contains(text, "probe failed") || strings.Contains(text, "no CPU/op") {
		t.Errorf("errors:\n%s", text)
	}
	if !strings.Contains(text, "seeded 1000 documents") || !strings.Contains(text, "seeded 200 documents") {
		t.Errorf("seeding not reported:\n%s", text)
	}
}

// rowOf returns the cells of the table row of phase, or nil.
func rowOf(text, phase string) []string {
	for line := range strings.SplitSeq(text, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) > 1 && cells[0] == phase {
			return cells
		}
	}
	return nil
}

// fakeQueryServer answers /query with handle and every other request 404.
func fakeQueryServer(t *testing.T, handle func(body string) (time.Duration, string)) *benchRun {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		if !strings.HasSuffix(r.URL.Path, "/query") {
			http.NotFound(w, r)
			return
		}
		wait, page := handle(body.String())
		time.Sleep(wait)
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return &benchRun{opts: benchOptions{url: srv.URL, db: "default"}, client: srv.Client()}
}

// TestBenchProbe_WarnsOnScan: a query for a value nothing has is what a
// missing index makes slow; the probe warns then, and not when both
// probes are fast.
func TestBenchProbe_WarnsOnScan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		emptyWait time.Duration
		warn      bool
	}{{"indexed", 0, false}, {"scan", 2 * scanSuspect, true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := fakeQueryServer(t, func(body string) (time.Duration, string) {
				if strings.Contains(body, `"none"`) {
					return tc.emptyWait, `{"docs":[],"nextCursor":null}`
				}
				return 0, `{"docs":[{"id":"a"}],"nextCursor":null}`
			})
			q := func(empty bool) error {
				v := "g1"
				if empty {
					v = "none"
				}
				return b.queryPage("k", []byte(`{"value":"`+v+`"}`), !empty)
			}
			got := b.probe(context.Background(), "p", q)
			if (got != "") != tc.warn {
				t.Fatalf("probe warning %q, want one: %v", got, tc.warn)
			}
		})
	}
}

// TestBenchQueryPage_CountsEmptyPagesAsErrors: a phase's query must
// return documents; an empty page or a non-page is an error.
func TestBenchQueryPage_CountsEmptyPagesAsErrors(t *testing.T) {
	for page, wantErr := range map[string]bool{
		`{"docs":[{"id":"a"}],"nextCursor":null}`: false,
		`{"docs":[],"nextCursor":null}`:           true,
		`{"error":{}}`:                            true,
	} {
		b := fakeQueryServer(t, func(string) (time.Duration, string) { return 0, page })
		if err := b.queryPage("k", []byte(`{}`), true); (err != nil) != wantErr {
			t.Errorf("page %s: error %v, want one: %v", page, err, wantErr)
		}
	}
}

// TestBenchIndexes_InDeployConfig: `loom bench --url` through the compose
// proxy measures the same indexed queries as the embedded server.
func TestBenchIndexes_InDeployConfig(t *testing.T) {
	cfg, err := config.Load(config.Flags{Config: "../../deploy/loom.toml"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range benchIndexes {
		if !slices.ContainsFunc(cfg.Indexes, func(ix collections.Index) bool {
			return ix.Collection == want.Collection && slices.Equal(ix.Fields, want.Fields)
		}) {
			t.Errorf("deploy/loom.toml lacks [[index]] %v", want)
		}
	}
}

func TestProcessCPU(t *testing.T) {
	text := "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\nprocess_open_fds 9\n"
	if v, err := processCPU([]byte(text)); err != nil || v != 12.5 {
		t.Fatalf("processCPU = %v, %v; want 12.5", v, err)
	}
	if _, err := processCPU([]byte("process_open_fds 9\n")); err == nil {
		t.Fatal("no error without process_cpu_seconds_total")
	}
}
