// Package sqlite is the embedded collections.Store engine: one SQLite file in
// WAL mode, written by a single committer goroutine that batches concurrent
// writes into one fsynced transaction (group commit) and read through a pool
// of connections that never wait for the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/groupcommit"
	"github.com/loomdb/loom/collections/internal/notify"
)

// Config configures an engine. Only Path is required.
type Config struct {
	// Path is the database file; its directory is created if needed.
	Path string
	// Retention is how long the change log and tombstones are kept (default
	// 7 days). Durable cursors hold back change-log retention.
	Retention time.Duration
	// MaxDocumentBytes bounds the encoded user data of one document
	// (default 1 MiB). Documents of system collections (written by Loom
	// itself, never through the document API) may be SystemDocumentFactor
	// times larger plus SystemDocumentSlack: they carry user documents (a
	// trigger's outbox row holds the changed document and its previous
	// state), and a user document at the limit must not make Loom's own
	// write fail (the trigger evaluator would retry that commit forever,
	// for every trigger and every user).
	MaxDocumentBytes int
	// Indexes are built (and dropped when no longer declared) at Open.
	Indexes []collections.Index
	// MaxBatch bounds how many queued commits share one transaction
	// (default 256).
	MaxBatch int
	// ReadConns is the size of the read pool (default max(4, 2*GOMAXPROCS)).
	ReadConns int
	// PurgeInterval is how often retention runs (default 1 minute; negative
	// disables the background purge).
	PurgeInterval time.Duration
	Logger        *slog.Logger
	// Registerer receives the engine's metrics when set.
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultMaxDocumentBytes = 1 << 20
	DefaultMaxBatch         = 256
	DefaultPurgeInterval    = time.Minute
)

// The bound on system documents, relative to MaxDocumentBytes.
const (
	SystemDocumentFactor = 4
	SystemDocumentSlack  = 1 << 20
)

// Store is the SQLite engine.
type Store struct {
	cfg     Config
	log     *slog.Logger
	wdb     *sql.DB // one connection, owned by the committer
	rdb     *sql.DB // read pool
	reads   readStmts
	queries stmtCache
	indexes []indexDef

	q       *groupcommit.Queue[*request]
	closing sync.Once
	closed  atomic.Bool
	abandon atomic.Bool // set by crash: the committer drops queued work
	bg      sync.WaitGroup

	head atomic.Int64 // last committed seq
	// lastSystem is at least the seq of the newest committed logged write
	// of a system path, at most head (collections.SystemChanges). The
	// committer stores it before head.
	lastSystem atomic.Int64

	notify notify.Broadcaster

	metrics *groupcommit.Metrics
}

var (
	_ collections.Store         = (*Store)(nil)
	_ collections.SystemChanges = (*Store)(nil)
)

// schema is created on first open. Documents and the change log share the
// file, so one transaction covers both. Seqs are assigned by the committer
// and persisted in meta so they are never reused even after the log is
// purged.
//
// There is no index on (db, collection, path): concrete collections are
// read from docs_shape (see planQuery) and the catalog's collection seeks
// from docs_changed, so the docs_collection index earlier versions built is
// dropped, which saves every document write an index entry. Its DROP runs
// in one transaction, in time proportional to its size. An older binary
// opening the database builds it again (CREATE INDEX IF NOT EXISTS): slow
// on a large database, but correct.
const schema = `
CREATE TABLE IF NOT EXISTS docs (
	db         TEXT    NOT NULL,
	path       TEXT    NOT NULL,
	collection TEXT    NOT NULL,
	shape      TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	data       TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	deleted    INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	PRIMARY KEY (db, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS docs_shape ON docs (db, shape, path);
CREATE INDEX IF NOT EXISTS docs_changed ON docs (db, collection, seq, id);
CREATE INDEX IF NOT EXISTS docs_tombstones ON docs (updated_at) WHERE deleted = 1;
DROP INDEX IF EXISTS docs_collection;
CREATE TABLE IF NOT EXISTS changes (
	seq      INTEGER PRIMARY KEY,
	db       TEXT    NOT NULL,
	op       TEXT    NOT NULL,
	path     TEXT    NOT NULL,
	time     INTEGER NOT NULL,
	b_version INTEGER, b_created INTEGER, b_updated INTEGER, b_deleted INTEGER, b_seq INTEGER, b_data TEXT,
	a_version INTEGER NOT NULL, a_created INTEGER NOT NULL, a_deleted INTEGER NOT NULL, a_data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cursors (
	name TEXT PRIMARY KEY,
	seq  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('last_seq', 0), ('purged_through', 0), ('last_time', 0);
`

