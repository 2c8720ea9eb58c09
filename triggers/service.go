package triggers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/collections"
)

// Defaults for Config.
const (
	DefaultWorkers          = 64
	DefaultLeaseSlack       = 30 * time.Second
	DefaultPollInterval     = time.Second
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultDisableAfterDead = 20
	DefaultMaxHeld          = 10000
	DefaultRotationOverlap  = 24 * time.Hour
	DefaultDrainTimeout     = 10 * time.Second
)

// DefaultDisableOrigins: the dead deliveries of a streak must come from
// this many top-level documents (tenants) before it disables the trigger.
const DefaultDisableOrigins = 5

// Config configures a Service.
type Config struct {
	Store collections.Store
	// File is triggers.json ("" = no file triggers unless Builtin).
	File string
	// Builtin is a triggers.json used when File is "": the shipped
	// triggers of the built-in handlers. It cannot change, so Reload keeps
	// it. Its triggers are file triggers like File's.
	Builtin []byte
	// Expand resolves ${VAR} in url, headers and secret; the caller gives
	// the environment (EnvExpander). Nil: no variable is set, so every
	// ${VAR} is an error.
	Expand Expander
	// Transport sends the webhooks. It should be an SSRF-guarded transport
	// (internal/ssrf); nil means http.DefaultTransport (tests only).
	Transport http.RoundTripper
	// BuiltinTransport sends the deliveries under BuiltinURL, to this
	// server itself, whose address (often loopback) Transport's guard may
	// refuse for the other triggers. Nil means Transport.
	BuiltinTransport http.RoundTripper
	// NodeID names this process in delivery leases. It must be stable
	// across restarts of the same node (so its own leases are taken back
	// at once after a crash) and unique among nodes sharing a store.
	NodeID string
	// Workers bounds concurrent webhook requests. One trigger keeps at
	// most 3/4 of them busy and one origin (see DisableOrigins) 1/4, so a
	// receiver hanging on one trigger's or one tenant's deliveries leaves
	// workers for the others.
	Workers int
	// LeaseSlack is added to a trigger's timeout to make a delivery lease.
	LeaseSlack time.Duration
	// PollInterval is how often due retries and expired leases are looked
	// for.
	PollInterval time.Duration
	// Retention keeps delivered and dead outbox rows this long.
	Retention time.Duration
	// DisableAfterDead disables a trigger after this many dead deliveries
	// in a row (negative: never).
	DisableAfterDead int
	// DisableOrigins is how many distinct origins the dead deliveries of
	// such a streak must come from. A delivery's origin is
	// the top-level document its document lives under (users/alice for
	// users/alice/orch-chats/c1/messages/m1: the owner, in the usual
	// layout), so one user's documents, however many, cannot disable a
	// trigger for everyone. 1: any streak disables.
	DisableOrigins int
	// BuiltinURL is the URL prefix of this server's own webhook handlers
	// (the agent runtime, "${LOOM_URL}/webhooks/"; "" = none). A trigger
	// delivering there is never disabled automatically, neither by dead
	// deliveries nor by a 410: its receiver records a document's failure
	// itself, and its deliveries going dead means a fault an admin must
	// see, not a receiver that went away. The admin can still disable it.
	BuiltinURL string
	// MaxHeld bounds deliveries held in memory (in flight, queued behind
	// their ordering key, or a key's head waiting for its retry); beyond it
	// new matches wait in the outbox for the poller. One ordering key holds
	// at most max(16, MaxHeld/100) of them, one origin max(that,
	// MaxHeld/25) and one trigger a quarter (at least two origins' worth),
	// so no key, tenant or trigger can take the room the others need;
	// their further rows wait in the outbox, in order, until there is room.
	MaxHeld int
	// RotationOverlap is how long the previous secret keeps signing after
	// a rotation.
	RotationOverlap time.Duration
	// DrainTimeout is how long Run, once its context ends, lets requests
	// in flight finish and record their outcome (default 10 s).
	DrainTimeout time.Duration
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
	Version      string
}

