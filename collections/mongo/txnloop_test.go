package mongo

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// fakeSession scripts the outcomes of commitTransaction; a nil entry
// commits. An entry of errBlock waits for the context, as a
// commitTransaction waiting for a majority that never comes.
type fakeSession struct {
	commits          []error
	starts, aborts   int
	commitCalls      int
	abortCtxDeadline bool
}

var errBlock = errors.New("block")

func (f *fakeSession) StartTransaction(...options.Lister[options.TransactionOptions]) error {
	f.starts++
	return nil
}

func (f *fakeSession) CommitTransaction(ctx context.Context) error {
	f.commitCalls++
	var err error
	if len(f.commits) > 0 {
		err, f.commits = f.commits[0], f.commits[1:]
	}
	if err == errBlock {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *fakeSession) AbortTransaction(ctx context.Context) error {
	f.aborts++
	_, f.abortCtxDeadline = ctx.Deadline()
	return ctx.Err()
}

func labeled(label string) error {
	return mongo.CommandError{Code: 112, Name: "WriteConflict", Message: "conflict", Labels: []string{label}}
}

func TestInTransaction_Retries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A transient error of the callback runs it again, after an abort.
	f := &fakeSession{}
	calls := 0
	err := inTransaction(ctx, f, func(context.Context) error {
		calls++
		if calls < 3 {
			return labeled(labelTransient)
		}
		return nil
	})
	if err != nil || calls != 3 || f.starts != 3 || f.aborts != 2 || f.commitCalls != 1 {
		t.Errorf("transient callback: err=%v calls=%d starts=%d aborts=%d commits=%d, want nil 3 3 2 1", err, calls, f.starts, f.aborts, f.commitCalls)
	}
	if !f.abortCtxDeadline {
		t.Error("abortTransaction ran without a deadline")
	}

	// Any other callback error is returned at once, wrapped or not.
	f = &fakeSession{}
	plain := errors.New("plain")
	if err := inTransaction(ctx, f, func(context.Context) error { return plain }); !errors.Is(err, plain) || f.starts != 1 || f.aborts != 1 {
		t.Errorf("plain error: err=%v starts=%d aborts=%d", err, f.starts, f.aborts)
	}

	// An unknown commit result retries the commit alone; a transient one
	// runs the whole transaction again.
	f = &fakeSession{commits: []error{labeled(labelUnknownCommit), labeled(labelTransient), nil}}
	calls = 0
	err = inTransaction(ctx, f, func(context.Context) error { calls++; return nil })
	if err != nil || calls != 2 || f.commitCalls != 3 {
		t.Errorf("commit retries: err=%v calls=%d commits=%d, want nil 2 3", err, calls, f.commitCalls)
	}

	// A failing commit without a retry label is returned.
	f = &fakeSession{commits: []error{mongo.CommandError{Code: 2, Message: "bad"}}}
	if err := inTransaction(ctx, f, func(context.Context) error { return nil }); err == nil || f.commitCalls != 1 {
		t.Errorf("plain commit error: err=%v commits=%d", err, f.commitCalls)
	}
}

// A commitTransaction that waits for a majority forever ends with the
// context (Session.WithTransaction commits under a context without
// deadline and would wait forever, and with it the committer and Close).
func TestInTransaction_CommitBoundedByContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	f := &fakeSession{commits: []error{errBlock}}
	start := time.Now()
	err := inTransaction(ctx, f, func(context.Context) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err=%v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %v", d)
	}

	// A transient error after the deadline is not retried.
	ctx2, cancel2 := context.WithCancel(context.Background())
	f = &fakeSession{}
	calls := 0
	err = inTransaction(ctx2, f, func(context.Context) error {
		calls++
		cancel2()
		return labeled(labelTransient)
	})
	if calls != 1 || err == nil {
		t.Errorf("after cancel: calls=%d err=%v, want one call and an error", calls, err)
	}
}

func TestRetryBackoff(t *testing.T) {
	for n := 1; n < 20; n++ {
		if d := retryBackoff(n); d <= 0 || d > 100*time.Millisecond {
			t.Errorf("retryBackoff(%d)=%v", n, d)
		}
	}
}

func TestInTransaction_CallbackErrorMarked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ce *callbackError
	if err := inTransaction(ctx, &fakeSession{}, func(context.Context) error { return errors.New("x") }); !errors.As(err, &ce) {
		t.Errorf("callback error %v is not a *callbackError", err)
	}
	f := &fakeSession{commits: []error{mongo.CommandError{Code: 2, Message: "bad"}}}
	if err := inTransaction(ctx, f, func(context.Context) error { return nil }); errors.As(err, &ce) {
		t.Errorf("commit error %v is a *callbackError", err)
	}
}

type enderFunc func(ctx context.Context)

func (f enderFunc) EndSession(ctx context.Context) { f(ctx) }

func TestEndSession_Bounded(t *testing.T) {
	called := false
	endSession(enderFunc(func(ctx context.Context) {
		called = true
		if _, ok := ctx.Deadline(); !ok {
			t.Error("EndSession without a deadline: its abortTransaction could wait forever for a majority")
		}
	}))
	if !called {
		t.Error("EndSession not called")
	}
}
