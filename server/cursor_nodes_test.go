package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/loomdb/loom/server"
)

// TestCursor_NodesSharingTheKey: servers configured with the same cursor key
// accept each other's cursors (a cluster behind a load balancer); a server
// with another key refuses them.
func TestCursor_NodesSharingTheKey(t *testing.T) {
	store := MustOpenStore(t)
	key := []byte("a-cursor-key-shared-by-all-nodes-0123456789")
	n1 := MustStartServer(t, store, server.Config{CursorKey: key})
	n2 := MustStartServer(t, store, server.Config{CursorKey: key})
	n3 := MustStartServer(t, store, server.Config{CursorKey: []byte("another-cursor-key-of-another-cluster-0123")})
	for i := range 3 {
		storeCommit(t, store, putW(fmt.Sprintf("c/d%d", i), nil))
	}
	body := `{"collection":"c","limit":1}`
	_, cursor := queryPage(t, n1, nil, body)
	ids, _ := queryPage(t, n2, nil, withCursor(body, cursor))
	if !slices.Equal(ids, []string{"c/d1"}) {
		t.Fatalf("node 2 continued node 1's cursor with %v, want c/d1", ids)
	}
	if r := n3.Do(t, "POST", api+"/query", withCursor(body, cursor), nil); r.Status != http.StatusBadRequest {
		t.Fatalf("a node with another key: status=%d %s, want 400", r.Status, r.Body)
	}
	if _, err := server.New(store, server.Config{AdminKey: "k", CursorKey: []byte("short")}); err == nil {
		t.Fatal("a cursor key shorter than 32 bytes must be refused")
	}
}
