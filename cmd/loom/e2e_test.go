package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the real binary as a child process: they are the only way
// to test kill -9, SIGTERM and first-start behaviour honestly.

var loomBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loom-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	loomBin = filepath.Join(dir, "loom")
	args := []string{"build", "-o", loomBin}
	if raceEnabled {
		// Under -race the product's own processes are race-checked too:
		// each writes its reports to a file under raceDir (GORACE, which
		// every process started here inherits), checked after the tests.
		args = append(args, "-race")
		raceDir := filepath.Join(dir, "race")
		if err := os.Mkdir(raceDir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		os.Setenv("GORACE", "log_path="+filepath.Join(raceDir, "report"))
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build loom:", err)
		os.RemoveAll(dir) // no loom-e2e-* directory left behind by a failed build
		os.Exit(1)
	}
	code := m.Run()
	if raceEnabled && childRaces(filepath.Join(dir, "race")) {
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// childRaces prints the race reports the loom processes wrote to dir and
// reports whether there was one.
func childRaces(dir string) bool {
	files, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "race reports:", err)
		return true
	}
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(dir, f.Name()))
		fmt.Fprintf(os.Stderr, "FAIL: a loom process (%s) reported a data race:\n%s\n", f.Name(), b)
	}
	return len(files) > 0
}

type proc struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stdout bytes.Buffer
	done   chan error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

var listenRE = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startLoom runs `loom serve` on a free loopback port and waits until it
// prints its address.
func startLoom(t *testing.T, dataDir string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(loomBin, "serve", "--addr", "127.0.0.1:0", "--data", dataDir)
	cmd.Dir = t.TempDir() // no ./loom.toml or ./triggers.json
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.url = <-found:
		return p
	case err := <-p.done:
		t.Fatalf("loom exited before listening: %v\n%s", err, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("loom did not start listening:\n%s", p.output())
	}
	return nil
}

func request(t *testing.T, method, url, key string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, r)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestServe_FirstStartPrintsAdminKeyOnce(t *testing.T) {
	data := t.TempDir()
	p := startLoom(t, data, "LOOM_ADMIN_KEY=")
	m := regexp.MustCompile(`\n\s+(loom_admin_\S+)\n`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("first start did not print an admin key:\n%s", p.output())
	}
	key := m[1]
	if code, _ := request(t, "PUT", p.url+"/api/v1/databases/default/documents/notes/n1", key, map[string]any{"doc": map[string]any{"a": 1}}); code != 201 {
		t.Fatalf("PUT with the printed key: status=%d, want 201", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	saved, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatalf("admin key file: %v", err)
	}
	if strings.Contains(string(saved), key) || !strings.HasPrefix(string(saved), "sha256:") {
		t.Fatalf("data/admin.key=%q, want only the key's sha256 (keys are stored hashed)", saved)
	}

	p2 := startLoom(t, data, "LOOM_ADMIN_KEY=")
	if strings.Contains(p2.output(), key) {
		t.Fatal("second start printed the admin key again")
	}
	if code, _ := request(t, "GET", p2.url+"/api/v1/databases/default/documents/notes/n1", key, nil); code != 200 {
		t.Fatalf("GET after restart with the saved key: status=%d, want 200", code)
	}
	if code, _ := request(t, "GET", p2.url+"/api/v1/databases/default/documents/notes/n1", "wrong", nil); code != 401 {
		t.Fatalf("GET with a wrong key: status=%d, want 401", code)
	}
}

func TestServe_SIGTERMExitsCleanly(t *testing.T) {
	data := t.TempDir()
	p := startLoom(t, data, "LOOM_ADMIN_KEY=k")
	for i := 0; i < 20; i++ {
		if code, _ := request(t, "POST", p.url+"/api/v1/databases/default/documents/items", "k", map[string]any{"i": i}); code != 201 {
			t.Fatalf("create: status=%d", code)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("loom did not exit within 20s of SIGTERM")
	}
	p2 := startLoom(t, data, "LOOM_ADMIN_KEY=k")
	code, out := request(t, "POST", p2.url+"/api/v1/databases/default/query", "k", map[string]any{"collection": "items", "limit": 1000})
	if code != 200 {
		t.Fatalf("query after restart: status=%d", code)
	}
	if docs, _ := out["docs"].([]any); len(docs) != 20 {
		t.Fatalf("docs after restart=%d, want 20", len(docs))
	}
}

// TestServe_KillDashNineLosesNoAcknowledgedWrite kills the server with
// SIGKILL while 16 clients write, restarts it, and checks that every write
// that got a 2xx is there with the acknowledged version.
func TestServe_KillDashNineLosesNoAcknowledgedWrite(t *testing.T) {
	data := t.TempDir()
	p := startLoom(t, data, "LOOM_ADMIN_KEY=k")

	type acked struct {
		path    string
		version float64
	}
	var (
		mu   sync.Mutex
		acks []acked
		wg   sync.WaitGroup
		ctx  context.Context
		stop context.CancelFunc
	)
	ctx, stop = context.WithCancel(context.Background())
	client := &http.Client{Timeout: 5 * time.Second}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				path := fmt.Sprintf("crash/w%d/docs/d%d", w, i%5) // overwrite: versions matter too
				body, _ := json.Marshal(map[string]any{"doc": map[string]any{"w": w, "i": i}})
				req, _ := http.NewRequestWithContext(ctx, "PUT", p.url+"/api/v1/databases/default/documents/"+path, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer k")
				resp, err := client.Do(req)
				if err != nil {
					return // the server died
				}
				var doc map[string]any
				json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					mu.Lock()
					acks = append(acks, acked{path, doc["version"].(float64)})
					mu.Unlock()
				}
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond) // let writes be in flight when the kill lands
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	stop()
	wg.Wait()
	if len(acks) < 100 {
		t.Fatalf("only %d writes acknowledged before the kill; the test proves nothing", len(acks))
	}

	// The highest acknowledged version per path must be readable (a later,
	// unacknowledged write may have committed too, so >= is correct).
	want := map[string]float64{}
	for _, a := range acks {
		want[a.path] = max(want[a.path], a.version)
	}
	p2 := startLoom(t, data, "LOOM_ADMIN_KEY=k")
	for path, v := range want {
		code, doc := request(t, "GET", p2.url+"/api/v1/databases/default/documents/"+path, "k", nil)
		if code != 200 {
			t.Fatalf("GET %s after kill -9: status=%d, want 200", path, code)
		}
		if got := doc["version"].(float64); got < v {
			t.Fatalf("%s version=%v after kill -9, want >= acknowledged %v", path, got, v)
		}
	}
	t.Logf("%d acknowledged writes on %d documents survived kill -9", len(acks), len(want))
}

// mustRefuseToStart runs loom serve with a config file holding config and
// fails unless loom exits non-zero within 30 s with want in its output.
func mustRefuseToStart(t *testing.T, config, want string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "loom.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, loomBin, "serve", "--config", cfg, "--data", t.TempDir(), "--addr", "127.0.0.1:0").CombinedOutput()
	if ctx.Err() != nil || err == nil {
		t.Fatalf("loom started with this config:\n%s\noutput:\n%s", config, out)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("the error does not name %q:\n%s", want, out)
	}
}

func TestServe_UnknownConfigKeyRefusesToStart(t *testing.T) {
	mustRefuseToStart(t, "[limits]\nmax_doc_bytes = 5\n", "limits.max_doc_bytes")
}

func TestServe_BadRulesFileRefusesToStart(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "rules.toml")
	os.WriteFile(rulesFile, []byte("[[rule]]\nmatch = \"users/{uid}/{rest=**}\"\nallow = [\"read\"]\nif = \"request.auth.uid ==\"\n"), 0o600)
	mustRefuseToStart(t, fmt.Sprintf("[security]\nrules_file = %q\n", rulesFile), "rule 1")
}

