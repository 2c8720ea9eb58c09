package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/server"
)

// TestRxDB_RealClient runs the real RxDB client (clients/rxdb: rxdb@15.22.0
// + rxdb-server@15.22.0 replicateServer) against a real server and a real
// signed-up user: initial pull, live stream, push, conflict, tombstones,
// auth header, 401 recovery, stream drop and re-pull. It installs the
// pinned packages with `npm ci` when node_modules is missing.
//
// Without Node (or without npm and node_modules) it skips with one line on a
// developer's machine, but fails under CI=true or LOOM_REQUIRE_BROWSER=1
// (.ci/run): a CI run must not go green by skipping the one test that runs
// the real client.
func TestRxDB_RealClient(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: runs node and the real RxDB client")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skipUnlessNodeRequired(t, "node is not installed: skipping the RxDB client compatibility test (install Node 20+ and npm)")
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "rxdb"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "rxdb-server")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			skipUnlessNodeRequired(t, "npm is not installed and clients/rxdb/node_modules is missing: skipping the RxDB client compatibility test")
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

// nodeRequired reports whether this run must have Node and npm: CI=true (set
// by most CI services) or LOOM_REQUIRE_BROWSER=1 (set by .ci/run; a machine
// that must run the console's browser tests has Node too).
func nodeRequired() bool {
	ci := os.Getenv("CI")
	return ci == "true" || ci == "1" || os.Getenv("LOOM_REQUIRE_BROWSER") == "1"
}

// skipUnlessNodeRequired skips with msg, or fails with it when nodeRequired.
func skipUnlessNodeRequired(t *testing.T, msg string) {
	t.Helper()
	if nodeRequired() {
		t.Fatalf("%s — failing instead because CI=%q LOOM_REQUIRE_BROWSER=%q require it", msg, os.Getenv("CI"), os.Getenv("LOOM_REQUIRE_BROWSER"))
	}
	t.Skip(msg)
}

// TestRxDB_ClientDeclaresItsImports checks that clients/rxdb/package.json
// declares, pinned to an exact version, every package that test.mjs
// imports: a package present only because another one depends on it (npm
// hoists it into node_modules) would vanish, or change version, with that
// dependency. Needs no Node.
func TestRxDB_ClientDeclaresItsImports(t *testing.T) {
	dir := filepath.Join("..", "clients", "rxdb")
	src, err := os.ReadFile(filepath.Join(dir, "test.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	// Static imports (`import x from 'p'`, `import 'p'`) and dynamic ones
	// (`import('p')`), and require('p') should the script ever use it.
	re := regexp.MustCompile(`(?m)(?:^\s*import\s[^'"]*?|\bimport\(\s*|\brequire\(\s*)['"]([^'"]+)['"]`)
	exact := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	seen := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		spec := m[1]
		if strings.HasPrefix(spec, ".") || strings.HasPrefix(spec, "/") || strings.HasPrefix(spec, "node:") {
			continue // a relative file or a Node built-in
		}
		// 'rxdb/plugins/x' is package rxdb; '@scope/name/x' is @scope/name.
		parts := strings.Split(spec, "/")
		name := parts[0]
		if strings.HasPrefix(name, "@") && len(parts) > 1 {
			name += "/" + parts[1]
		}
		seen++
		ver, ok := pkg.Dependencies[name]
		if !ok {
			t.Errorf("test.mjs imports %q, but clients/rxdb/package.json does not declare %q", spec, name)
			continue
		}
		if !exact.MatchString(ver) {
			t.Errorf("clients/rxdb/package.json: %q is %q, not an exact version", name, ver)
		}
	}
	if seen == 0 {
		t.Fatal("found no package imports in clients/rxdb/test.mjs: the import pattern no longer matches it")
	}
}
