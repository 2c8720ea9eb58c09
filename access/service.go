package access

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// Config configures a Service.
type Config struct {
	// Store holds the documents; required.
	Store collections.Store
	// Rules are the security rules; nil means the built-in rules
	// (rules.Default()).
	Rules *rules.Set
	// CursorKey seals the query cursors handed to clients (at least
	// MinCursorKeyBytes; see cursor.go). Every node serving the same data
	// must use the same key, or a cursor from one node is refused by
	// another. Nil: a random key per process (cursors do not survive a
	// restart).
	CursorKey []byte
	// WriteCheck, when set, checks every write a caller other than an
	// admin makes, with the document as it would be stored (a patch
	// merged), after the security rules allowed it and before the commit:
	// REST, batch and RxDB writes alike. Its error refuses the write as an
	// *InvalidWrite (return one to name the field). Deletes are not
	// checked. Admin writes are not either: the admin bypasses the rules,
	// and what reads the documents re-checks them.
	WriteCheck func(path string, data map[string]any) error
}

// Service applies the access protocol over one Store. It is safe for
// concurrent use; SetRules swaps the rules under running requests.
type Service struct {
	store   collections.Store
	rules   atomic.Pointer[rules.Set]
	cursors *cursorSealer
	check   func(path string, data map[string]any) error
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("access: nil store")
	}
	cursors, err := newCursorSealer(cfg.CursorKey)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	s := &Service{store: cfg.Store, cursors: cursors, check: cfg.WriteCheck}
	if cfg.Rules == nil {
		cfg.Rules = rules.Default()
	}
	s.rules.Store(cfg.Rules)
	return s, nil
}

// Rules returns the security rules in force.
func (s *Service) Rules() *rules.Set { return s.rules.Load() }

// SetRules replaces the security rules (a reload); requests already past
// their rules check finish under the old ones.
func (s *Service) SetRules(set *rules.Set) { s.rules.Store(set) }

// storeGetter lets rule conditions read documents of the same database
// (get() and exists()).
type storeGetter struct {
	store collections.Store
	db    string
}

func (g storeGetter) GetData(ctx context.Context, path string) (map[string]any, bool, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, false, err
	}
	if collections.IsSystemPath(path) {
		// Rules decide for callers; a path built from a capture or from
		// request data must not turn Loom's own state into an oracle.
		return nil, false, nil
	}
	d, err := g.store.Get(ctx, g.db, path)
	if errors.Is(err, collections.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return d.Data, true, nil
}

// allow evaluates the rules for one operation.
func (s *Service) allow(ctx context.Context, caller *Caller, db string, req rules.Request) (bool, error) {
	req.Auth = caller.ruleAuth()
	req.Time = time.Now()
	return s.rules.Load().Allow(ctx, req, storeGetter{s.store, db})
}
