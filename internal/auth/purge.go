package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/loomdb/loom/collections"
)

// purgePage bounds how many expired tokens one query (and one commit) takes.
const purgePage = 500

// PurgeExpired deletes refresh tokens and console sessions that have
// expired and returns how many it deleted. Sessions that end without a
// logout leave their token behind; the Service runs this every hour, so
// callers rarely need to. (A console session's expiresAt is the earlier of
// its idle and absolute ends, so one filter finds both.)
func (s *Service) PurgeExpired(ctx context.Context) (int, error) {
	cutoff := json.Number(strconv.FormatInt(s.now().UnixMilli(), 10))
	expired := collections.Filter{Field: fieldExpiresAt, Op: collections.OpLe, Value: cutoff}
	n, err := s.deleteRefreshTokens(ctx, expired)
	if err != nil {
		return n, fmt.Errorf("auth: purge: %w", err)
	}
	m, err := s.deleteMatching(ctx, colConsoleSessions, &expired)
	if err != nil {
		return n + m, fmt.Errorf("auth: purge console sessions: %w", err)
	}
	return n + m, nil
}

// deleteRefreshTokens deletes the refresh tokens that match f (see
// deleteMatching; PurgeExpired, RevokeSessions).
func (s *Service) deleteRefreshTokens(ctx context.Context, f collections.Filter) (int, error) {
	return s.deleteMatching(ctx, colRefresh, &f)
}

// deleteMatching deletes the documents of a system collection that match
// f (all of them when f is nil), purgePage per commit, and returns how
// many it deleted. A token refreshed or logged out meanwhile is gone
// already, which is what the callers want.
func (s *Service) deleteMatching(ctx context.Context, collection string, f *collections.Filter) (int, error) {
	q := collections.Query{
		Collection: collection,
		Limit:      purgePage,
	}
	if f != nil {
		q.Filters = []collections.Filter{*f}
	}
	if err := q.Normalize(); err != nil {
		return 0, err
	}
	deleted := 0
	for {
		res, err := s.store.Query(ctx, s.db, q)
		if err != nil {
			return deleted, err
		}
		if len(res.Docs) == 0 {
			return deleted, nil
		}
		before := deleted
		writes := make([]collections.Write, len(res.Docs))
		for i, d := range res.Docs {
			writes[i] = collections.Write{Type: collections.WriteDelete, Path: d.Path}
		}
		if _, err := s.store.Commit(ctx, s.db, writes, collections.CommitOptions{}); err == nil {
			deleted += len(writes)
		} else if isGone(err) {
			// A token of the page was refreshed or logged out meanwhile;
			// delete the rest one by one.
			for _, w := range writes {
				_, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{})
				if err != nil && !isGone(err) {
					return deleted, err
				}
				if err == nil {
					deleted++
				}
			}
		} else {
			return deleted, err
		}
		// Deleted documents drop out of the query, so start over rather
		// than continue after a cursor; stop when a round made no progress.
		if res.NextCursor == "" || deleted == before {
			return deleted, nil
		}
	}
}

// purgeLoop runs PurgeExpired every purgeInterval until Close.
func (s *Service) purgeLoop() {
	defer s.wg.Done()
	t := time.NewTicker(purgeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			n, err := s.PurgeExpired(s.ctx)
			if err != nil && s.ctx.Err() == nil {
				// Best effort: the next round retries.
				s.log.Warn("purge expired refresh tokens and console sessions", "error", err)
			} else if n > 0 {
				s.log.Debug("purged expired refresh tokens and console sessions", "count", n)
			}
		}
	}
}