// TestServe_UsersOwnTheirDocuments: a fresh server with the built-in rules
// lets a signed-up user write under users/{uid}/ and nowhere else, and its
// signing secret survives a restart (tokens stay valid).
func TestServe_UsersOwnTheirDocuments(t *testing.T) {
	data := t.TempDir()
	p := startLoom(t, data, "LOOM_ADMIN_KEY=k")
	code, tok := request(t, "POST", p.url+"/auth/v1/signup", "", map[string]any{"username": "alice", "password": "correct horse battery"})
	if code != 200 {
		t.Fatalf("signup: status=%d %v", code, tok)
	}
	access := tok["access_token"].(string)
	code, me := request(t, "GET", p.url+"/auth/v1/me", access, nil)
	if code != 200 {
		t.Fatalf("me: status=%d", code)
	}
	own := p.url + "/api/v1/databases/default/documents/users/" + me["uid"].(string) + "/notes/n1"
	if code, _ := request(t, "PUT", own, access, map[string]any{"doc": map[string]any{"a": 1}}); code != 201 {
		t.Fatalf("owner PUT: status=%d, want 201", code)
	}
	if code, _ := request(t, "PUT", p.url+"/api/v1/databases/default/documents/rooms/r1", access, map[string]any{"doc": map[string]any{}}); code != 403 {
		t.Fatalf("PUT outside users/: status=%d, want 403", code)
	}
	if code, _ := request(t, "GET", own, "", nil); code != 401 {
		t.Fatalf("anonymous GET: status=%d, want 401", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p2 := startLoom(t, data, "LOOM_ADMIN_KEY=k")
	if code, _ := request(t, "GET", strings.Replace(own, p.url, p2.url, 1), access, nil); code != 200 {
		t.Fatalf("GET with the same token after restart: status=%d, want 200", code)
	}
}

// TestServe_ServesTheConsole: the built binary, started outside the
// repository, names the console's address and serves it from the embedded
// files: / redirects there, the page and the asset it loads answer 200
// under the console's CSP.
func TestServe_ServesTheConsole(t *testing.T) {
	p := startLoom(t, t.TempDir())
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.output(), "Console: "+p.url+"/console/") {
		if time.Now().After(deadline) {
			t.Fatalf("loom serve did not print the console's address:\n%s", p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(p.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("GET / = %d Location %q, want 302 /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = http.Get(p.url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /console/ = %d %q CSP %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
	}
	m := regexp.MustCompile(`src="(app\.[A-Z0-9]+\.js)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("the console page loads no script:\n%s", page)
	}
	resp, err = http.Get(p.url + "/console/" + string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Fatalf("GET /console/%s = %d %q", m[1], resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
