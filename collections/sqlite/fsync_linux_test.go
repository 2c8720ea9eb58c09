//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Power loss keeps only what reached the disk; kill -9 and a clean close
// keep the OS page cache, so no crash test can tell a synced commit from an
// unsynced one. Dropping the page cache needs root, and a fault-injecting
// file layer needs a SQLite VFS, which mattn/go-sqlite3 does not expose to
// Go. What an unprivileged process can observe is whether the page cache
// still holds dirty pages of a file: Linux's cachestat(2) (6.5 and later)
// counts a range's pages that are dirty or under writeback. fsync returns
// only after every dirty page of the file is written and its writeback
// finished, so "no dirty page and none under writeback right after Commit
// returned" is what "the commit was synced before it was acknowledged"
// looks like from userspace. (Counting fsync calls under strace was the
// other candidate: it says that some sync happened, not that it covered
// the commit's bytes, and needs ptrace.)

// pageCacheState returns how many pages of the file at path are dirty or
// under writeback.
func pageCacheState(path string) (dirty, writeback uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: 0, Len: 0}, &cs, 0); err != nil { // Len 0: to the end of the file
		return 0, 0, err
	}
	return cs.Dirty, cs.Writeback, nil
}

// fsyncObservable reports whether, in dir, written pages show as dirty and
// an fsync cleans them: not on a kernel without cachestat, nor where the
// syscall is filtered, nor on a file system without writeback (tmpfs).
func fsyncObservable(dir string) error {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		return err
	}
	dirty, wb, err := pageCacheState(f.Name())
	if err != nil {
		return fmt.Errorf("cachestat: %w", err)
	}
	if dirty+wb == 0 {
		return errors.New("a written file shows no dirty page")
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if dirty, wb, err = pageCacheState(f.Name()); err != nil || dirty+wb != 0 {
		return fmt.Errorf("after fsync: %d dirty, %d under writeback (err %v)", dirty, wb, err)
	}
	return nil
}

// TestAcknowledgedCommitIsSynced commits documents one by one and, as soon
// as each Commit returns, checks that no page of the WAL is dirty or still
// being written back: the bytes of the acknowledged commit are on the disk.
// With synchronous=NORMAL (WAL synced only at checkpoints) or OFF (never)
// the commit's frames are still dirty in the page cache at that point. The
// committer is idle between commits (the background purge is off and
// nothing else writes), so with FULL nothing can dirty the WAL again before
// the check. The kernel's own writeback could clean an unsynced page
// before the check and hide a break for one commit, never fail a correct
// engine; 20 commits make hiding every one of them implausible.
func TestAcknowledgedCommitIsSynced(t *testing.T) {
	dir := t.TempDir()
	if err := fsyncObservable(dir); err != nil {
		// TMPDIR on tmpfs: try the package directory, on the disk the
		// sources are on.
		alt, err2 := os.MkdirTemp(".", "fsync-test-")
		if err2 != nil {
			t.Skipf("fsync is not observable here (%v) and no directory beside the sources: %v", err, err2)
		}
		t.Cleanup(func() { os.RemoveAll(alt) })
		if err2 := fsyncObservable(alt); err2 != nil {
			t.Skipf("fsync is not observable with cachestat here: %s: %v; %s: %v", dir, err, alt, err2)
		}
		dir = alt
	}
	path := filepath.Join(dir, "loom.db")
	s := mustOpen(t, Config{Path: path, PurgeInterval: -1})
	wal := path + "-wal"
	for i := range 20 {
		mustCommit(t, s, create(fmt.Sprintf("items/d%02d", i), map[string]any{"n": i, "pad": string(make([]byte, 3000))}))
		dirty, wb, err := pageCacheState(wal)
		if err != nil {
			t.Fatal(err)
		}
		if dirty != 0 || wb != 0 {
			t.Fatalf("after commit %d returned, %d pages of the WAL are dirty and %d under writeback: the commit was acknowledged before it was on disk (synchronous must be FULL)", i+1, dirty, wb)
		}
	}

	// The last connection to close copies the WAL into the database file
	// and deletes the WAL: the copy must be synced before the WAL goes.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, wal} {
		dirty, wb, err := pageCacheState(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if dirty != 0 || wb != 0 {
			t.Errorf("after Close, %d pages of %s are dirty and %d under writeback: the close checkpoint was not synced", dirty, filepath.Base(f), wb)
		}
	}
}
