package console_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestConsoleUnit runs the console's JavaScript unit tests (test/unit, e.g.
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "test/unit/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test test/unit/: %v\n%s", err, out)
	}
	t.Logf("node --test test/unit/: ok")
}
