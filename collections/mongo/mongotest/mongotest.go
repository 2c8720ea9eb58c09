// Package mongotest gives tests a MongoDB server, or skips them: the
// replica set LOOM_TEST_MONGO_URI names, else a single-member replica set
// in a container (testcontainers) when a Docker daemon is reachable, else
// every test that asks for one skips with one line. The server is started
// once per test binary; Main stops it when the tests end.
//
// It is for tests only (like webhooks/llm/llmtest): collections/mongo's
// conformance and multi-store tests and the multi-node tests of whole
// nodes (apptest) use it.
package mongotest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongo "github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// EnvURI names the variable that points the tests at a running replica set.
const EnvURI = "LOOM_TEST_MONGO_URI"

// SkipMessage is the one line a test skips with when there is no server.
const SkipMessage = "MongoDB tests skipped: set " + EnvURI + " to a replica set or run a Docker daemon"

// Image is the container image started when no URI is given.
const Image = "mongo:7"

var server struct {
	once   sync.Once
	uri    string
	skip   string
	err    error
	admin  *mongo.Client
	stop   func()
	serial atomic.Int64
}

func start() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	server.uri = os.Getenv(EnvURI)
	if server.uri == "" {
		if !dockerReachable(ctx) {
			server.skip = SkipMessage
			return
		}
		c, err := tcmongo.Run(ctx, Image, tcmongo.WithReplicaSet("rs0"))
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

// Main runs the tests and then stops what the package started (the
// container, the client that drops test databases): a package using
// mongotest calls it from TestMain, os.Exit(mongotest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if server.admin != nil {
		server.admin.Disconnect(context.Background()) //nolint:errcheck // teardown
	}
	if server.stop != nil {
		server.stop()
	}
	return code
}

// URI returns the connection string of the test server, starting it on
// first use; it skips the test with SkipMessage when there is none, and
// fails it when the server could not be started or reached.
func URI(t testing.TB) string {
	t.Helper()
	server.once.Do(start)
	if server.skip != "" {
		t.Skip(server.skip)
	}
	if server.err != nil {
		t.Fatalf("MongoDB for tests: %s", redact(server.err.Error(), server.uri))
	}
	return server.uri
}

// Database returns the server's URI and the name of a fresh database,
// dropped when the test ends. Cleanups run last registered first, so what
// the test opens on the database after this call (stores, nodes) is
// closed before the drop.
func Database(t testing.TB) (uri, name string) {
	t.Helper()
	uri = URI(t)
	name = fmt.Sprintf("loomtest_%d_%d", os.Getpid(), server.serial.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := server.admin.Database(name).Drop(ctx); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return uri, name
}

// redact replaces the credentials of uri in msg (errors may quote the
// URI) with the user name and "xxxxx"; collections/mongo.RedactURI cannot
// be used here: its tests import this package.
func redact(msg, uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.User == nil {
		return msg
	}
	if _, ok := u.User.Password(); !ok {
		return msg
	}
	return strings.ReplaceAll(msg, u.User.String()+"@", url.UserPassword(u.User.Username(), "xxxxx").String()+"@")
}
