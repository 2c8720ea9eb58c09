// Package mongo is the distributed collections.Store engine: documents, the
// change log, durable cursors and a sequence counter in one MongoDB replica
// set (or sharded cluster), written through multi-document transactions
// with majority write concern, so several Loom nodes can share one
// database. Each Store batches concurrent commits into one transaction
// (group commit); a change stream on the change log wakes every node.
// docs/mongo.md describes the schema and why the change log holds.
package mongo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/groupcommit"
	"github.com/loomdb/loom/collections/internal/notify"
)

// Config configures an engine. Only URI is required.
type Config struct {
	// URI is a mongodb:// or mongodb+srv:// connection string.
	URI string
	// Database is the MongoDB database holding Loom's collections (default
	// "loom"). Every Loom node of one deployment names the same one.
	Database string
	// Retention is how long the change log and tombstones are kept (default
	// 7 days). Durable cursors hold back change-log retention.
	Retention time.Duration
	// MaxDocumentBytes bounds the encoded user data of one document
	// (default 1 MiB); system documents get the same allowance as in
	// package sqlite (SystemDocumentFactor times plus SystemDocumentSlack).
	MaxDocumentBytes int
	// Indexes become MongoDB indexes on the order keys at Open (indexes
	// Loom created earlier and no longer declared are dropped).
	Indexes []collections.Index
	// MaxBatch bounds how many queued commits share one transaction
	// (default 256).
	MaxBatch int
	// ServerSelectionTimeout bounds how long an unreachable server is
	// waited for (default 10s): Open fails within it.
	ServerSelectionTimeout time.Duration
	// PurgeInterval is how often retention runs (default 1 minute; negative
	// disables the background purge).
	PurgeInterval time.Duration
	Logger        *slog.Logger
	// Registerer receives the engine's metrics when set.
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultDatabase               = "loom"
	DefaultRetention              = 7 * 24 * time.Hour
	DefaultMaxDocumentBytes       = 1 << 20
	DefaultMaxBatch               = 256
	DefaultServerSelectionTimeout = 10 * time.Second
	DefaultPurgeInterval          = time.Minute
)

// MaxDocumentBytesLimit is the largest MaxDocumentBytes the engine accepts:
// a system document of SystemDocumentFactor*2 MiB + SystemDocumentSlack (9
// MiB) plus its order keys (at most maxKeyBytes), and a change carrying a
// document before and after, stay below MongoDB's 16 MiB BSON limit.
const MaxDocumentBytesLimit = 2 << 20

// The bound on system documents, relative to MaxDocumentBytes (as package
// sqlite: a trigger's outbox row carries a user document and its previous
// state).
const (
	SystemDocumentFactor = 4
	SystemDocumentSlack  = 1 << 20
)

// MongoDB collections of one Loom database.
const (
	collDocs    = "docs"
	collChanges = "changes"
	collMeta    = "meta"
	collCursors = "cursors"
)

// Fields of a document record (see docRecord).
const (
	fieldDB      = "db"
	fieldPath    = "path"
	fieldColl    = "coll"
	fieldShape   = "shape"
	fieldDepth   = "depth"
	fieldSys     = "sys"
	fieldID      = "id"
	fieldDeleted = "deleted"
	fieldUpdated = "updatedAt"
	fieldSeq     = "seq"
	fieldKeys    = "k"
	fieldNoKeys  = "nokeys"
)

// Meta documents: the change-log counter and the retention mark.
const (
	metaSeq    = "seq"
	metaPurged = "purged"
)

// pollInterval is how often Head is polled while the change stream is
// down, so no node stalls.
const pollInterval = time.Second

// Store is the MongoDB engine.
type Store struct {
	cfg     Config
	log     *slog.Logger
	client  *mongo.Client
	db      *mongo.Database
	docs    *mongo.Collection
	changes *mongo.Collection
	meta    *mongo.Collection
	cursors *mongo.Collection

	q       *groupcommit.Queue[*request]
	ctx     context.Context
	cancel  context.CancelFunc // stops the background goroutines' calls
	closed  atomic.Bool
	abandon atomic.Bool // set by crash: the committer drops queued work
	bg      sync.WaitGroup

	streamUp atomic.Bool // the change stream is open

	notify notify.Broadcaster

	metrics *groupcommit.Metrics
}

