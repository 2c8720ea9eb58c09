package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

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
	qs := r.URL.Query()
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
	p := subParams{db: qs.Get("database"), includeData: qs.Get("includeData") != "false"}
	if p.db == "" {
		p.db = "default"
	}
	p.query.Collection = qs.Get("collection")
	if f := qs.Get("filters"); f != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(f)))
		dec.UseNumber()
		if err := dec.Decode(&p.query.Filters); err != nil {
			s.writeError(c, errorf(http.StatusBadRequest, codeInvalidQuery, "filters must be a JSON array of {field, op, value}: %s.", truncate(err.Error(), 200)))
			return
		}
	}
	if err := p.query.Normalize(); err != nil {
		s.writeError(c, err)
		return
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = qs.Get("lastEventId")
	}
	if last != "" {
		if p.after, err = parseToken(last); err != nil {
			s.writeError(c, err)
			return
		}
		p.resume = true
	}
	rt := s.rt
	select {
	case <-rt.stop:
		s.writeError(c, errorf(http.StatusServiceUnavailable, codeUnavailable, "The server is shutting down."))
		return
	default:
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sub, err := s.openSubscription(ctx, caller, subKey(caller, s.clientAddr(c)), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	defer sub.Close()
	rt.connections.WithLabelValues("sse").Inc()
	defer rt.connections.WithLabelValues("sse").Dec()

	// A server-wide write timeout must not cut a healthy stream.
	rc := http.NewResponseController(c.Writer)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	w := c.Writer
	if _, err := w.WriteString(": connected\n\n"); err != nil {
		return
	}
	w.Flush()

	// One producer goroutine pulls events; this goroutine writes.
	type item struct {
		ev  realtime.Event
		err error
	}
	items := make(chan item, 16)
	go func() {
		defer close(items)
		for {
			ev, err := sub.Next(ctx)
			select {
			case items <- item{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range items { // let the producer finish
		}
	}()

	hb := time.NewTicker(rt.cfg.SSEHeartbeat)
	defer hb.Stop()
	// The stream ends when its token expires; EventSource reconnects with
	// Last-Event-ID and must bring a fresh token.
	expiry := time.NewTimer(untilExpiry(caller.expiry()))
	defer expiry.Stop()
	delivered := rt.delivered.WithLabelValues("sse")
	var buf bytes.Buffer
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			buf.Reset()
			if it.err != nil {
				if ctx.Err() != nil {
					return
				}
				msg, slow := endMessage(sseSubID, it.err)
				if slow {
					rt.slow.WithLabelValues("sse").Inc()
				}
				if msg != nil {
					buf.WriteString("data: ")
					buf.Write(msg)
					buf.WriteString("\n\n")
					_, _ = w.Write(buf.Bytes())
					w.Flush()
				}
				return
			}
			if it.ev.IsSnapshot() {
				continue // SSE has no snapshots
			}
			buf.WriteString("id: ")
			buf.WriteString(token(it.ev.Seq))
			buf.WriteString("\ndata: ")
			appendEvent(&buf, sseSubID, &it.ev, p.includeData)
			buf.WriteString("\n\n")
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			w.Flush()
			delivered.Inc()
		case <-hb.C:
			if _, err := w.WriteString(": heartbeat\n\n"); err != nil {
				return
			}
			w.Flush()
		case <-expiry.C:
			buf.Reset()
			buf.WriteString("data: ")
			buf.Write(errorMessage("", sseSubID, errTokenExpired))
			buf.WriteString("\n\n")
			_, _ = w.Write(buf.Bytes())
			w.Flush()
			return
		case <-rt.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}
