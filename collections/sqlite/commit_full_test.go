package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestBatchWithFullDisk: a request that fails because the database file
// cannot grow (SQLITE_FULL, here through max_page_count) may take the
// whole transaction with it in SQLite. Whichever way SQLite handles it,
// the batch stays all-or-nothing per request: what a request is told
// matches the stored documents and the change log, no seq is skipped, a
// create that was refused is not later found, and the store keeps
// committing once there is room again.
func TestBatchWithFullDisk(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	mustCommit(t, s, create("full/seed", nil), create("full/gone", nil))
	mustCommit(t, s, collections.Write{Type: collections.WriteDelete, Path: "full/gone"})
	c := batchCommitter(t, s)
	var pages int64
	if err := s.wdb.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"s": strings.Repeat("x", 200_000)}
	for _, mode := range []string{"optimistic", "savepoints", "lone"} {
		if _, err := s.wdb.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+8)); err != nil {
			t.Fatal(err)
		}
		head := c.seq
		var batch []*request
		if mode == "lone" {
			batch = []*request{commitReq(ctx, collections.CommitOptions{}, create("full/"+mode+"-a", nil), create("full/"+mode+"-big", big))}
		} else {
			batch = []*request{
				commitReq(ctx, collections.CommitOptions{}, create("full/"+mode+"-a", nil)),
				commitReq(ctx, collections.CommitOptions{}, create("full/"+mode+"-big", big)),
				// A recreate over a tombstone: the fallback after a refused insert.
				commitReq(ctx, collections.CommitOptions{}, collections.Write{Type: collections.WriteReplace, Path: "full/gone", Data: big}),
				commitReq(ctx, collections.CommitOptions{}, create("full/"+mode+"-b", nil)),
			}
		}
		c.guarded = 0
		if mode == "savepoints" {
			c.guarded = 1
		}
		c.commit(batch)
		if _, err := s.wdb.ExecContext(ctx, `PRAGMA max_page_count = 1073741823`); err != nil {
			t.Fatal(err)
		}
		committed := 0
		for i, r := range batch {
			t.Logf("%s: request %d: err %v", mode, i, r.Err)
			for j, w := range r.writes {
				d, err := s.Get(ctx, testDB, w.Path)
				if r.Err == nil {
					if err != nil || d.Seq != r.results[j].Doc.Seq || d.Version != r.results[j].Doc.Version {
						t.Errorf("%s: request %d write %d: told %+v, stored %+v, %v", mode, i, j, r.results[j].Doc, d, err)
					}
					committed++
				} else if w.Path != "full/gone" && !errors.Is(err, collections.ErrNotFound) {
					t.Errorf("%s: request %d failed (%v) but %s is stored: %+v %v", mode, i, r.Err, w.Path, d, err)
				} else if w.Path == "full/gone" && err == nil {
					t.Errorf("%s: request %d failed (%v) but the recreate is stored: %+v", mode, i, r.Err, d)
				}
			}
		}
		if got := mustHead(t, s); got != head+int64(committed) || c.seq != got {
			t.Errorf("%s: head %d (committer %d), want %d", mode, got, c.seq, head+int64(committed))
		}
		changes, err := s.ReadChanges(ctx, head, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) != committed {
			t.Errorf("%s: %d changes, want %d", mode, len(changes), committed)
		}
		for i, ch := range changes {
			if ch.Seq != head+int64(i+1) {
				t.Errorf("%s: change %d seq %d", mode, i, ch.Seq)
			}
		}
	}
	res := mustCommit(t, s, create("full/after", nil))
	if res[0].Doc.Seq != c.seq+1 {
		t.Errorf("after: seq %d, want %d", res[0].Doc.Seq, c.seq+1)
	}
}
