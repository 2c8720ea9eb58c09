package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server/realtime"
)

// rxdbWriteWait bounds one pullStream write: a client that does not drain
// its socket for this long is disconnected (it reconnects and re-pulls).
const rxdbWriteWait = 30 * time.Second

// rxdbPullStream answers GET .../pullStream: a text/event-stream with one
// `data: {"documents":[...],"checkpoint":{...}}` per batch of committed
// changes to the collection that the caller may read.
//
// The stream is a subscription of the realtime hub, like WebSocket and SSE:
// a commit costs one dispatch per stream of its collection, not a change-log
// query per open stream. It counts towards the subscription bounds.
//
// The stream starts at the change-log head read before the response
// headers go out. rxdb-server's client re-pulls from its own checkpoint
// when the EventSource opens (it emits RESYNC on every onopen), and that
// pull covers everything up to at least this head; the stream then carries
// every change after it, so the two never leave a gap. The stream never
// sends "RESYNC" as data (the client would crash on it): to force a
// resync it ends, and the reconnect pulls again. It ends when the token
// expires or is revoked (the reconnect then sees the 401), when the hub
// ends the subscription (slow consumer, change log purged past it) and at
// shutdown.
func (s *Server) rxdbPullStream(c *gin.Context, t *rxdbTarget) {
	if err := s.access.CheckList(t.caller, t.collection); err != nil {
		s.writeError(c, err)
		return
	}
	done := s.openStream(c, t.caller)
	if done == nil {
		return
	}
	defer done()
	if s.refuseWhenStopping(c) {
		return
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	sub, head, err := s.rxdbSubscribe(ctx, c, t)
	if err != nil {
		s.writeError(c, err)
		return
	}
	defer sub.Close()

	out := &rxdbStreamWriter{w: c.Writer, rc: http.NewResponseController(c.Writer)}
	// A stream is long-lived by design: no server-wide write deadline may
	// cut it. Each write gets its own instead, so a peer that stops reading
	// is dropped (and shutdown is never stuck behind a blocked write).
	if err := out.rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.writeError(c, err)
		return
	}
	if !out.start() {
		return
	}

	// One producer goroutine reads the subscription and applies the rules;
	// this goroutine writes.
	batches := make(chan rxdbEvent, 4)
	go s.rxdbBatches(ctx, sub, t.caller, t.db, head, batches)
	defer func() {
		cancel()
		for range batches { // let the producer finish
		}
	}()
	s.rxdbStreamLoop(ctx, c.Request, t, out, batches)
}

// rxdbSubscribe reads the change-log head and subscribes to the
// collection's changes after it, the rules left to rxdbBatches.
func (s *Server) rxdbSubscribe(ctx context.Context, c *gin.Context, t *rxdbTarget) (*heldSub, int64, error) {
	head, err := s.store.Head(ctx)
	if err != nil {
		return nil, 0, err
	}
	p := subParams{db: t.db, query: collections.Query{Collection: t.collection}, resume: true, after: head, ownRules: true}
	if err := p.query.Normalize(); err != nil {
		return nil, 0, err
	}
	sub, err := s.openSubscription(ctx, t.caller, subKey(t.caller, s.clientAddr(c)), p)
	if err != nil {
		return nil, 0, err
	}
	return sub, head, nil
}

// rxdbStreamWriter writes a pullStream, each write under its own deadline.
type rxdbStreamWriter struct {
	w  gin.ResponseWriter
	rc *http.ResponseController
}

// start sends the event-stream headers and a first comment; false if the
// peer is gone.
func (o *rxdbStreamWriter) start() bool {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	o.w.WriteHeader(http.StatusOK)
	return o.send([]byte(": connected\n\n"))
}

// send writes and flushes b within rxdbWriteWait; false if it could not.
func (o *rxdbStreamWriter) send(b []byte) bool {
	if err := o.rc.SetWriteDeadline(time.Now().Add(rxdbWriteWait)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	if _, err := o.w.Write(b); err != nil {
		return false
	}
	return o.rc.Flush() == nil
}

// rxdbStreamLoop writes the batches as events, with a heartbeat in
// between, until the hub ends the subscription, the client goes, the
// token expires or is revoked, or the server shuts down.
func (s *Server) rxdbStreamLoop(ctx context.Context, r *http.Request, t *rxdbTarget, out *rxdbStreamWriter, batches <-chan rxdbEvent) {
	heartbeat := time.NewTicker(s.rxdb.Heartbeat)
	defer heartbeat.Stop()
	// The token may expire while the stream is open: end it then, the
	// client reconnects and sees the 401.
	expiry := time.NewTimer(untilExpiry(t.caller.Expiry()))
	defer expiry.Stop()
	buf := getBuf()
	defer putBuf(buf)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.rt.stop: // Serve is shutting down
			return
		case <-expiry.C:
			return
		case <-heartbeat.C:
			if !s.rxdbHeartbeat(r, t.caller, out) {
				return
			}
		case ev, ok := <-batches:
			if !ok {
				return
			}
			if ev.err != nil {
				s.rxdbStreamEnded(ctx, t.collection, ev.err)
				return
			}
			if !s.rxdbSendBatch(ctx, out, buf, t.collection, ev) {
				return
			}
		}
	}
}