// ErrNotFound: no trigger or delivery with that id.
var ErrNotFound = errors.New("not found")

// ErrConflict: the request conflicts with the trigger's source or state
// (a file trigger cannot be changed through the API; the id exists).
var ErrConflict = errors.New("conflict")

// entry is one known trigger.
type entry struct {
	c      *Compiled
	source string
	st     state
	ver    int64 // version of the stored state (0 = not stored)
}

func (e *entry) enabled() bool {
	if e.st.Enabled != nil {
		return *e.st.Enabled
	}
	return e.c.Def.Enabled == nil || *e.c.Def.Enabled
}

// Service runs the trigger pipeline: the evaluator, the delivery workers
// and the admin operations.
type Service struct {
	cfg    Config
	store  collections.Store
	log    *slog.Logger
	client *http.Client
	m      *metrics
	epoch  string
	rnd    func() float64
	// builtinClient sends the deliveries to this server's own handlers.
	builtinClient *http.Client

	mu      sync.Mutex
	entries map[string]*entry
	deltaMu sync.Mutex
	deltas  map[string]*Counts // guarded by deltaMu
	fileErr string
	// active is the evaluator's view: enabled triggers sorted by id.
	active atomic.Pointer[[]activeTrigger]
	// snap is a copy of entries for lock-free lookups.
	snap atomic.Pointer[map[string]*entry]

	d dispatcher
}

// activeTrigger is an immutable snapshot of an enabled trigger.
type activeTrigger struct {
	c          *Compiled
	activeFrom int64
}

