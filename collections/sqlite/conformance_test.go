package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/storetest"
)

// TestConformance runs the engine-neutral suite against SQLite files in a
// temporary directory.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		New: func(t *testing.T, opts storetest.Options) collections.Store {
			return mustOpen(t, Config{
				Path:      filepath.Join(t.TempDir(), "loom.db"),
				Retention: opts.Retention,
				Indexes:   opts.Indexes,
			})
		},
		Crash: func(t *testing.T, s collections.Store) collections.Store {
			old := s.(*Store)
			old.crash()
			return mustOpen(t, old.cfg)
		},
	})
}

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	return storetest.MustOpen(t, func() (*Store, error) { return Open(context.Background(), cfg) })
}
