package sqlite

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestWALStaysBounded: the writer checkpoints every walCheckpointPages
// pages, so writing several times that much leaves a WAL file of about
// that size, not one holding everything written.
func TestWALStaysBounded(t *testing.T) {
	path := tempPath(t)
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1})
	const pageSize = 4096
	text := strings.Repeat("x", 3000)
	written := 0
	for b := 0; written < 3*walCheckpointPages*pageSize; b++ {
		ws := make([]collections.Write, 100)
		for i := range ws {
			ws[i] = create(fmt.Sprintf("things/b%03di%03d", b, i), map[string]any{"text": text})
		}
		mustCommit(t, s, ws...)
		written += len(ws) * len(text)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// The README promises "about 16 MB": the bound below follows
	// walCheckpointPages, so pin that too.
	if walCheckpointPages*pageSize > 20<<20 {
		t.Fatalf("walCheckpointPages=%d: the WAL would grow to %d MB, the README promises about 16 MB", walCheckpointPages, walCheckpointPages*pageSize>>20)
	}
	if limit := int64(walCheckpointPages+1000) * (pageSize + 24); fi.Size() > limit {
		t.Fatalf("WAL is %d bytes after writing %d, want at most %d", fi.Size(), written, limit)
	}
}
