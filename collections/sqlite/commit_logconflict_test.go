package sqlite

import (
	"context"
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestCreateWhoseChangeIsRefused: a create is first tried as a plain
// insert of its row; only the row's own primary key says the path is
// taken. When it is the change that cannot be logged (here a change row
// already holds the next seq, as in a log edited by hand), the create
// fails with that error, as it did before inserts were tried: it is not
// told ErrAlreadyExists for a document that does not exist, and nothing
// of it stays.
func TestCreateWhoseChangeIsRefused(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	mustCommit(t, s, create("lc/seed", nil))
	head := mustHead(t, s)
	if _, err := s.wdb.ExecContext(ctx, `INSERT INTO changes (seq, db, op, path, time, a_version, a_created, a_deleted, a_data)
		VALUES (?, 'other', 'create', 'lc/stray', 0, 1, 0, 0, '{}')`, head+1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Commit(ctx, testDB, []collections.Write{create("lc/new", nil)}, collections.CommitOptions{})
	if err == nil || errors.Is(err, collections.ErrAlreadyExists) {
		t.Fatalf("create whose change cannot be logged: %v, want the log's error", err)
	}
	if _, err := s.Get(ctx, testDB, "lc/new"); !errors.Is(err, collections.ErrNotFound) {
		t.Fatalf("lc/new after the failed create: %v, want ErrNotFound", err)
	}
	if got := mustHead(t, s); got != head {
		t.Fatalf("head %d, want %d", got, head)
	}
}
