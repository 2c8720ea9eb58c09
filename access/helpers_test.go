package access_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// mustOpenStore opens a fresh SQLite store in a temporary directory, closed
// when the test ends.
func mustOpenStore(tb testing.TB) collections.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(tb.TempDir(), "loom.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// mustCommit writes w to the store directly, past the rules.
func mustCommit(tb testing.TB, st collections.Store, w collections.Write) {
	tb.Helper()
	if _, err := st.Commit(context.Background(), "default", []collections.Write{w}, collections.CommitOptions{}); err != nil {
		tb.Fatal(err)
	}
}
