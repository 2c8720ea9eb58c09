package console_test

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/loomdb/loom/console"
)

// TestFS_IndexReferencesItsAssets checks, without Node, that the embedded
// build is whole: index.html loads exactly one script and one stylesheet,
// both present in the FS.
func TestFS_IndexReferencesItsAssets(t *testing.T) {
	fsys := console.FS()
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		t.Fatalf("index.html: %v", err)
	}
	refs := regexp.MustCompile(`(?:src|href)="(app\.[A-Z0-9]+\.(?:js|css))"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) != 2 {
		t.Fatalf("index.html references %d hashed assets, want 2 (a script and a stylesheet):\n%s", len(refs), index)
	}
	for _, r := range refs {
		if st, err := fs.Stat(fsys, r[1]); err != nil || st.Size() == 0 {
			t.Errorf("%s referenced by index.html: %v", r[1], err)
		}
	}
}
