package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const hupRule = `
[rule]
id = "%s"
trigger = "on_query_start"

[condition]
expression = "true"

[action]
type = "log"
message = "hi"
`

// TestServe_SIGHUPReloadsAgentRules: SIGHUP re-reads the rule files of
// [agents] rules_dir too; a broken file keeps the rules in force, and the
// admin API reports why.
func TestServe_SIGHUPReloadsAgentRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "r.toml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf(hupRule, "first"))
	p := startAgentServe(t, "serve", t.TempDir(), agentConfig(t, "[agents]\nrules_dir = \""+dir+"\"\n"))
	keys := func() (map[string]bool, map[string]any) {
		code, out := request(t, "GET", p.url+"/admin/v1/agents/rules", "k", nil)
		if code != 200 {
			t.Fatalf("GET rules: status=%d %v", code, out)
		}
		got := map[string]bool{}
		list, _ := out["rules"].([]any)
		for _, r := range list {
			m, _ := r.(map[string]any)
			k, _ := m["key"].(string)
			got[k] = true
		}
		last, _ := out["lastReload"].(map[string]any)
		return got, last
	}
	waitFor := func(what string, cond func(map[string]bool, map[string]any) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			k, last := keys()
			if cond(k, last) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10s, %s: rules %v, last reload %v", what, k, last)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if k, _ := keys(); !k["first"] {
		t.Fatalf("rules at start %v, want first", k)
	}

	write(fmt.Sprintf(hupRule, "second"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("second after SIGHUP", func(k map[string]bool, _ map[string]any) bool { return k["second"] && !k["first"] })

	write(fmt.Sprintf(hupRule, "Third"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the failed reload reported", func(k map[string]bool, last map[string]any) bool {
		msg, _ := last["error"].(string)
		return last["ok"] == false && strings.Contains(msg, "r.toml") && k["second"]
	})
	if code, _ := request(t, "GET", p.url+"/health", "", nil); code != 200 {
		t.Fatalf("health after a bad reload: %d", code)
	}
}