// Open opens (creating if needed) the database at cfg.Path, builds the
// declared indexes and starts the committer.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("sqlite: Config.Path is required")
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxDocumentBytes <= 0 {
		cfg.MaxDocumentBytes = DefaultMaxDocumentBytes
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.ReadConns <= 0 {
		cfg.ReadConns = max(4, 2*runtime.GOMAXPROCS(0))
	}
	if cfg.PurgeInterval == 0 {
		cfg.PurgeInterval = DefaultPurgeInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	indexes, err := indexDefs(cfg.Indexes)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	}

	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger,
		indexes: indexes,
	}
	s.queries.setIndexes(indexes)
	s.q = groupcommit.New[*request](cfg.MaxBatch, 0, &s.closed, &s.abandon)
	if s.wdb, err = openDB(cfg.Path, true); err != nil {
		return nil, err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	// The commit that takes the WAL past this many pages copies them into
	// the database file (a PASSIVE checkpoint) and fsyncs it. Most of a
	// batch's pages are the same hot ones (the right edges of the docs and
	// changes trees, the index leaves its values fall in): a checkpoint
	// every 4,000 pages instead of SQLite's 1,000 copies each of them a
	// quarter as often. Durability does not depend on it (every commit
	// fsyncs the WAL); the WAL stays bounded as before, at ~16 MB instead
	// of ~4 MB (4 KiB pages), unless a long read holds it back.
	if _, err := s.wdb.ExecContext(ctx, `PRAGMA wal_autocheckpoint = `+strconv.Itoa(walCheckpointPages)); err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.wdb.Close()
		return nil, err
	}
	if s.rdb, err = openDB(cfg.Path, false); err != nil {
		s.wdb.Close()
		return nil, err
	}
	s.rdb.SetMaxOpenConns(cfg.ReadConns)
	s.rdb.SetMaxIdleConns(cfg.ReadConns)
	s.rdb.SetConnMaxLifetime(0)

	c, err := newCommitter(ctx, s)
	if err != nil {
		s.wdb.Close()
		s.rdb.Close()
		return nil, err
	}
	if err := s.reads.prepare(ctx, s.rdb); err != nil {
		c.close()
		s.wdb.Close()
		s.rdb.Close()
		return nil, err
	}
	s.metrics = newMetrics(cfg.Registerer)
	go c.run()
	if cfg.PurgeInterval > 0 {
		s.bg.Add(1)
		go s.purgeLoop(cfg.PurgeInterval)
	}
	s.log.Info("opened", "path", cfg.Path, "head", s.head.Load(), "indexes", len(indexes))
	return s, nil
}

// walCheckpointPages is the writer's wal_autocheckpoint (see Open).
const walCheckpointPages = 4000

