package mongo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongo "github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/storetest"
)

// The server for the tests that need one: LOOM_TEST_MONGO_URI (a replica
// set), else a single-member replica set in a container when a Docker
// daemon is reachable, else those tests skip.
var server struct {
	once   sync.Once
	uri    string
	skip   string
	err    error
	admin  *mongo.Client
	stop   func()
	serial atomic.Int64
}

const skipMessage = "MongoDB tests skipped: set LOOM_TEST_MONGO_URI to a replica set or run a Docker daemon"

func startServer() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	server.uri = os.Getenv("LOOM_TEST_MONGO_URI")
	if server.uri == "" {
		if !dockerReachable(ctx) {
			server.skip = skipMessage
			return
		}
		c, err := tcmongo.Run(ctx, "mongo:7", tcmongo.WithReplicaSet("rs0"))
		if err != nil {
			server.err = fmt.Errorf("start a MongoDB container: %w", err)
			return
		}
		server.stop = func() { testcontainers.TerminateContainer(c) } //nolint:errcheck // test teardown
		uri, err := c.ConnectionString(ctx)
		if err != nil {
			server.err = fmt.Errorf("MongoDB container address: %w", err)
			return
		}
		// The member announces its container address, which the host
		// may not reach (Docker Desktop): talk to the mapped port only.
		u, err := url.Parse(uri)
		if err != nil {
			server.err = fmt.Errorf("MongoDB container address %q: %w", uri, err)
			return
		}
		q := u.Query()
		q.Del("replicaSet")
		q.Set("directConnection", "true")
		u.RawQuery = q.Encode()
		server.uri = u.String()
	}
	server.admin, server.err = mongo.Connect(options.Client().ApplyURI(server.uri))
}

// dockerReachable reports whether testcontainers finds a healthy Docker
// daemon (it panics when it finds no Docker host at all).
func dockerReachable(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.Health(hctx) == nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.admin != nil {
		server.admin.Disconnect(context.Background()) //nolint:errcheck // teardown
	}
	if server.stop != nil {
		server.stop()
	}
	os.Exit(code)
}

// testConfig returns a configuration on a fresh database, dropped when the
// test ends (after the stores opened on it are closed), or skips.
func testConfig(t *testing.T) Config {
	t.Helper()
	server.once.Do(startServer)
	if server.skip != "" {
		t.Skip(server.skip)
	}
	if server.err != nil {
		t.Fatalf("MongoDB for tests: %s", RedactURI(server.err.Error()))
	}
	name := fmt.Sprintf("loomtest_%d_%d", os.Getpid(), server.serial.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := server.admin.Database(name).Drop(ctx); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return Config{URI: server.uri, Database: name, ServerSelectionTimeout: 20 * time.Second}
}

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, collections.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
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
