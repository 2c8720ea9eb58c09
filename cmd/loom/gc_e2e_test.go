package main_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// loom serve applies the GC settings it decides, as the Go runtime reports
// them on /metrics: the defaults, [runtime], and GOGC / GOMEMLIMIT over
// both.
func TestServe_GCSettings(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(cfg, []byte("[runtime]\ngc_percent = 250\nmemory_limit = \"1GiB\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		env     []string
		percent int64
		limit   int64 // 0: any limit below none
	}{
		{"defaults", []string{"GOGC=", "GOMEMLIMIT="}, 400, 0},
		{"config", []string{"GOGC=", "GOMEMLIMIT=", "LOOM_CONFIG=" + cfg}, 250, 1 << 30},
		{"env over config", []string{"GOGC=150", "GOMEMLIMIT=512MiB", "LOOM_CONFIG=" + cfg}, 150, 512 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startLoom(t, t.TempDir(), c.env...)
			resp, err := http.Get(p.url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metric := func(name string) int64 {
				m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
				if m == nil {
					t.Fatalf("no %s in /metrics", name)
				}
				f, err := strconv.ParseFloat(string(m[1]), 64)
				if err != nil {
					t.Fatal(err)
				}
				return int64(f)
			}
			if got := metric("go_gc_gogc_percent"); got != c.percent {
				t.Errorf("GC percent %d, want %d", got, c.percent)
			}
			got := metric("go_gc_gomemlimit_bytes")
			if c.limit != 0 && got != c.limit || c.limit == 0 && (got <= 0 || got >= 1<<62) {
				t.Errorf("memory limit %d, want %d (0: a limit in force)", got, c.limit)
			}
		})
	}
}
