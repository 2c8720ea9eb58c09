package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/server/realtime"
)

// sseSubID is the subId of SSE events (one subscription per stream).
const sseSubID = "sse"

// queryToken lets an event stream carry its token in the query
// (?access_token=): EventSource cannot send headers. A header wins.
func queryToken(r *http.Request) {
	if tok := r.URL.Query().Get("access_token"); tok != "" && r.Header.Get("Authorization") == "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
}

// serveSSE streams one subscription as Server-Sent Events: "id: <token>" and
// "data: <the WebSocket event message>" per event, so Last-Event-ID resumes.
// A SLOW_CONSUMER error or a reset is sent as data and ends the stream.
func (s *Server) serveSSE(c *gin.Context) {
	r := c.Request
	queryToken(r)
	caller, err := s.resolveCaller(r)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if !s.allowRate(c, caller) {
		return
	}
	done := s.openStream(c, caller)
	if done == nil {
		return
	}
	defer done()
	p, err := sseParams(r, c.Param("db"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	if s.refuseWhenStopping(c) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sub, err := s.openSubscription(ctx, caller, subKey(caller, s.clientAddr(c)), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	defer sub.Close()
	s.rt.connections.WithLabelValues("sse").Inc()
	defer s.rt.connections.WithLabelValues("sse").Dec()

	if !startSSE(c) {
		return
	}
	items := sseItems(ctx, sub)
	defer func() {
		cancel()
		for range items { // let the producer finish
		}
	}()
	s.streamSSE(ctx, c.Writer, r, caller, items, p.includeData)
}

// sseParams reads the subscription from the query: database (default
// "default"), collection, filters (a JSON array), includeData, and the
// resume token from Last-Event-ID (or ?lastEventId=). pathDB is the
// database of /realtime/v1/databases/:db/sse ("" on /realtime/sse); a
// ?database= that names another one is refused rather than silently
// ignored. Errors are *apiError or the query's own validation errors.
func sseParams(r *http.Request, pathDB string) (subParams, error) {
	qs := r.URL.Query()
	p := subParams{db: qs.Get("database"), includeData: qs.Get("includeData") != "false"}
	if pathDB != "" {
		if p.db != "" && p.db != pathDB {
			return p, errorf(http.StatusBadRequest, codeBadRequest, "The database is %q in the path but %q in ?database=; leave the parameter out.", truncate(pathDB, 80), truncate(p.db, 80))
		}
		p.db = pathDB
	}
	if p.db == "" {
		p.db = "default"
	}
	p.query.Collection = qs.Get("collection")
	if f := qs.Get("filters"); f != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(f)))
		dec.UseNumber()
		if err := dec.Decode(&p.query.Filters); err != nil {
			return p, errorf(http.StatusBadRequest, codeInvalidQuery, "filters must be a JSON array of {field, op, value}: %s.", truncate(err.Error(), 200))
		}
	}
	if err := p.query.Normalize(); err != nil {
		return p, err
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = qs.Get("lastEventId")
	}
	if last != "" {
		var err error
		if p.after, err = parseToken(last); err != nil {
			return p, err
		}
		p.resume = true
	}
	return p, nil
}

// startSSE sends the event-stream headers and a first comment, so the
// client sees the stream open before any event; false if the peer is gone.
func startSSE(c *gin.Context) bool {
	// A server-wide write timeout must not cut a healthy stream.
	rc := http.NewResponseController(c.Writer)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	if _, err := c.Writer.WriteString(": connected\n\n"); err != nil {
		return false
	}
	c.Writer.Flush()
	return true
}

// sseItem is one event of the subscription, or the error that ends it.
type sseItem struct {
	ev  realtime.Event
	err error
}

// sseItems starts the producer: one goroutine pulls the subscription's
// events while the handler's goroutine writes them. The channel closes
// after the first error or once ctx is done.
func sseItems(ctx context.Context, sub *heldSub) <-chan sseItem {
	items := make(chan sseItem, 16)
	go func() {
		defer close(items)
		for {
			ev, err := sub.Next(ctx)
			select {
			case items <- sseItem{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return items
}

// streamSSE writes items as events, with a heartbeat comment in between,
// until the subscription ends, the client goes, the token expires or is
// revoked (r carries it: recheckCredential), or the server shuts down.
func (s *Server) streamSSE(ctx context.Context, w gin.ResponseWriter, r *http.Request, caller *access.Caller, items <-chan sseItem, includeData bool) {
	rt := s.rt
	hb := time.NewTicker(rt.cfg.SSEHeartbeat)
	defer hb.Stop()
	// The stream ends when its token expires; EventSource reconnects with
	// Last-Event-ID and must bring a fresh token.
	expiry := time.NewTimer(untilExpiry(caller.Expiry()))
	defer expiry.Stop()
	delivered := rt.delivered.WithLabelValues("sse")
	var buf bytes.Buffer
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			if it.err != nil {
				s.endSSE(ctx, w, &buf, it.err)
				return
			}
			if it.ev.IsSnapshot() {
				continue // SSE has no snapshots
			}
			if !writeSSEEvent(w, &buf, &it.ev, includeData) {
				return
			}
			delivered.Inc()
		case <-hb.C:
			if err := s.recheckCredential(r, caller); err != nil {
				writeSSEData(w, &buf, s.errorMessage("", sseSubID, err))
				return
			}
			if _, err := w.WriteString(": heartbeat\n\n"); err != nil {
				return
			}
			w.Flush()
		case <-expiry.C:
			writeSSEData(w, &buf, s.errorMessage("", sseSubID, errTokenExpired))
			return
		case <-rt.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// writeSSEEvent writes one event with its resume token as the event id;
// false if the peer is gone.
func writeSSEEvent(w gin.ResponseWriter, buf *bytes.Buffer, ev *realtime.Event, includeData bool) bool {
	buf.Reset()
	buf.WriteString("id: ")
	buf.WriteString(token(ev.Seq))
	buf.WriteString("\ndata: ")
	appendEvent(buf, sseSubID, ev, includeData)
	buf.WriteString("\n\n")
	if _, err := w.Write(buf.Bytes()); err != nil {
		return false
	}
	w.Flush()
	return true
}

// endSSE tells the client why the hub ended its subscription (a slow
// consumer, a reset), unless the request itself is over.
func (s *Server) endSSE(ctx context.Context, w gin.ResponseWriter, buf *bytes.Buffer, err error) {
	if ctx.Err() != nil {
		return
	}
	msg, slow := s.endMessage(sseSubID, err)
	if slow {
		s.rt.slow.WithLabelValues("sse").Inc()
	}
	if msg != nil {
		writeSSEData(w, buf, msg)
	}
}

// writeSSEData writes msg as the last, id-less event of a stream; the
// stream ends after it, so a write error needs no answer.
func writeSSEData(w gin.ResponseWriter, buf *bytes.Buffer, msg []byte) {
	buf.Reset()
	buf.WriteString("data: ")
	buf.Write(msg)
	buf.WriteString("\n\n")
	_, _ = w.Write(buf.Bytes())
	w.Flush()
}