// openDB opens a handle with the pragmas every connection needs. The writer
// handle takes the write lock at BEGIN so a transaction never fails half way
// on SQLITE_BUSY.
func openDB(path string, writer bool) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL") // fsync the WAL on every commit: durability
	q.Set("_busy_timeout", "10000")
	q.Set("_foreign_keys", "0")
	q.Set("_cache_size", "-32000")
	if writer {
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_query_only", "1")
	}
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// migrate creates the schema and brings declared indexes in line with the
// configuration: indexes Loom created earlier that are no longer declared are
// dropped, so that removing one from the config also removes its write cost.
func (s *Store) migrate(ctx context.Context) error {
	if err := s.wdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.cfg.Path, err)
	}
	if _, err := s.wdb.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("sqlite: create schema: %w", err)
	}
	rows, err := s.wdb.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'loomix_%'`)
	if err != nil {
		return fmt.Errorf("sqlite: list indexes: %w", err)
	}
	existing := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: list indexes: %w", err)
		}
		existing[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: list indexes: %w", err)
	}
	for _, ix := range s.indexes {
		if existing[ix.name] {
			delete(existing, ix.name)
			continue
		}
		if _, err := s.wdb.ExecContext(ctx, ix.ddl); err != nil {
			return fmt.Errorf("sqlite: create index on %s %v: %w", ix.decl.Collection, ix.decl.Fields, err)
		}
		s.log.Info("created index", "collection", ix.decl.Collection, "fields", ix.decl.Fields)
	}
	for name := range existing {
		if _, err := s.wdb.ExecContext(ctx, `DROP INDEX IF EXISTS "`+name+`"`); err != nil {
			return fmt.Errorf("sqlite: drop index %s: %w", name, err)
		}
		s.log.Info("dropped undeclared index", "name", name)
	}
	if err := s.writeStats(ctx); err != nil {
		return fmt.Errorf("sqlite: planner statistics: %w", err)
	}
	return nil
}

// Planner statistics. Without sqlite_stat1 SQLite assumes an equality on the
// first column of any index matches about 10 rows, so "db = ?" on the
// primary key (db, path) looks as selective as anything else and nearly every
// query became a scan of the whole database in path order, ignoring
// docs_shape and the declared indexes. The statistics below
// are fixed, not measured: they tell the planner what is true of every Loom
// database whatever its contents, namely that db is not selective, a shape
// holds many collections, a collection many documents, and a declared
// index's field values are selective. They are rewritten at every Open so
// they always describe the current indexes (and undo a manual ANALYZE).
const (
	statDocs       = "1000000 1000000 1"       // docs primary key (db, path)
	statShape      = "1000000 1000000 10000 1" // docs_shape (db, shape, path)
	statChanged    = "1000000 1000000 100 1 1" // docs_changed (db, collection, seq, id)
	statTombstones = "10000 1"                 // docs_tombstones (updated_at)
)

func (s *Store) writeStats(ctx context.Context) error {
	// ANALYZE of sqlite_schema creates sqlite_stat1 when missing and, run
	// again at the end, loads the rows into this connection; the read pool
	// is opened later and loads them itself.
	if _, err := s.wdb.ExecContext(ctx, `ANALYZE sqlite_schema`); err != nil {
		return err
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, `DELETE FROM sqlite_stat1`); err != nil {
		return err
	}
	rows := [][2]string{
		{"docs", statDocs},
		{"docs_shape", statShape},
		{"docs_changed", statChanged},
		{"docs_tombstones", statTombstones},
	}
	for _, ix := range s.indexes {
		rows = append(rows, [2]string{ix.name, ix.stat})
	}
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('docs', ?, ?)`, r[0], r[1]); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = s.wdb.ExecContext(ctx, `ANALYZE sqlite_schema`)
	return err
}

// maxBytes is the size bound of the encoded data of the document at path
// (see Config.MaxDocumentBytes).
func (s *Store) maxBytes(path string) int {
	if collections.IsSystemPath(path) {
		return SystemDocumentFactor*s.cfg.MaxDocumentBytes + SystemDocumentSlack
	}
	return s.cfg.MaxDocumentBytes
}

// Ready reports nil while the engine is open and can read its database.
func (s *Store) Ready(ctx context.Context) error {
	if s.closed.Load() {
		return collections.ErrClosed
	}
	if err := s.rdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// LastSystemChange implements collections.SystemChanges: head is read
// before last, and the committer stores last before head, so every system
// change at or below head is at or below last.
func (s *Store) LastSystemChange() (last, head int64) {
	head = s.head.Load()
	return s.lastSystem.Load(), head
}

// Notify returns a channel closed after the next commit that appends to the
// change log.
func (s *Store) Notify() <-chan struct{} { return s.notify.C() }

func (s *Store) wake() { s.notify.Wake() }

// Close stops accepting writes, commits everything already queued and closes
// the database.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return collections.ErrClosed
	}
	close(s.q.Stop)
	<-s.q.Done
	s.bg.Wait()
	s.reads.close()
	s.queries.close()
	rerr := s.rdb.Close()
	werr := s.wdb.Close()
	s.metrics.Unregister()
	s.log.Info("closed", "path", s.cfg.Path, "head", s.head.Load())
	return errors.Join(rerr, werr)
}

// crash abandons the store as kill -9 would: queued writes that were not
// committed are failed, nothing is flushed or checkpointed beyond what
// SQLite already made durable. Tests use it to check recovery.
func (s *Store) crash() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	s.abandon.Store(true)
	close(s.q.Stop)
	<-s.q.Done
	s.bg.Wait()
	s.reads.close()
	s.queries.close()
	s.rdb.Close()
	s.wdb.Close()
	s.metrics.Unregister()
}

func (s *Store) purgeLoop(every time.Duration) {
	defer s.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.q.Stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			if err := s.Purge(ctx); err != nil && !errors.Is(err, collections.ErrClosed) {
				s.log.Error("retention purge failed", "err", err)
			}
			cancel()
		}
	}
}
