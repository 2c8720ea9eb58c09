package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/server/realtime"
)

// wsConn is one WebSocket connection. The handler goroutine reads; one
// writer goroutine owns every write (gorilla allows one concurrent writer);
// each subscription has a forwarder goroutine that moves its events into
// the bounded outbound queue. A full outbound queue blocks the forwarders,
// which lets the subscription's queue in the hub fill: that, and only that,
// ends a subscription with SLOW_CONSUMER.
type wsConn struct {
	s      *Server
	rt     *realtimeServer
	ws     *websocket.Conn
	bc     *bufConn
	req    *http.Request
	ctx    context.Context
	cancel context.CancelFunc
	out    chan []byte

	closeOnce sync.Once
	closing   chan struct{} // asks the writer to flush, send closeFrame and close
	closeMsg  []byte

	// Reader goroutine only.
	caller *Caller
	db     string
	subs   map[string]*wsSub
	bad    int
}

type wsSub struct {
	sub    *realtime.Subscription
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Server) serveWS(c *gin.Context) {
	rt := s.rt
	caller, err := s.resolveCaller(c.Request)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if !s.allowRate(c, caller) {
		return
	}
	db := c.Query("database")
	if db == "" {
		db = "default"
	}
	if !validDatabase(db) {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q.", truncate(db, 80)))
		return
	}
	select {
	case <-rt.stop:
		s.writeError(c, errorf(http.StatusServiceUnavailable, codeUnavailable, "The server is shutting down."))
		return
	default:
	}
	up := websocket.Upgrader{
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		CheckOrigin:     func(r *http.Request) bool { return s.originAllowed(r, r.Header.Get("Origin")) },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			code := codeBadRequest
			if status == http.StatusForbidden {
				code = codePermissionDenied
			}
			s.writeError(c, errorf(status, code, "WebSocket upgrade failed: %v.", reason))
		},
	}
	hw := &hijackBuffer{ResponseWriter: c.Writer}
	ws, err := up.Upgrade(hw, c.Request, nil)
	if err != nil {
		return // Error wrote the response
	}
	if hw.conn == nil || hw.conn.Flush() != nil { // the 101 response
		ws.Close()
		return
	}
	rt.conns.Add(1)
	defer rt.conns.Done()
	rt.connections.WithLabelValues("ws").Inc()
	defer rt.connections.WithLabelValues("ws").Dec()

	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request.Context()))
	conn := &wsConn{
		s: s, rt: rt, ws: ws, req: c.Request, ctx: ctx, cancel: cancel,
		bc:      hw.conn,
		out:     make(chan []byte, rt.cfg.OutboundQueue),
		closing: make(chan struct{}),
		caller:  caller, db: db,
		subs: map[string]*wsSub{},
	}
	ws.SetReadLimit(wsReadLimit)
	pongWait := max(60*time.Second, 2*rt.cfg.Heartbeat)
	_ = ws.SetReadDeadline(time.Now().Add(pongWait))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(pongWait)) })
	ws.SetPingHandler(func(data string) error {
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(wsWriteWait))
		if err == nil {
			err = hw.conn.Flush()
		}
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		conn.writeLoop()
	}()
	conn.readLoop(pongWait)
	cancel()
	for _, sub := range conn.subs {
		sub.cancel()
		<-sub.done
		sub.sub.Close()
	}
	<-writerDone
}

