package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// TestSecurity_RulesReloadWithoutFile: with the built-in rules (no rules
// file) a reload keeps them and says so; a server given other rules and no
// file has nothing to reload.
func TestSecurity_RulesReloadWithoutFile(t *testing.T) {
	builtin := MustStartServer(t, MustOpenStore(t), server.Config{})
	r := builtin.Do(t, "POST", "/admin/v1/rules/reload", "", nil)
	wantStatus(t, "reload of the built-in rules", r, http.StatusOK)
	if got := r.JSON(t); got["builtin"] != true || fmt.Sprint(got["rules"]) != fmt.Sprint(rules.Default().Len()) {
		t.Errorf("reload of the built-in rules: %v, want builtin and %d rules", got, rules.Default().Len())
	}

	set, err := rules.Parse([]byte("[[rule]]\nmatch = \"a/{b}\"\nallow = [\"read\"]\nif = \"true\"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	given := MustStartServer(t, MustOpenStore(t), server.Config{Rules: set})
	wantError(t, "reload without a file", given.Do(t, "POST", "/admin/v1/rules/reload", "", nil), http.StatusConflict, "CONFLICT")
}
