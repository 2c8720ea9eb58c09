package plugins

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The examples of docs/agent-rules.md and the README's walkthrough rule
// load as they are written.
func TestDocsExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agent-rules.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/agent-rules.md has %d toml blocks, want the rule file and the manifest", len(blocks))
	}
	if _, errs := parseRule("docs rule example", blocks[0][1]); len(errs) > 0 {
		t.Errorf("the rule file example: %v", errs)
	}
	if _, errs := parseManifest("docs manifest example", "research-assistant", blocks[1][1]); len(errs) > 0 {
		t.Errorf("the manifest example: %v", errs)
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, walk, ok := strings.Cut(string(readme), "cat > agent-rules/be-brief.toml <<'TOML'\n")
	if !ok {
		t.Fatal("README: the walkthrough's rule file is gone")
	}
	rule, _, _ := strings.Cut(walk, "\nTOML\n")
	if _, errs := parseRule("README walkthrough", rule); len(errs) > 0 {
		t.Errorf("the README walkthrough's rule: %v", errs)
	}
}