// readLoop handles client messages until the connection fails or closes.
func (c *wsConn) readLoop(pongWait time.Duration) {
	for {
		typ, rd, err := c.ws.NextReader()
		if err != nil {
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
		data, err := io.ReadAll(io.LimitReader(rd, maxWSMessage+1))
		if err != nil {
			return
		}
		switch {
		case len(data) > maxWSMessage:
			if _, err := io.Copy(io.Discard, rd); err != nil {
				return
			}
			c.reject("", errorf(http.StatusBadRequest, codeRequestTooLarge, "Messages are limited to %d KiB.", maxWSMessage>>10))
		case typ != websocket.TextMessage:
			c.reject("", errorf(http.StatusBadRequest, codeBadRequest, "Send JSON text messages."))
		default:
			c.handle(data)
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// reject answers a bad message; too many of them close the connection.
func (c *wsConn) reject(id string, err error) {
	c.bad++
	c.send(c.ctx, errorMessage(id, "", err))
	if c.bad >= maxBadMessages {
		c.close(websocket.ClosePolicyViolation, "too many invalid messages")
	}
}

func (c *wsConn) handle(data []byte) {
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		c.reject("", errorf(http.StatusBadRequest, codeInvalidJSON, "The message is not a JSON envelope {id?, type, payload?}."))
		return
	}
	switch m.Type {
	case msgAuth:
		c.auth(m)
	case msgSubscribe:
		c.subscribe(m)
	case msgUnsubscribe:
		c.unsubscribe(m)
	case msgPing:
		c.send(c.ctx, encodeMessage(msgPong, m.ID, nil))
	default:
		c.reject(m.ID, errorf(http.StatusBadRequest, codeBadRequest, "Unknown message type %q.", truncate(m.Type, 40)))
	}
}

func decodePayload(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, codeBadRequest, "Invalid payload: %s.", truncate(err.Error(), 200))
	}
	return nil
}

func (c *wsConn) auth(m message) {
	var p struct {
		Token    string `json:"token"`
		Database string `json:"database"`
	}
	if err := decodePayload(m.Payload, &p); err != nil {
		c.reject(m.ID, err)
		return
	}
	if p.Database == "" {
		p.Database = "default"
	}
	if !validDatabase(p.Database) {
		c.reject(m.ID, errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q.", truncate(p.Database, 80)))
		return
	}
	r := c.req.Clone(c.ctx)
	r.Header = http.Header{"Authorization": {"Bearer " + p.Token}}
	caller, err := c.s.resolveCaller(r)
	if err != nil {
		c.send(c.ctx, errorMessage(m.ID, "", err))
		return
	}
	// Existing subscriptions keep the identity they were opened with.
	c.caller, c.db = caller, p.Database
	c.send(c.ctx, encodeMessage(msgAuthAck, m.ID, nil))
}

func (c *wsConn) subscribe(m message) {
	var p struct {
		Query        json.RawMessage `json:"query"`
		IncludeData  *bool           `json:"includeData"`
		SendSnapshot bool            `json:"sendSnapshot"`
		ResumeToken  json.RawMessage `json:"resumeToken"`
	}
	if err := decodePayload(m.Payload, &p); err != nil {
		c.reject(m.ID, err)
		return
	}
	id := m.ID
	if id == "" || len(id) > maxSubIDLen {
		c.reject(m.ID, errorf(http.StatusBadRequest, codeBadRequest, "A subscribe message needs an id of 1 to %d characters: it is the subscription id.", maxSubIDLen))
		return
	}
	if old, ok := c.subs[id]; ok {
		select {
		case <-old.done: // ended on its own (slow consumer, reset): the id is free
			old.sub.Close()
			delete(c.subs, id)
		default:
			c.reject(id, errorf(http.StatusBadRequest, codeBadRequest, "Subscription %q exists; unsubscribe first.", truncate(id, 40)))
			return
		}
	}
	if len(c.subs) >= c.rt.cfg.MaxSubscriptions {
		c.send(c.ctx, errorMessage(id, id, errorf(http.StatusBadRequest, codeBadRequest, "At most %d subscriptions per connection.", c.rt.cfg.MaxSubscriptions)))
		return
	}
	if len(p.Query) == 0 {
		c.reject(id, errorf(http.StatusBadRequest, codeInvalidQuery, "payload.query is required."))
		return
	}
	q, err := collections.ParseQuery(p.Query)
	if err != nil {
		c.reject(id, err)
		return
	}
	params := subParams{db: c.db, query: q, includeData: p.IncludeData == nil || *p.IncludeData, snapshot: p.SendSnapshot}
	if len(p.ResumeToken) > 0 && string(p.ResumeToken) != "null" {
		var tok string
		if err := json.Unmarshal(p.ResumeToken, &tok); err != nil {
			tok = string(p.ResumeToken) // a bare number
		}
		if params.after, err = parseToken(tok); err != nil {
			c.reject(id, err)
			return
		}
		params.resume = true
	}
	sub, err := c.s.openSubscription(c.ctx, c.caller, params)
	if err != nil {
		c.send(c.ctx, errorMessage(id, id, err))
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	ws := &wsSub{sub: sub, cancel: cancel, done: make(chan struct{})}
	c.subs[id] = ws
	// The ack is queued before the forwarder starts, so it precedes the
	// subscription's first event.
	c.send(c.ctx, encodeMessage(msgSubscribeAck, id, map[string]string{"subId": id, "resumeToken": token(sub.Start())}))
	go c.forward(ctx, id, ws, params.includeData)
}

func (c *wsConn) unsubscribe(m message) {
	var p struct {
		ID string `json:"id"`
	}
	if err := decodePayload(m.Payload, &p); err != nil {
		c.reject(m.ID, err)
		return
	}
	sub, ok := c.subs[p.ID]
	if !ok {
		c.send(c.ctx, errorMessage(m.ID, p.ID, errorf(http.StatusNotFound, codeNotFound, "No subscription %q.", truncate(p.ID, 40))))
		return
	}
	// Stop the forwarder first: no event of the subscription follows the
	// ack.
	sub.cancel()
	<-sub.done
	sub.sub.Close()
	delete(c.subs, p.ID)
	c.send(c.ctx, encodeMessage(msgUnsubscribeAck, m.ID, map[string]string{"subId": p.ID}))
}

// forward moves a subscription's events into the outbound queue.
func (c *wsConn) forward(ctx context.Context, id string, ws *wsSub, includeData bool) {
	delivered := c.rt.delivered.WithLabelValues("ws")
	for {
		ev, err := ws.sub.Next(ctx)
		if err != nil {
			// Mark the subscription ended before the client can learn it
			// from the message below: its id is then free for a
			// resubscribe.
			close(ws.done)
			if ctx.Err() != nil {
				return
			}
			msg, slow := endMessage(id, err)
			if slow {
				c.rt.slow.WithLabelValues("ws").Inc()
			}
			if msg != nil {
				c.send(ctx, msg)
			}
			return
		}
		var buf bytes.Buffer
		appendEvent(&buf, id, &ev, includeData)
		if !c.send(ctx, buf.Bytes()) {
			close(ws.done)
			return
		}
		delivered.Inc()
	}
}

// send queues msg for the writer; it blocks while the queue is full and
// returns false when ctx ends first.
func (c *wsConn) send(ctx context.Context, msg []byte) bool {
	select {
	case c.out <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// close asks the writer to flush what is queued, send a close frame and
// close the connection.
func (c *wsConn) close(code int, text string) {
	c.closeOnce.Do(func() {
		c.closeMsg = websocket.FormatCloseMessage(code, text)
		close(c.closing)
	})
}

var heartbeatMessage = encodeMessage(msgHeartbeat, "", nil)

func (c *wsConn) writeLoop() {
	defer c.ws.Close()
	defer c.cancel()
	hb := time.NewTicker(c.rt.cfg.Heartbeat)
	defer hb.Stop()
	stop := c.rt.stop
	write := func(msg []byte) bool {
		return c.ws.WriteMessage(websocket.TextMessage, msg) == nil
	}
	// writeQueued writes msg and whatever else is queued (up to a bound)
	// with one flush: one syscall for a burst of events.
	writeQueued := func(msg []byte) bool {
		_ = c.bc.SetWriteDeadline(time.Now().Add(wsWriteWait))
		if !write(msg) {
			return false
		}
	more:
		for range maxCoalesce {
			select {
			case m := <-c.out:
				if !write(m) {
					return false
				}
			default:
				break more
			}
		}
		return c.bc.Flush() == nil
	}
	control := func(kind int, data []byte) bool {
		err := c.ws.WriteControl(kind, data, time.Now().Add(wsWriteWait))
		return err == nil && c.bc.Flush() == nil
	}
	for {
		select {
		case msg := <-c.out:
			if !writeQueued(msg) {
				return
			}
		case <-hb.C:
			if !writeQueued(heartbeatMessage) || !control(websocket.PingMessage, nil) {
				return
			}
		case <-stop:
			stop = nil
			c.close(websocket.CloseGoingAway, "server shutting down")
		case <-c.closing:
			_ = c.bc.SetWriteDeadline(time.Now().Add(time.Second))
		drain:
			for {
				select {
				case msg := <-c.out:
					if !write(msg) {
						return
					}
				default:
					break drain
				}
			}
			control(websocket.CloseMessage, c.closeMsg)
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// maxCoalesce bounds the messages written with one flush.
const maxCoalesce = 128

// hijackBuffer hands gorilla a connection whose writes are buffered, so the
// writer can flush a burst of frames with one syscall.
type hijackBuffer struct {
	http.ResponseWriter
	conn *bufConn
}

func (h *hijackBuffer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("realtime: connection cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &bufConn{Conn: c, w: bufio.NewWriterSize(c, 32<<10)}
	return h.conn, brw, nil
}

// bufConn buffers writes until Flush (or a full buffer). Safe for
// concurrent use: gorilla serializes frames, control frames may come from
// the reader goroutine.
type bufConn struct {
	net.Conn
	mu sync.Mutex
	w  *bufio.Writer
}

func (c *bufConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Write(p)
}

// Flush writes the buffered bytes.
func (c *bufConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}
