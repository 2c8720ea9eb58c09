package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// testContext: Commit and Get with an already-cancelled context return
// context.Canceled promptly.
func testContext(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	h.mustCommit(db, h.create("ctx/a", `{}`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Commit", func() error {
			_, err := h.s.Commit(ctx, db, []collections.Write{h.create("ctx/b", `{}`)}, collections.CommitOptions{})
			return err
		}},
		{"Get", func() error {
			_, err := h.s.Get(ctx, db, "ctx/a")
			return err
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.call() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: err=%v, want context.Canceled", tc.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s with a cancelled context did not return within 5s", tc.name)
		}
	}
}
