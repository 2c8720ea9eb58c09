package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestConsoleUnit runs the console's JavaScript unit tests (test/unit/*.test.mjs, e.g.
// the /metrics parser) with `node --test`. They import only the console's
// own sources, so they need Node but no npm packages. Without Node the test
// skips with one line, unless LOOM_REQUIRE_BROWSER=1 (a machine that must
// run the browser tests has Node too).
func TestConsoleUnit(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("LOOM_REQUIRE_BROWSER") == "1" {
			t.Fatalf("LOOM_REQUIRE_BROWSER=1 but node is not on PATH: %v", err)
		}
		t.Skip("node not found on PATH: the console's JavaScript unit tests (console/test/unit) are skipped")
	}
	// The files are named, not the directory: how `node --test` reads a
	// directory or a glob changed between Node versions.
	files, err := filepath.Glob(filepath.Join("test", "unit", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no console unit tests in test/unit (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test"}, files...)...)
	// node --test runs each file in a child process holding the output
	// pipe: after a timeout's kill, stop waiting for it.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %v: %v (ctx: %v)\n%s", files, err, ctx.Err(), out)
	}
	t.Logf("node --test %v: ok", files)
}