var _ collections.Store = (*Store)(nil)

// RedactURI returns uri with any password replaced by "xxxxx" (for errors
// and logs). A string that does not parse as a URI is reduced to its scheme.
func RedactURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		if i := strings.Index(uri, "://"); i >= 0 {
			return uri[:i] + "://xxxxx"
		}
		return "xxxxx"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	// Query options may carry secrets too (AWS session tokens).
	if q := u.Query(); q.Has("authMechanismProperties") {
		q.Set("authMechanismProperties", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// scrub removes the password of uri from an error's text (driver errors
// may quote the connection string).
func scrub(err error, uri string) error {
	u, perr := url.Parse(uri)
	if perr != nil || u.User == nil {
		return err
	}
	pw, has := u.User.Password()
	if !has || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// helloReply is the part of the hello command's reply Open looks at.
type helloReply struct {
	SetName        string `bson:"setName"`
	Msg            string `bson:"msg"`
	MaxWireVersion int32  `bson:"maxWireVersion"`
}

// minWireVersion is MongoDB 5.0's wire version: ReadChanges reads through
// a snapshot session, which older servers refuse.
const minWireVersion = 13

// checkVersion refuses a server older than MongoDB 5.0 (a reply without
// maxWireVersion is not judged).
func checkVersion(r helloReply) error {
	if r.MaxWireVersion == 0 || r.MaxWireVersion >= minWireVersion {
		return nil
	}
	return fmt.Errorf("is older than MongoDB 5.0 (wire version %d, want %d or later): Loom reads the change log through snapshot sessions",
		r.MaxWireVersion, minWireVersion)
}

// checkTopology refuses a standalone mongod: transactions and change
// streams need a replica set member or a mongos.
func checkTopology(r helloReply) error {
	if r.SetName != "" || r.Msg == "isdbgrid" {
		return nil
	}
	return errors.New("is a standalone mongod, not a replica set: Loom needs transactions and change streams, " +
		"which need a replica set (start mongod with --replSet and run rs.initiate(); a single-member set is enough)")
}

// Open connects, refuses a standalone mongod, a server older than 5.0 and
// an unreachable server with errors naming MongoDB and the redacted URI,
// creates the collections and indexes, and starts the committer and the
// change-stream waker.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.URI == "" {
		return nil, errors.New("mongo: Config.URI is required")
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxDocumentBytes <= 0 {
		cfg.MaxDocumentBytes = DefaultMaxDocumentBytes
	}
	if cfg.MaxDocumentBytes > MaxDocumentBytesLimit {
		return nil, fmt.Errorf("mongo: MaxDocumentBytes %d is above %d: a system document (%d times that plus %d) with its order keys, "+
			"or a change holding a document twice, would not fit MongoDB's 16 MiB document limit",
			cfg.MaxDocumentBytes, MaxDocumentBytesLimit, SystemDocumentFactor, SystemDocumentSlack)
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.ServerSelectionTimeout <= 0 {
		cfg.ServerSelectionTimeout = DefaultServerSelectionTimeout
	}
	if cfg.PurgeInterval == 0 {
		cfg.PurgeInterval = DefaultPurgeInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	indexes, err := indexDefs(cfg.Indexes)
	if err != nil {
		return nil, fmt.Errorf("mongo: %w", err)
	}
	where := "MongoDB at " + RedactURI(cfg.URI)

	wc := writeconcern.Majority()
	journal := true
	wc.Journal = &journal
	opts := options.Client().ApplyURI(cfg.URI).
		SetServerSelectionTimeout(cfg.ServerSelectionTimeout).
		SetWriteConcern(wc).
		SetReadConcern(readconcern.Majority()).
		SetReadPreference(readpref.Primary())
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongo: connect to %s: %w", where, scrub(err, cfg.URI))
	}
	fail := func(err error) (*Store, error) {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.Disconnect(dctx) //nolint:errcheck // already failing
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.ServerSelectionTimeout+5*time.Second)
	var hello helloReply
	err = client.Database("admin").RunCommand(hctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("mongo: %s is unreachable or refused hello: %w", where, scrub(err, cfg.URI)))
	}
	if err := checkTopology(hello); err != nil {
		return fail(fmt.Errorf("mongo: %s %w", where, err))
	}
	if err := checkVersion(hello); err != nil {
		return fail(fmt.Errorf("mongo: %s %w", where, err))
	}

	db := client.Database(cfg.Database)
	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger,
		client:  client,
		db:      db,
		docs:    db.Collection(collDocs),
		changes: db.Collection(collChanges),
		meta:    db.Collection(collMeta),
		cursors: db.Collection(collCursors),
	}
	s.q = groupcommit.New[*request](cfg.MaxBatch, maxBatchBytes, &s.closed, &s.abandon)
	if err := s.setup(ctx, indexes); err != nil {
		return fail(fmt.Errorf("mongo: set up database %q on %s: %w", cfg.Database, where, scrub(err, cfg.URI)))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	stream, err := s.openStream(ctx, nil)
	if err != nil {
		s.cancel()
		return fail(fmt.Errorf("mongo: open change stream on %s: %w", where, scrub(err, cfg.URI)))
	}
	s.metrics = newMetrics(cfg.Registerer)
	go s.q.Run(s.commit, nil)
	s.bg.Add(1)
	go s.watch(stream)
	if cfg.PurgeInterval > 0 {
		s.bg.Add(1)
		go s.purgeLoop(cfg.PurgeInterval)
	}
	s.log.Info("opened", "uri", RedactURI(cfg.URI), "database", cfg.Database, "indexes", len(indexes))
	return s, nil
}

// setup creates the collections (a transaction cannot create them on every
// server version), the meta documents, the engine's own indexes and the
// declared ones, dropping declared indexes no longer configured.
func (s *Store) setup(ctx context.Context, indexes []indexDef) error {
	names, err := s.db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, n := range []string{collDocs, collChanges, collMeta, collCursors} {
		if have[n] {
			continue
		}
		// Another node may create it at the same time.
		if err := s.db.CreateCollection(ctx, n); err != nil && !hasCode(err, 48) { // NamespaceExists
			return fmt.Errorf("create collection %s: %w", n, err)
		}
	}
	for _, id := range []string{metaSeq, metaPurged} {
		_, err := s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "n", Value: int64(0)}, {Key: "time", Value: int64(0)}}}},
			options.UpdateOne().SetUpsert(true))
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return fmt.Errorf("create meta %s: %w", id, err)
		}
	}
	own := []mongo.IndexModel{
		{Keys: bson.D{{Key: fieldDB, Value: 1}, {Key: fieldColl, Value: 1}, {Key: fieldPath, Value: 1}}, Options: options.Index().SetName("docs_collection")},
		{Keys: bson.D{{Key: fieldDB, Value: 1}, {Key: fieldShape, Value: 1}, {Key: fieldPath, Value: 1}}, Options: options.Index().SetName("docs_shape")},
		{Keys: bson.D{{Key: fieldDB, Value: 1}, {Key: fieldColl, Value: 1}, {Key: fieldSeq, Value: 1}, {Key: fieldID, Value: 1}}, Options: options.Index().SetName("docs_changed")},
		{Keys: bson.D{{Key: fieldUpdated, Value: 1}}, Options: options.Index().SetName("docs_tombstones").
			SetPartialFilterExpression(bson.D{{Key: fieldDeleted, Value: true}})},
		{Keys: bson.D{{Key: fieldDB, Value: 1}, {Key: fieldColl, Value: 1}}, Options: options.Index().SetName("docs_nokeys").
			SetPartialFilterExpression(bson.D{{Key: fieldNoKeys, Value: true}})},
	}
	if _, err := s.docs.Indexes().CreateMany(ctx, own); err != nil {
		return fmt.Errorf("create indexes: %w", err)
	}
	if _, err := s.changes.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "time", Value: 1}}, Options: options.Index().SetName("changes_time")}); err != nil {
		return fmt.Errorf("create indexes: %w", err)
	}
	specs, err := s.docs.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	existing := map[string]bool{}
	for _, sp := range specs {
		if strings.HasPrefix(sp.Name, "loomix_") {
			existing[sp.Name] = true
		}
	}
	for _, ix := range indexes {
		if existing[ix.name] {
			delete(existing, ix.name)
			continue
		}
		if _, err := s.docs.Indexes().CreateOne(ctx, ix.model); err != nil {
			return fmt.Errorf("create index on %s %v: %w", ix.decl.Collection, ix.decl.Fields, err)
		}
		s.log.Info("created index", "collection", ix.decl.Collection, "fields", ix.decl.Fields)
	}
	for name := range existing {
		if err := s.docs.Indexes().DropOne(ctx, name); err != nil && !hasCode(err, 27) { // IndexNotFound
			return fmt.Errorf("drop index %s: %w", name, err)
		}
		s.log.Info("dropped undeclared index", "name", name)
	}
	return nil
}

