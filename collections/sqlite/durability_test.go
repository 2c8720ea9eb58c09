package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// connPragmas reads the pragmas durability depends on, as one connection
// sees them: they are per connection (synchronous, query_only) or per file
// (journal_mode), and a connection opened with other settings would not
// show in any test that only closes cleanly or is killed (the OS page cache
// survives both).
func connPragmas(t *testing.T, c *sql.Conn) (synchronous int, journal string, queryOnly int) {
	t.Helper()
	ctx := context.Background()
	if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&synchronous); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRowContext(ctx, `PRAGMA query_only`).Scan(&queryOnly); err != nil {
		t.Fatal(err)
	}
	return synchronous, strings.ToLower(journal), queryOnly
}

// synchronousFull is PRAGMA synchronous's value for FULL (OFF 0, NORMAL 1,
// EXTRA 3).
const synchronousFull = 2

// TestConnectionsKeepTheDurabilityPragmas checks what "an acknowledged
// write survives power loss" rests on, on every connection the engine
// opens. The writer must run synchronous=FULL in WAL mode: in WAL mode
// NORMAL syncs the WAL only at checkpoints, so a commit acknowledged since
// the last one is lost with the power, and OFF never syncs. Every reader
// must run FULL too: the last connection to close checkpoints the WAL into
// the database file and deletes it, and a reader can be that connection;
// with OFF the copied pages are not synced before the WAL goes. Readers
// are query_only, so no write can take a path around the committer.
// TestAcknowledgedCommitIsSynced (Linux) shows the effect of FULL on the
// file itself.
func TestConnectionsKeepTheDurabilityPragmas(t *testing.T) {
	ctx := context.Background()
	const readConns = 3
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, ReadConns: readConns})
	mustCommit(t, s, create("items/a", map[string]any{"n": 1}))

	w, err := s.wdb.Conn(ctx) // the committer's only connection; it is idle
	if err != nil {
		t.Fatal(err)
	}
	sync, journal, queryOnly := connPragmas(t, w)
	w.Close()
	if sync != synchronousFull || journal != "wal" || queryOnly != 0 {
		t.Errorf("writer connection: synchronous=%d journal_mode=%s query_only=%d, want synchronous=%d (FULL) journal_mode=wal query_only=0",
			sync, journal, queryOnly, synchronousFull)
	}

	// Hold every connection the read pool may open at once, so each is a
	// distinct connection and all are checked.
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range readConns {
		c, err := s.rdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		sync, journal, queryOnly := connPragmas(t, c)
		if sync != synchronousFull || journal != "wal" || queryOnly != 1 {
			t.Errorf("read connection %d: synchronous=%d journal_mode=%s query_only=%d, want synchronous=%d (FULL) journal_mode=wal query_only=1",
				i, sync, journal, queryOnly, synchronousFull)
		}
		if _, err := c.ExecContext(ctx, `UPDATE meta SET value = value WHERE key = 'last_seq'`); err == nil {
			t.Errorf("read connection %d accepted a write: the read pool must be read-only and apart from the writer", i)
		}
	}
	if s.rdb == s.wdb {
		t.Error("the read pool is the writer's pool: reads would wait for the committer")
	}
}

// TestReadsDoNotWaitForTheWriter holds the committer inside a commit (in
// BEGIN IMMEDIATE, waiting for the write lock another connection holds,
// with the writer's one connection taken) and reads meanwhile: Get, Query
// and ReadChanges must all complete while that commit is still
// pending. With one read connection configured, a read pool that shared
// the writer's connection would have nothing to read with until the commit
// gives up; no timing is asserted, only that the reads finished before the
// commit did. The only bound is SQLite's 10 s busy timeout, after which the
// blocked commit fails, which the test reports.
func TestReadsDoNotWaitForTheWriter(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1, ReadConns: 1})
	mustCommit(t, s, create("items/a", map[string]any{"n": 1}))

	release := holdWriteLock(t, path)
	type result struct{ err error }
	committed := make(chan result, 1)
	go func() {
		_, err := s.Commit(ctx, testDB, []collections.Write{create("items/b", map[string]any{"n": 2})}, collections.CommitOptions{})
		committed <- result{err}
	}()
	// The writer handle has one connection; in use means the committer
	// took it for the batch and waits in BEGIN for the lock.
	waitFor(t, "the committer to take its connection", func() bool { return s.wdb.Stats().InUse == 1 })

	// The reads run in their own goroutine so the test can see which ends
	// first: they, or the commit. Errors come back on the channel.
	readsDone := make(chan error, 1)
	go func() {
		readsDone <- func() error {
			d, err := s.Get(ctx, testDB, "items/a")
			if err != nil {
				return fmt.Errorf("Get: %w", err)
			}
			if d == nil || d.Version != 1 {
				return fmt.Errorf("Get items/a: %+v, want version 1", d)
			}
			page, err := s.Query(ctx, testDB, collections.Query{Collection: "items"})
			if err != nil {
				return fmt.Errorf("Query: %w", err)
			}
			if len(page.Docs) != 1 {
				return fmt.Errorf("Query: %d documents, want 1 (the pending one is not committed)", len(page.Docs))
			}
			changes, err := s.ReadChanges(ctx, 0, 10)
			if err != nil || len(changes) != 1 {
				return fmt.Errorf("ReadChanges: %d changes (err %v), want 1", len(changes), err)
			}
			return nil
		}()
	}()

	select {
	case err := <-readsDone:
		if err != nil {
			t.Fatalf("read while the committer waits: %v", err)
		}
	case r := <-committed:
		t.Fatalf("the commit ended (err %v) before the reads issued meanwhile finished: reads waited for the writer", r.err)
	}
	select {
	case r := <-committed:
		t.Fatalf("the commit ended (err %v) while the write lock was still held", r.err)
	default:
	}
	release()
	select {
	case r := <-committed:
		if r.err != nil {
			t.Fatalf("commit after the lock was released: %v", r.err)
		}
	case <-time.After(hangGuard):
		t.Fatal("commit did not finish after the lock was released")
	}
}
