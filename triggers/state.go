package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/loomdb/loom/collections"
)

// Trigger sources.
const (
	SourceFile = "file" // triggers.json: read-only through the API
	SourceAPI  = "api"  // registered with POST /admin/v1/triggers
)

// Counts are a trigger's lifetime delivery counters.
type Counts struct {
	Matched        int64 `json:"matched"`
	Delivered      int64 `json:"delivered"`
	Dead           int64 `json:"dead"`
	FailedAttempts int64 `json:"failedAttempts"`
	EvalErrors     int64 `json:"evalErrors"`
}

func (c *Counts) add(d Counts) {
	c.Matched += d.Matched
	c.Delivered += d.Delivered
	c.Dead += d.Dead
	c.FailedAttempts += d.FailedAttempts
	c.EvalErrors += d.EvalErrors
}

// state is what Loom keeps about one trigger in _triggers/{id}: the
// definition of a registered trigger, and for every trigger its switches,
// secrets and counters.
type state struct {
	Source string   `json:"source"`
	Def    *Trigger `json:"def,omitempty"` // registered triggers only
	// Enabled overrides the definition's enabled flag once set through the
	// API or by auto-disable.
	Enabled        *bool  `json:"enabled,omitempty"`
	DisabledReason string `json:"disabledReason,omitempty"`
	// Secret is the signing secret when the definition has none (generated)
	// or the trigger was registered. SecretShown records that the admin API
	// has shown it once.
	Secret      string `json:"secret,omitempty"`
	SecretShown bool   `json:"secretShown,omitempty"`
	// PrevSecret also signs until PrevUntil (unix ms) after a rotation.
	PrevSecret      string `json:"prevSecret,omitempty"`
	PrevUntil       int64  `json:"prevUntil,omitempty"`
	ConsecutiveDead int    `json:"consecutiveDead,omitempty"`
	Counts          Counts `json:"counts"`
	LastError       string `json:"lastError,omitempty"`
	LastErrorAt     int64  `json:"lastErrorAt,omitempty"`
	// ActiveFrom is the change-log seq the trigger was first seen at: it
	// fires only for later changes.
	ActiveFrom int64 `json:"activeFrom"`

	// DeadOrigins are the distinct origins (hashed) of the current dead
	// streak, at most Config.DisableOrigins of them.
	DeadOrigins []string `json:"deadOrigins,omitempty"`
}

func statePath(id string) string { return triggerColl + "/" + id }

// registered reports whether st is the state of a registered trigger (nil:
// no state).
func (st *state) registered() bool {
	return st != nil && st.Source == SourceAPI && st.Def != nil
}

// loadStates reads every _triggers document.
func loadStates(ctx context.Context, s collections.Store) (map[string]*stored, error) {
	out := map[string]*stored{}
	q := collections.Query{Collection: triggerColl, Limit: collections.MaxLimit}
	if err := q.Normalize(); err != nil {
		return nil, err
	}
	for {
		res, err := s.Query(ctx, SystemDB, q)
		if err != nil {
			return nil, fmt.Errorf("triggers: load state: %w", err)
		}
		for _, doc := range res.Docs {
			st, err := decodeState(doc)
			if err != nil {
				return nil, err
			}
			out[doc.ID] = &stored{st: st, version: doc.Version}
		}
		if res.NextCursor == "" {
			return out, nil
		}
		q.StartAfter = res.NextCursor
	}
}

// stored is a state with the version it was read at.
type stored struct {
	st      state
	version int64 // 0 = not stored yet
}

func decodeState(doc *collections.Document) (state, error) {
	var st state
	b, err := json.Marshal(doc.Data)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return st, fmt.Errorf("triggers: state %s: %w", doc.ID, err)
	}
	return st, nil
}

func encodeState(st *state) (map[string]any, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return collections.DecodeObject(b)
}

// errStateConflict: the state document changed since it was read.
var errStateConflict = errors.New("trigger state changed concurrently")

// saveState writes st for trigger id if its stored version is still
// version (0 = must not exist) and returns the new version and the seq of
// its change (the registries follow _triggers in the change log).
func saveState(ctx context.Context, s collections.Store, id string, st *state, version int64) (newVersion, seq int64, err error) {
	w, err := stateWrite(id, st, version)
	if err != nil {
		return 0, 0, err
	}
	res, err := s.Commit(ctx, SystemDB, []collections.Write{w}, collections.CommitOptions{})
	if err != nil {
		if errors.Is(err, collections.ErrPreconditionFailed) || errors.Is(err, collections.ErrAlreadyExists) {
			return 0, 0, errStateConflict
		}
		return 0, 0, fmt.Errorf("triggers: save state %s: %w", id, err)
	}
	return res[0].Doc.Version, res[0].Doc.Seq, nil
}

// stateWrite is the write that stores st for trigger id if its stored
// version is still version (0 = must not exist).
func stateWrite(id string, st *state, version int64) (collections.Write, error) {
	data, err := encodeState(st)
	if err != nil {
		return collections.Write{}, err
	}
	w := collections.Write{Type: collections.WriteCreate, Path: statePath(id), Data: data}
	if version > 0 {
		w.Type = collections.WriteReplace
		w.IfMatch = []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: version}}
	}
	return w, nil
}

// readState reads one state document (nil, 0 when absent).
func readState(ctx context.Context, s collections.Store, id string) (*state, int64, error) {
	st, doc, err := readStateDoc(ctx, s, id)
	if st == nil {
		return nil, 0, err
	}
	return st, doc.Version, nil
}

// readStateDoc reads one state document and decodes it (nil, nil when
// absent).
func readStateDoc(ctx context.Context, s collections.Store, id string) (*state, *collections.Document, error) {
	doc, err := s.Get(ctx, SystemDB, statePath(id))
	if errors.Is(err, collections.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := decodeState(doc)
	if err != nil {
		return nil, nil, err
	}
	return &st, doc, nil
}