// rxdbHeartbeat checks the credential again (recheckCredential) and sends
// a comment; false when the stream must end. The reconnect then sees the
// 401.
func (s *Server) rxdbHeartbeat(r *http.Request, caller *access.Caller, out *rxdbStreamWriter) bool {
	if s.recheckCredential(r, caller) != nil {
		return false
	}
	return out.send([]byte(":\n\n"))
}

// rxdbSendBatch writes one batch as `data: {"documents":[...],
// "checkpoint":{...}}`; false when the stream must end.
func (s *Server) rxdbSendBatch(ctx context.Context, out *rxdbStreamWriter, buf *bytes.Buffer, collection string, ev rxdbEvent) bool {
	buf.Reset()
	buf.WriteString("data: ")
	if err := appendRxDBBatch(buf, ev.docs, ev.cp); err != nil {
		s.log.ErrorContext(ctx, "rxdb pullStream encode", "collection", collection, "err", err)
		return false
	}
	buf.WriteString("\n\n")
	return out.send(buf.Bytes())
}

// rxdbStreamEnded logs why the hub ended a pullStream, unless it is an
// expected end (the client reconnects and re-pulls in every case).
func (s *Server) rxdbStreamEnded(ctx context.Context, collection string, err error) {
	var slow *realtime.SlowConsumerError
	switch {
	case ctx.Err() != nil, errors.Is(err, realtime.ErrClosed):
	case errors.As(err, &slow), errors.Is(err, realtime.ErrReset):
		s.log.InfoContext(ctx, "rxdb pullStream fell behind; the client re-pulls", "collection", collection, "err", err)
	default:
		s.log.WarnContext(ctx, "rxdb pullStream ended", "collection", collection, "err", err)
	}
}

// rxdbEvent is one pullStream event, or the error that ends the stream.
type rxdbEvent struct {
	docs []*collections.Document
	cp   collections.Checkpoint
	err  error
}

// rxdbBatches turns the subscription's changes into pullStream events on
// out, which it closes when the subscription ends. Each event holds the
// changes ready at once, up to DefaultRxDBLimit document states.
//
// The rules are those of pull: a change is sent as the document's state
// after it (a tombstone for a delete) when the caller may list that state,
// and is skipped otherwise — a document that becomes unreadable is not
// sent, exactly as a pull would not return it. The state before the change
// is never sent and no event type tells anything about it, so unlike
// WebSocket events it needs no check of its own. The checkpoint moves as
// pull's does (rxdbCursor), so it never names a hidden document.
func (s *Server) rxdbBatches(ctx context.Context, sub *heldSub, caller *access.Caller, db string, head int64, out chan<- rxdbEvent) {
	defer close(out)
	emit := func(ev rxdbEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// Every document whose last change is after head: seq >= head+1 (ids
	// are never empty).
	cur := rxdbCursor{next: collections.Checkpoint{Seq: head + 1}}
	for {
		ev, err := sub.Next(ctx)
		var b rxdbStreamBatch
		for err == nil {
			d := ev.Change.After
			ok, rerr := s.access.Readable(ctx, caller, db, rules.OpList, d)
			if rerr != nil {
				err = rerr
				break
			}
			cur.examine(d, ok)
			if ok {
				b.add(d)
			}
			if b.full() {
				break
			}
			var ready bool
			if ev, ready, err = sub.TryNext(ctx); !ready && err == nil {
				break
			}
		}
		if b.n > 0 && !emit(rxdbEvent{docs: b.documents(), cp: cur.next}) {
			return
		}
		if err != nil {
			emit(rxdbEvent{err: err})
			return
		}
	}
}

// rxdbStreamBatch collects the documents of one pullStream event, each
// once: a document changed twice in a batch is sent in its later state, at
// that state's place (the (seq, id) order a pull returns). RxDB writes a
// batch in one bulk write, which must not name a document twice.
type rxdbStreamBatch struct {
	docs []*collections.Document // nil where a later state replaced one
	at   map[string]int          // id → index in docs
	n    int                     // documents (non-nil entries)
}

func (b *rxdbStreamBatch) add(d *collections.Document) {
	if i, ok := b.at[d.ID]; ok {
		b.docs[i] = nil
		b.n--
	}
	if b.at == nil {
		b.at = map[string]int{}
	}
	b.at[d.ID] = len(b.docs)
	b.docs = append(b.docs, d)
	b.n++
}

// full reports whether the batch must be sent before it takes another
// change. It counts the states held, replaced ones included: counting
// documents alone, a document changed without pause would grow the batch
// (and delay its sending) without bound.
func (b *rxdbStreamBatch) full() bool { return len(b.docs) >= DefaultRxDBLimit }

func (b *rxdbStreamBatch) documents() []*collections.Document {
	if b.n == len(b.docs) {
		return b.docs
	}
	out := make([]*collections.Document, 0, b.n)
	for _, d := range b.docs {
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}