// New loads the triggers (a bad file is an error) and their state. Call
// Run to start the pipeline.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("triggers: no store")
	}
	if cfg.Expand == nil {
		cfg.Expand = EnvExpander(func(string) (string, bool) { return "", false }, nil)
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.BuiltinTransport == nil {
		cfg.BuiltinTransport = cfg.Transport
	}
	if cfg.NodeID == "" {
		cfg.NodeID = randomHex(8)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.LeaseSlack <= 0 {
		cfg.LeaseSlack = DefaultLeaseSlack
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.DisableAfterDead == 0 {
		cfg.DisableAfterDead = DefaultDisableAfterDead
	}
	if cfg.DisableOrigins <= 0 {
		cfg.DisableOrigins = DefaultDisableOrigins
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.RotationOverlap <= 0 {
		cfg.RotationOverlap = DefaultRotationOverlap
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	s := &Service{
		cfg:     cfg,
		store:   cfg.Store,
		log:     cfg.Logger.With("component", "triggers"),
		client:  deliveryClient(cfg.Transport),
		entries: map[string]*entry{},
		deltas:  map[string]*Counts{},
		rnd:     mrand.Float64,
	}
	s.builtinClient = deliveryClient(cfg.BuiltinTransport)
	s.d.init(s)
	s.publishLocked()
	m, err := newMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.m = m
	var fileTriggers []*Compiled
	switch {
	case cfg.File != "":
		fileTriggers, err = LoadFile(cfg.File, cfg.Expand)
	case cfg.Builtin != nil:
		fileTriggers, err = ParseFile(cfg.Builtin, cfg.Expand)
		if err != nil {
			err = fmt.Errorf("built-in triggers: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	head, err := s.store.Head(ctx)
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	if err := s.initEpoch(ctx, head); err != nil {
		return nil, err
	}
	states, err := loadStates(ctx, s.store)
	if err != nil {
		return nil, err
	}
	// Registered triggers come from their state documents.
	for id, sd := range states {
		if sd.st.Source != SourceAPI || sd.st.Def == nil {
			continue
		}
		c, err := Compile(*sd.st.Def, cfg.Expand)
		if err != nil {
			// A registered trigger that no longer compiles (an env var
			// went away) must not stop the server: it is kept, disabled.
			s.log.Error("registered trigger does not compile; it stays disabled", "trigger", id, "err", err)
			continue
		}
		s.entries[id] = &entry{c: c, source: SourceAPI, st: sd.st, ver: sd.version}
	}
	if err := s.setFileTriggers(ctx, fileTriggers, states, head, true); err != nil {
		return nil, err
	}
	return s, nil
}

// deliveryClient sends webhooks through t. It has no timeout: each request
// carries its trigger's timeout in its context. Redirects are never
// followed (a 3xx is a failure).
func deliveryClient(t http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Builtin reports whether the file triggers are Config.Builtin (no file).
func (s *Service) Builtin() bool { return s.cfg.File == "" && s.cfg.Builtin != nil }

// EnvExpander resolves ${VAR} with lookup (the process environment:
// os.LookupEnv, given by the caller so that this package reads none);
// defaults supply values for unset variables (LOOM_URL,
// LOOM_WEBHOOK_SECRET).
func EnvExpander(lookup func(name string) (string, bool), defaults map[string]string) Expander {
	return func(name string) (string, error) {
		if v, ok := lookup(name); ok {
			return v, nil
		}
		if v, ok := defaults[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
}

// initEpoch reads the id prefix that keeps event ids unique across stores,
// or, on the very first start, starts the evaluator cursor at the head
// (triggers do not fire for changes committed before Loom had them) and
// then creates the prefix. A crash in between repeats both harmlessly.
func (s *Service) initEpoch(ctx context.Context, head int64) error {
	for {
		doc, err := s.store.Get(ctx, SystemDB, metaPath)
		if err == nil {
			s.epoch, _ = doc.Data["epoch"].(string)
			if s.epoch == "" {
				return fmt.Errorf("triggers: %s has no epoch", metaPath)
			}
			return nil
		}
		if !errors.Is(err, collections.ErrNotFound) {
			return fmt.Errorf("triggers: %w", err)
		}
		pos, err := s.store.Cursor(ctx, cursorName)
		if err != nil {
			return fmt.Errorf("triggers: %w", err)
		}
		if pos == 0 && head > 0 {
			_, err := s.store.Commit(ctx, SystemDB, nil, collections.CommitOptions{
				Cursor: &collections.CursorAdvance{Name: cursorName, From: 0, To: head},
			})
			if err != nil && !errors.Is(err, collections.ErrCursorConflict) {
				return fmt.Errorf("triggers: %w", err)
			}
		}
		_, err = s.store.Commit(ctx, SystemDB, []collections.Write{{
			Type: collections.WriteCreate, Path: metaPath,
			Data: map[string]any{"epoch": randomHex(4)},
		}}, collections.CommitOptions{})
		if err != nil && !errors.Is(err, collections.ErrAlreadyExists) {
			return fmt.Errorf("triggers: %w", err)
		}
	}
}

// setFileTriggers replaces the file triggers. A trigger seen for the first
// time (or again after it was gone) fires from head on; at startup a
// trigger with stored state keeps its position, so changes committed while
// the server was down still fire.
func (s *Service) setFileTriggers(ctx context.Context, list []*Compiled, states map[string]*stored, head int64, startup bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]*Compiled, 0, len(list))
	for _, c := range list {
		e, ok := s.entries[c.Def.ID]
		switch {
		case !ok || e.source != SourceAPI:
			kept = append(kept, c)
		case s.Builtin():
			// The built-in set cannot be edited, and a server that ran
			// without a file may have had its triggers registered.
			s.log.Warn("a registered trigger replaces the built-in one of the same id", "trigger", c.Def.ID)
		default:
			return fmt.Errorf("triggers: %s: triggerId %q is already used by a registered trigger", s.cfg.File, c.Def.ID)
		}
	}
	list = kept
	keep := map[string]bool{}
	for _, c := range list {
		id := c.Def.ID
		keep[id] = true
		old := s.entries[id]
		e := &entry{c: c, source: SourceFile}
		switch {
		case old != nil:
			e.st, e.ver = old.st, old.ver
		case startup && states[id] != nil:
			e.st, e.ver = states[id].st, states[id].version
		default:
			if st, ver, err := readState(ctx, s.store, id); err != nil {
				return err
			} else if st != nil {
				e.st, e.ver = *st, ver
			}
			e.st.ActiveFrom = head
		}
		e.st.Source = SourceFile
		e.st.Def = nil
		if c.Def.Secret == "" && e.st.Secret == "" {
			e.st.Secret = NewSecret()
		}
		if e.ver == 0 || old == nil {
			v, err := s.saveEntryLocked(ctx, id, e, Counts{})
			if err != nil {
				return err
			}
			e.ver = v
		}
		s.entries[id] = e
	}
	for id, e := range s.entries {
		if e.source == SourceFile && !keep[id] {
			delete(s.entries, id)
		}
	}
	s.publishLocked()
	return nil
}

// saveEntryLocked stores e.st, retrying once on a concurrent change from
// another node: the stored counters win, plus added (the counts this save
// adds), and our change of everything else is kept.
func (s *Service) saveEntryLocked(ctx context.Context, id string, e *entry, added Counts) (int64, error) {
	v, err := saveState(ctx, s.store, id, &e.st, e.ver)
	if errors.Is(err, errStateConflict) {
		cur, ver, rerr := readState(ctx, s.store, id)
		if rerr != nil {
			return 0, rerr
		}
		if cur != nil {
			e.st.Counts = cur.Counts
			e.st.Counts.add(added)
		}
		return saveState(ctx, s.store, id, &e.st, ver)
	}
	return v, err
}

// publishLocked rebuilds the evaluator snapshot.
func (s *Service) publishLocked() {
	act := make([]activeTrigger, 0, len(s.entries))
	for _, e := range s.entries {
		if e.enabled() {
			act = append(act, activeTrigger{c: e.c, activeFrom: e.st.ActiveFrom})
		}
	}
	sort.Slice(act, func(i, j int) bool { return act[i].c.Def.ID < act[j].c.Def.ID })
	s.active.Store(&act)
	snap := make(map[string]*entry, len(s.entries))
	for id, e := range s.entries {
		snap[id] = e
	}
	s.snap.Store(&snap)
}

// Reload re-reads the triggers file. A bad file keeps the current set and
// returns the error. The built-in triggers (no file) are kept as they are.
func (s *Service) Reload(ctx context.Context) error {
	if s.Builtin() {
		s.log.Info("triggers reload: no triggers file; the built-in triggers stay in force")
		return nil
	}
	if s.cfg.File == "" {
		return fmt.Errorf("%w: no triggers file configured", ErrConflict)
	}
	list, err := LoadFile(s.cfg.File, s.cfg.Expand)
	if err == nil {
		var head int64
		if head, err = s.store.Head(ctx); err == nil {
			err = s.setFileTriggers(ctx, list, nil, head, false)
		}
	}
	s.mu.Lock()
	if err != nil {
		s.fileErr = err.Error()
	} else {
		s.fileErr = ""
	}
	s.mu.Unlock()
	if err != nil {
		s.m.reloads.WithLabelValues("error").Inc()
		s.log.Error("triggers reload failed; keeping the current triggers", "file", s.cfg.File, "err", err)
		return fmt.Errorf("%w: the triggers file was not loaded; the previous triggers stay in force: %v", ErrInvalid, err)
	}
	s.m.reloads.WithLabelValues("ok").Inc()
	s.log.Info("triggers reloaded", "file", s.cfg.File, "count", len(list))
	return nil
}

// Run runs the pipeline until ctx is cancelled, then waits for in-flight
// deliveries to stop.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){s.evaluate, s.d.poll, s.flushLoop, s.purgeLoop} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	wg.Wait()
	s.d.wait(s.cfg.DrainTimeout)
	// Counters of the last moments.
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.flushCounts(fctx)
	return nil
}

// entry returns the published entry of trigger id (nil when unknown).
func (s *Service) entry(id string) *entry {
	return (*s.snap.Load())[id]
}

// count adds to a trigger's counters (flushed to its state every second).
// It has its own lock: a delivery never waits for a flush's store write.
func (s *Service) count(id string, d Counts) {
	s.deltaMu.Lock()
	c := s.deltas[id]
	if c == nil {
		c = &Counts{}
		s.deltas[id] = c
	}
	c.add(d)
	s.deltaMu.Unlock()
}

// takeDeltas removes and returns the counter deltas.
func (s *Service) takeDeltas() map[string]*Counts {
	s.deltaMu.Lock()
	defer s.deltaMu.Unlock()
	d := s.deltas
	s.deltas = map[string]*Counts{}
	return d
}

// takeDeltaOf drops a trigger's unflushed counters (it was deleted).
func (s *Service) takeDeltaOf(id string) {
	s.deltaMu.Lock()
	delete(s.deltas, id)
	s.deltaMu.Unlock()
}

// pendingDelta is the not yet flushed part of a trigger's counters.
func (s *Service) pendingDelta(id string) Counts {
	s.deltaMu.Lock()
	defer s.deltaMu.Unlock()
	if d := s.deltas[id]; d != nil {
		return *d
	}
	return Counts{}
}

func (s *Service) flushLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.flushCounts(ctx)
		}
	}
}

// flushCounts adds the counter deltas to the stored states. Deltas that
// fail to save are put back for the next flush.
func (s *Service) flushCounts(ctx context.Context) {
	deltas := s.takeDeltas()
	if len(deltas) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for id, d := range deltas {
		cur := s.entries[id]
		if cur == nil {
			continue
		}
		ne := *cur
		ne.st.Counts.add(*d)
		v, err := s.saveEntryLocked(ctx, id, &ne, *d)
		if err != nil {
			s.log.Warn("saving trigger counters", "trigger", id, "err", err)
			s.count(id, *d)
			continue
		}
		ne.ver = v
		s.entries[id] = &ne
		changed = true
	}
	if changed {
		s.publishLocked()
	}
}

// updateEntry applies fn to a copy of a trigger's entry, stores its state
// and publishes the copy. Entries are never modified once published, so
// deliveries read them without locking.
func (s *Service) updateEntry(ctx context.Context, id string, fn func(e *entry) error) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.entries[id]
	if cur == nil {
		return nil, fmt.Errorf("%w: trigger %q", ErrNotFound, id)
	}
	ne := *cur
	if err := fn(&ne); err != nil {
		return nil, err
	}
	v, err := s.saveEntryLocked(ctx, id, &ne, Counts{})
	if err != nil {
		return nil, err
	}
	ne.ver = v
	s.entries[id] = &ne
	s.publishLocked()
	return &ne, nil
}

// setEnabled switches a trigger on or off; reason explains a disable.
func (s *Service) setEnabled(ctx context.Context, id string, on bool, reason string) error {
	_, err := s.updateEntry(ctx, id, func(e *entry) error {
		e.st.Enabled = &on
		e.st.DisabledReason = ""
		if !on {
			e.st.DisabledReason = reason
		} else {
			e.st.ConsecutiveDead, e.st.DeadOrigins = 0, nil
		}
		return nil
	})
	if err == nil && on {
		s.wakeTrigger(ctx, id)
	}
	if err == nil {
		s.log.Info("trigger switched", "trigger", id, "enabled", on, "reason", reason)
	}
	return err
}

// signingKeys returns the keys a delivery of e is signed with now.
func (s *Service) signingKeys(e *entry, now time.Time) ([][]byte, error) {
	secret := e.c.Def.Secret
	if secret == "" {
		secret = e.st.Secret
	}
	k, err := secretKey(secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if e.st.PrevSecret != "" && e.st.PrevUntil > ms(now) {
		if pk, err := secretKey(e.st.PrevSecret); err == nil {
			keys = append(keys, pk)
		}
	}
	return keys, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
