package triggers

import (
	"slices"
	"sync"

	"github.com/loomdb/loom/collections"
)

// Event is one change as a trigger sees it: the CEL variable `event` and
// the "event" object of the webhook body. Build it with NewEvent and do not
// modify it afterwards: Map caches its result.
type Event struct {
	Type       string // create|update|delete
	Database   string
	Collection string
	Path       string
	ID         string // document id
	Params     map[string]string
	// Document is the envelope map {id, collection, path, version,
	// createdAt, updatedAt, data}; the last state (before) on delete.
	Document map[string]any
	// Before has the same shape; nil on create.
	Before map[string]any
	// ChangedFields are the top-level user fields whose value differs
	// between before and after (create: all fields of after; delete: all
	// fields of before), sorted.
	ChangedFields []string
	Timestamp     int64 // commit time, unix ms

	once sync.Once
	m    map[string]any
}

// NewEvent describes ch for triggers; params are the pattern captures (may
// be nil). The envelope maps share the documents' Data maps.
func NewEvent(ch *collections.Change, params map[string]string) *Event {
	e := &Event{
		Type:      string(ch.Op),
		Database:  ch.DB,
		Path:      ch.Path,
		Params:    params,
		Timestamp: ch.Time,
	}
	cur := ch.After
	if ch.Op == collections.OpDelete && ch.Before != nil {
		cur = ch.Before
	}
	if cur == nil {
		cur = ch.Before
	}
	if cur != nil {
		e.Collection, e.ID = cur.Collection, cur.ID
		e.Document = envelope(cur)
	}
	if e.Collection == "" || e.ID == "" {
		e.Collection, e.ID = collections.SplitDocPath(ch.Path)
	}
	if e.Path == "" && cur != nil {
		e.Path = cur.Path
	}
	if ch.Op != collections.OpCreate && ch.Before != nil {
		e.Before = envelope(ch.Before)
	}
	var before, after map[string]any
	if ch.Before != nil {
		before = ch.Before.Data
	}
	if ch.After != nil && ch.Op != collections.OpDelete {
		after = ch.After.Data
	}
	switch ch.Op {
	case collections.OpCreate:
		e.ChangedFields = keys(after)
	case collections.OpDelete:
		e.ChangedFields = keys(before)
	default:
		e.ChangedFields = changed(before, after)
	}
	return e
}

// envelope is the map form of d: {id, collection, path, version, createdAt,
// updatedAt, data}.
func envelope(d *collections.Document) map[string]any {
	data := d.Data
	if data == nil {
		data = map[string]any{}
	}
	return map[string]any{
		"id":         d.ID,
		"collection": d.Collection,
		"path":       d.Path,
		"version":    d.Version,
		"createdAt":  d.CreatedAt,
		"updatedAt":  d.UpdatedAt,
		"data":       data,
	}
}

// keys returns m's keys, sorted. Unlike slices.Sorted(maps.Keys(m)) it
// never returns nil: an empty document's ChangedFields is [], as changed's.
func keys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// changed lists the keys present in only one of a and b, or with values
// that are not JSON-equal (numbers compare numerically), sorted.
func changed(a, b map[string]any) []string {
	ks := []string{}
	for k, v := range a {
		if w, ok := b[k]; !ok || !collections.Equal(v, w) {
			ks = append(ks, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// Map returns the JSON shape of the event: {"type", "database",
// "collection", "path", "id", "params", "document", "before",
// "changedFields", "timestamp"}, with JSON-compatible values only (strings,
// int64, json.Number, bools, nil, map[string]any, []any), suitable for
// json.Marshal and for storage in a document. The map is built once and
// shared (also with the CEL evaluation): do not modify it.
func (e *Event) Map() map[string]any {
	e.once.Do(func() {
		params := make(map[string]any, len(e.Params))
		for k, v := range e.Params {
			params[k] = v
		}
		cf := make([]any, len(e.ChangedFields))
		for i, f := range e.ChangedFields {
			cf[i] = f
		}
		var doc, before any // untyped nil for JSON null
		if e.Document != nil {
			doc = e.Document
		}
		if e.Before != nil {
			before = e.Before
		}
		e.m = map[string]any{
			"type":          e.Type,
			"database":      e.Database,
			"collection":    e.Collection,
			"path":          e.Path,
			"id":            e.ID,
			"params":        params,
			"document":      doc,
			"before":        before,
			"changedFields": cf,
			"timestamp":     e.Timestamp,
		}
	})
	return e.m
}
