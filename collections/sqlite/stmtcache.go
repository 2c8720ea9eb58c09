package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedQueries bounds the prepared query statements kept.
const maxCachedQueries = 512

// maxCachedQueryText bounds the SQL text of a kept statement: a request
// chooses the field names a query's text holds, so a longer text is
// prepared per call rather than kept.
const maxCachedQueryText = 8192

// stmtCache keeps prepared query statements by SQL text. Query shapes repeat
// (the same filters, order and limit), and preparing one — its JSON
// expressions matched against every declared index by the planner — costs
// more than running it. Past maxCachedQueries texts, new shapes are
// prepared per call; statements are never evicted, so none is closed while
// in use.
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt

	// plans are query plans by query shape (planFor).
	planMu sync.RWMutex
	plans  map[string]*plan
	// leading is set at Open and read-only after (setIndexes).
	leading map[string]bool
}

func (c *stmtCache) query(ctx context.Context, db *sql.DB, text string, args ...any) (*sql.Rows, error) {
	c.mu.Lock()
	st, full := c.m[text], len(c.m) >= maxCachedQueries || len(text) > maxCachedQueryText
	c.mu.Unlock()
	if st == nil {
		if full {
			return db.QueryContext(ctx, text, args...)
		}
		prepared, err := db.PrepareContext(ctx, text)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]*sql.Stmt{}
		}
		if st = c.m[text]; st == nil {
			st = prepared
			c.m[text] = st
		} else {
			prepared.Close() // another caller prepared it first
		}
		c.mu.Unlock()
	}
	return st.QueryContext(ctx, args...)
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}
