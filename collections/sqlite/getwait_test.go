package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A get waits for a free read connection; the caller's deadline must end
// that wait (a get that ignored ctx while another read held the pool
// stayed until that read finished).
func TestGetWaitingForAReadConnectionEndsWithItsContext(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, ReadConns: 1})
	mustCommit(t, s, create("items/a", map[string]any{"n": 1}))

	held, err := s.rdb.Conn(context.Background()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(3*time.Second, func() { held.Close() })
	defer func() {
		if release.Stop() {
			held.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, err := s.Get(ctx, testDB, "items/a")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get while the pool is held: got (%v, %v), want the context's deadline error", d, err)
	}
}
