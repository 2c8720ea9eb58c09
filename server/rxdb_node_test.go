package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomdb/loom/server"
)

// TestRxDB_RealClient runs the real RxDB client (clients/rxdb: rxdb@15.22.0
// + rxdb-server@15.22.0 replicateServer) against a real server and a real
// signed-up user: initial pull, live stream, push, conflict, tombstones,
// auth header, 401 recovery, stream drop and re-pull. It installs the
// pinned packages with `npm ci` when node_modules is missing.
func TestRxDB_RealClient(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: runs node and the real RxDB client")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the RxDB client compatibility test (install Node 20+ and npm)")
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "rxdb"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "rxdb-server")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm is not installed and clients/rxdb/node_modules is missing: skipping the RxDB client compatibility test")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}

	env := newAuthEnv(t, server.Config{RateLimit: -1})
	alice := env.signup(t, "alice")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LOOM_URL="+env.URL,
		"LOOM_TOKEN="+alice.Access,
		"LOOM_COLLECTION=users/"+alice.UID+"/todos",
		"LOOM_DB=default",
	)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("node test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node test.mjs: %v (ctx: %v)", err, ctx.Err())
	}
}