// hasCode reports whether err is a server error with the given code.
func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

// maxBytes is the size bound of the encoded data of the document at path.
func (s *Store) maxBytes(path string) int {
	if collections.IsSystemPath(path) {
		return SystemDocumentFactor*s.cfg.MaxDocumentBytes + SystemDocumentSlack
	}
	return s.cfg.MaxDocumentBytes
}

// Ready reports nil while the engine is open, the primary answers and the
// change stream is live.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if err := s.client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("mongo: ping %s: %w", RedactURI(s.cfg.URI), scrub(err, s.cfg.URI))
	}
	if !s.streamUp.Load() {
		return errors.New("mongo: change stream is down (waking on a poll of Head until it resumes)")
	}
	return nil
}

// Close stops accepting writes, commits everything already queued, stops
// the background goroutines and disconnects.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return collections.ErrClosed
	}
	err := s.shutdown()
	s.log.Info("closed", "uri", RedactURI(s.cfg.URI), "database", s.cfg.Database)
	if err != nil {
		return fmt.Errorf("mongo: disconnect: %w", err)
	}
	return nil
}

// crash abandons the store as kill -9 would: queued writes that were not
// committed are failed. Tests use it to check recovery.
func (s *Store) crash() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	s.abandon.Store(true)
	_ = s.shutdown() // abandoned: a disconnect error changes nothing
}

// shutdown stops the committer (which commits or, after crash, fails what
// is queued), the background goroutines and the metrics, and disconnects.
func (s *Store) shutdown() error {
	close(s.q.Stop)
	<-s.q.Done
	s.cancel()
	s.bg.Wait()
	s.metrics.Unregister()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.client.Disconnect(ctx)
}

func (s *Store) purgeLoop(every time.Duration) {
	defer s.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
			if err := s.purge(ctx); err != nil && s.ctx.Err() == nil {
				s.log.Error("retention purge failed", "err", err)
			}
			cancel()
		}
	}
}

// newMetrics describes the committer; the histograms are registered only
// when the configuration names a Registerer.
func newMetrics(reg prometheus.Registerer) *groupcommit.Metrics {
	return groupcommit.NewMetrics(reg, groupcommit.MetricsOpts{
		BatchName:      "loom_mongo_commit_batch_requests",
		BatchHelp:      "Requests committed together in one MongoDB transaction (group commit).",
		SecondsName:    "loom_mongo_commit_seconds",
		SecondsHelp:    "Time to run and majority-commit one MongoDB transaction, retries included.",
		SecondsBuckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
}
