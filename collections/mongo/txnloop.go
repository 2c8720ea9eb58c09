package mongo

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// txnSession is the part of *mongo.Session the transaction loop uses (a
// fake stands in for it in unit tests).
type txnSession interface {
	StartTransaction(opts ...options.Lister[options.TransactionOptions]) error
	CommitTransaction(ctx context.Context) error
	AbortTransaction(ctx context.Context) error
}

// Error labels of the transactions specification.
const (
	labelTransient     = "TransientTransactionError"
	labelUnknownCommit = "UnknownTransactionCommitResult"
)

// abortTimeout bounds the abortTransaction sent after a failed attempt.
const abortTimeout = 5 * time.Second

// inTransaction runs fn in a transaction of sess, as Session.WithTransaction
// does (the whole callback again after a TransientTransactionError,
// commitTransaction again after an UnknownTransactionCommitResult), with one
// difference: every step, commitTransaction included, is bounded by ctx.
// WithTransaction commits under a context without deadline, and its first
// commitTransaction carries the transaction's write concern without
// wtimeout (go.mongodb.org/mongo-driver/v2 mongo/session.go), so while no
// majority can acknowledge, it waits forever and with it the committer and
// Close. ctx must carry a deadline. When it expires during a commit the
// outcome is unknown: the error is returned and the writes may have
// committed. Retries of the callback back off a little, with jitter, so
// committers of several nodes that conflict on the counter do not retry in
// lockstep. An error of fn (or ctx ending before the commit) comes back as
// a *callbackError: nothing committed.
func inTransaction(ctx context.Context, sess txnSession, fn func(context.Context) error,
	opts ...options.Lister[options.TransactionOptions]) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, retryBackoff(attempt)); err != nil {
				return err
			}
		}
		if err := sess.StartTransaction(opts...); err != nil {
			return err
		}
		err := fn(ctx)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
			_ = sess.AbortTransaction(actx) // the server also aborts it on its own
			cancel()
			if ctx.Err() == nil && hasLabel(err, labelTransient) {
				continue
			}
			return &callbackError{err}
		}
		for {
			err = sess.CommitTransaction(ctx)
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			var ce mongo.CommandError
			if hasLabel(err, labelUnknownCommit) && !(errors.As(err, &ce) && ce.IsMaxTimeMSExpiredError()) {
				// commitTransaction is idempotent.
				if err := sleepCtx(ctx, retryBackoff(1)); err != nil {
					return err
				}
				continue
			}
			if hasLabel(err, labelTransient) {
				break // the transaction was aborted whole: run it again
			}
			return err
		}
	}
}

// hasLabel reports whether err carries a driver error label.
func hasLabel(err error, label string) bool {
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel(label)
}

// retryBackoff is the pause before retry attempt n (n >= 1): up to 2^n ms
// with jitter, at most 100 ms.
func retryBackoff(n int) time.Duration {
	ceil := time.Duration(1) << min(n, 7) * time.Millisecond
	return min(ceil/2+rand.N(ceil/2+1), 100*time.Millisecond)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callbackError is an error of the transaction's callback (or its context
// ending before the commit): the transaction was aborted before
// commitTransaction was sent, so nothing of it committed.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// sessionEnder is the part of *mongo.Session endSession uses.
type sessionEnder interface{ EndSession(ctx context.Context) }

// endSession ends a transaction's session within abortTimeout. After a
// commitTransaction cut off by the deadline the driver still counts the
// transaction in progress, and EndSession aborts it with the transaction's
// write concern (majority, no wtimeout): under a context without deadline
// that abort would wait, like the commit, for a majority that may never
// come.
func endSession(sess sessionEnder) {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	sess.EndSession(ctx)
}
