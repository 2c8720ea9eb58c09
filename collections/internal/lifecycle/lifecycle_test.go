package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestBeginAndRacedClose(t *testing.T) {
	var closed atomic.Bool
	if err := Begin(context.Background(), &closed); err != nil {
		t.Errorf("open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed.Store(true)
	if err := Begin(ctx, &closed); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context on a closed store: %v, want the context's error first", err)
	}
	if err := Begin(context.Background(), &closed); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
	if !RacedClose(&closed, errors.New("connection gone")) || RacedClose(&closed, context.DeadlineExceeded) {
		t.Error("RacedClose on a closed store: want true for the store's error, false for the context's")
	}
	closed.Store(false)
	if RacedClose(&closed, errors.New("boom")) {
		t.Error("RacedClose on an open store")
	}
}
