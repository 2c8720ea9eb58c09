package mongo

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Notify returns a channel closed after the next commit that appends to the
// change log, on this node or any other.
func (s *Store) Notify() <-chan struct{} { return s.notify.C() }

func (s *Store) wake() { s.notify.Wake() }

// openStream opens the change stream on the change log's inserts, resuming
// after token when it is not nil.
func (s *Store) openStream(ctx context.Context, token bson.Raw) (*mongo.ChangeStream, error) {
	pipeline := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "operationType", Value: "insert"}}}},
		{{Key: "$project", Value: bson.D{{Key: "_id", Value: 1}}}}}
	opts := options.ChangeStream().SetMaxAwaitTime(pollInterval)
	if token != nil {
		opts.SetResumeAfter(token)
	}
	cs, err := s.changes.Watch(ctx, pipeline, opts)
	if err != nil {
		return nil, err
	}
	s.streamUp.Store(true)
	return cs, nil
}

// watch wakes Notify waiters on every change-log insert of any node. When
// the stream fails it resumes from its resume token (or from now, with a
// wake, when the token is too old), and while it is down it polls Head.
func (s *Store) watch(cs *mongo.ChangeStream) {
	defer s.bg.Done()
	var token bson.Raw
	var lastHead int64
	for {
		opened := time.Now()
		for cs.Next(s.ctx) {
			token = cs.ResumeToken()
			// One wake per batch of events (a transaction's changes
			// usually arrive together): waiters re-read the whole log.
			if cs.RemainingBatchLength() == 0 {
				s.wake()
			}
		}
		if t := cs.ResumeToken(); t != nil {
			token = t // advanced by empty batches too
		}
		err := cs.Err()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cs.Close(cctx) //nolint:errcheck // replaced below; bounded, so Close never waits on a dead server
		cancel()
		s.streamUp.Store(false)
		if s.ctx.Err() != nil {
			return
		}
		if historyLost(err) {
			// Resuming from this token can only fail again (the server
			// may report it on a getMore rather than on the aggregate that
			// opens the stream): start from now, after the wake below.
			token = nil
		}
		s.log.Warn("change stream failed; resuming", "err", scrub(err, s.cfg.URI))
		s.wake() // something may have been missed
		if d := time.Since(opened); d < pollInterval {
			// A stream that fails at once is not reopened in a tight loop.
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(pollInterval - d):
			}
		}
		for {
			var oerr error
			if cs, oerr = s.openStream(s.ctx, token); oerr == nil {
				break
			}
			if token != nil {
				// The token may have fallen off the oplog: start from now.
				// Waiters re-read the log, so nothing is lost.
				token = nil
				if cs, oerr = s.openStream(s.ctx, nil); oerr == nil {
					s.wake()
					break
				}
			}
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn("change stream unavailable; polling Head", "err", scrub(oerr, s.cfg.URI))
			if h, err := s.readHead(s.ctx); err == nil && h != lastHead {
				lastHead = h
				s.wake()
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(pollInterval):
			}
		}
	}
}

// historyLost reports whether a change stream error means its resume point
// is gone for good: ChangeStreamHistoryLost (286, the token fell off the
// oplog), ChangeStreamFatalError (280) or InvalidResumeToken (260).
func historyLost(err error) bool {
	return hasCode(err, 286) || hasCode(err, 280) || hasCode(err, 260)
}
