package loomclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
	"github.com/loomdb/loom/server"
	"github.com/loomdb/loom/webhooks/loomclient"
)

// Example writes, reads, updates and queries documents of a running Loom
// server. Here the server runs in the example itself; a program would use
// its address (e.g. http://127.0.0.1:8080) and a service key.
func Example() {
	url, key, stop := startLoom()
	defer stop()

	ctx := context.Background()
	c, err := loomclient.New(loomclient.Config{BaseURL: url, APIKey: key})
	if err != nil {
		log.Fatal(err)
	}

	// Create never overwrites: a second create of the same path fails.
	if _, err := c.Create(ctx, "rooms/r1/messages/m1", map[string]any{"text": "hello", "likes": 0}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Create(ctx, "rooms/r1/messages/m1", map[string]any{"text": "again"}); errors.Is(err, collections.ErrAlreadyExists) {
		fmt.Println("m1 already exists")
	}
	if _, err := c.Create(ctx, "rooms/r1/messages/m2", map[string]any{"text": "world", "likes": 5}); err != nil {
		log.Fatal(err)
	}

	// Update deep-merges; with ifVersion it applies only at that version.
	m1, err := c.Get(ctx, "rooms/r1/messages/m1")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Update(ctx, m1.Path, map[string]any{"likes": 7}, m1.Version); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Update(ctx, m1.Path, map[string]any{"likes": 8}, m1.Version); errors.Is(err, collections.ErrPreconditionFailed) {
		fmt.Println("m1 changed since version", m1.Version)
	}

	// Query follows the server's pages up to Limit documents.
	docs, err := c.Query(ctx, collections.Query{
		Collection: "rooms/r1/messages",
		Filters:    []collections.Filter{{Field: "likes", Op: collections.OpGt, Value: 1}},
		OrderBy:    []collections.Order{{Field: "likes", Direction: "desc"}},
		Limit:      10,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range docs {
		fmt.Println(d.ID, d.Data["text"], d.Data["likes"], "version", d.Version)
	}

	if _, err := c.Get(ctx, "rooms/r1/messages/nope"); errors.Is(err, collections.ErrNotFound) {
		fmt.Println("nope not found")
	}
	// Output:
	// m1 already exists
	// m1 changed since version 1
	// m1 hello 7 version 2
	// m2 world 5 version 1
	// nope not found
}

// startLoom serves a Loom server over a fresh SQLite store in a temporary
// directory and returns its URL, its admin key and a function that stops
// it and removes the directory.
func startLoom() (url, key string, stop func()) {
	dir, err := os.MkdirTemp("", "loomclient-example-")
	if err != nil {
		log.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "loom.db")})
	if err != nil {
		log.Fatal(err)
	}
	key = "example-admin-key-0123456789"
	srv, err := server.New(st, server.Config{AdminKey: key})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	return ts.URL, key, func() {
		ts.Close()
		st.Close()
		os.RemoveAll(dir)
	}
}
