package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/loomdb/loom/collections"
)

// A commit of no writes that advances a durable cursor still moves it, in
// its own transaction, with the same From check as one that writes: an
// evaluator that passes changes firing nothing moves its cursor this way,
// and a cursor left behind would hold back retention forever.
func TestCommit_CursorAdvanceWithoutWrites(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Path: filepath.Join(t.TempDir(), "loom.db")}
	s := mustOpen(t, cfg)
	advance := func(from, to int64) error {
		_, err := s.Commit(ctx, "default", nil, collections.CommitOptions{Cursor: &collections.CursorAdvance{Name: "eval", From: from, To: to}})
		return err
	}
	if err := advance(0, 5); err != nil {
		t.Fatalf("advance 0->5 without writes: %v", err)
	}
	if got, err := s.Cursor(ctx, "eval"); err != nil || got != 5 {
		t.Fatalf("cursor after advance 0->5 without writes: %d, %v; want 5", got, err)
	}
	if err := advance(3, 9); !errors.Is(err, collections.ErrCursorConflict) {
		t.Fatalf("advance 3->9 of a cursor at 5: err=%v, want ErrCursorConflict", err)
	}
	if err := advance(5, 9); err != nil {
		t.Fatalf("advance 5->9 without writes: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	if got, err := s.Cursor(ctx, "eval"); err != nil || got != 9 {
		t.Fatalf("cursor after reopening: %d, %v; want 9", got, err)
	}
}
