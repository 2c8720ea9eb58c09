package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
)

// rxdbWriteWait bounds one pullStream write: a client that does not drain
// its socket for this long is disconnected (it reconnects and re-pulls).
const rxdbWriteWait = 30 * time.Second

// rxdbPullStream answers GET .../pullStream: a text/event-stream with one
// `data: {"documents":[...],"checkpoint":{...}}` per committed batch of
// changes to the collection that the caller may read.
//
// The stream starts at the change-log head read before the response
// headers go out. rxdb-server's client re-pulls from its own checkpoint
// when the EventSource opens (it emits RESYNC on every onopen), and that
// pull covers everything up to at least this head; the stream then carries
// every change after it, so the two never leave a gap. The stream never
// sends "RESYNC" as data (the client would crash on it): to force a
// resync it ends, and the reconnect pulls again.
func (s *Server) rxdbPullStream(c *gin.Context, t *rxdbTarget) {
	if err := s.checkList(t.caller, t.collection); err != nil {
		s.writeError(c, err)
		return
	}
	done := s.openStream(c, t.caller)
	if done == nil {
		return
	}
	defer done()
	ctx := c.Request.Context()
	// Take the notification channel before reading the head, so a commit
	// between the two is not missed.
	notify := s.store.Notify()
	head, err := s.store.Head(ctx)
	if err != nil {
		s.writeError(c, err)
		return
	}
	// Every document whose last change is after head: seq >= head+1 (ids are
	// never empty).
	cp := collections.Checkpoint{Seq: head + 1}

	w := c.Writer
	rc := http.NewResponseController(w)
	// A stream is long-lived by design: no server-wide write deadline may
	// cut it. Each write gets its own instead, so a peer that stops reading
	// is dropped (and shutdown is never stuck behind a blocked write).
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.writeError(c, err)
		return
	}
	send := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(rxdbWriteWait)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !send([]byte(": connected\n\n")) {
		return
	}

	heartbeat := time.NewTicker(s.rxdb.Heartbeat)
	defer heartbeat.Stop()
	stop := s.rt.stop // closed when Serve shuts down
	buf := getBuf()
	defer putBuf(buf)
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-heartbeat.C:
			if !send([]byte(":\n\n")) {
				return
			}
			continue
		case <-notify:
		}
		notify = s.store.Notify()
		for more := true; more; {
			// The token may have expired since the stream opened: end the
			// stream, the client reconnects and sees the 401.
			caller := t.caller
			if caller.Kind != kindAdminKey {
				if caller, err = s.resolveCaller(c.Request); err != nil {
					return
				}
			}
			var docs []*collections.Document
			docs, cp, more, err = s.rxdbChanges(ctx, caller, t.db, t.collection, cp, DefaultRxDBLimit)
			if err != nil {
				if ctx.Err() == nil {
					s.log.WarnContext(ctx, "rxdb pullStream ended", "collection", t.collection, "err", err)
				}
				return
			}
			if len(docs) == 0 {
				continue
			}
			buf.Reset()
			buf.WriteString("data: ")
			if err := appendRxDBBatch(buf, docs, cp); err != nil {
				s.log.ErrorContext(ctx, "rxdb pullStream encode", "collection", t.collection, "err", err)
				return
			}
			buf.WriteString("\n\n")
			if !send(buf.Bytes()) {
				return
			}
		}
	}
}
