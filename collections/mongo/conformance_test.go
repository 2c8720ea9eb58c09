package mongo

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/mongo/mongotest"
	"github.com/loomdb/loom/collections/storetest"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

// testConfig returns a configuration on a fresh database (mongotest: the
// server of LOOM_TEST_MONGO_URI or a container), dropped when the test ends
// after the stores opened on it are closed, or skips.
func testConfig(t *testing.T) Config {
	t.Helper()
	uri, name := mongotest.Database(t)
	return Config{URI: uri, Database: name, ServerSelectionTimeout: 20 * time.Second}
}

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	return storetest.MustOpen(t, func() (*Store, error) { return Open(context.Background(), cfg) })
}

// TestConformance runs the engine-neutral suite, each store on a fresh
// database.
func TestConformance(t *testing.T) {
	testConfig(t) // skip early, as one line, when there is no server
	storetest.Run(t, storetest.Factory{
		New: func(t *testing.T, opts storetest.Options) collections.Store {
			cfg := testConfig(t)
			cfg.Retention, cfg.Indexes = opts.Retention, opts.Indexes
			return mustOpen(t, cfg)
		},
		Crash: func(t *testing.T, s collections.Store) collections.Store {
			old := s.(*Store)
			old.crash()
			return mustOpen(t, old.cfg)
		},
	})
}
