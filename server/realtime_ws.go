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
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
)

// wsConn is one WebSocket connection. The handler goroutine reads; each
// subscription has a forwarder goroutine that writes its events to the
// connection itself, under wmu (gorilla allows one concurrent writer): no
// handoff to a writer goroutine per event. A writer leaves the flush to the
// next one when others wait for wmu, so a burst goes out in one syscall. A
// peer that does not read blocks the forwarders in their writes, which
// lets the subscription's queue in the hub fill: that, and only that, ends
// a subscription with SLOW_CONSUMER. The keeper goroutine sends heartbeats
// and closes the connection at shutdown.
type wsConn struct {
	s      *Server
	rt     *realtimeServer
	ws     *websocket.Conn
	bc     *bufConn
	req    *http.Request
	addr   string // the client address (clientAddr), for per-address limits
	ctx    context.Context
	cancel context.CancelFunc

	wmu     sync.Mutex
	waiting atomic.Int32 // writers waiting for wmu
	wclosed bool         // guarded by wmu: no more writes (closed or failed)

	// expires is when the connection's credential expires (unix ms, 0 =
	// never); an auth message with a fresh token moves it and signals
	// reauth. At expiry the connection is closed.
	expires atomic.Int64
	reauth  chan struct{}
	// cred is the current credential (the upgrade's, or the last auth
	// message's), which keep checks again at each heartbeat.
	cred atomic.Pointer[wsCred]

	// Reader goroutine only.
	caller *access.Caller
	db     string
	subs   map[string]*wsSub
	bad    int
}

// wsCred is a credential as a request carrying it, and who it named.
type wsCred struct {
	r      *http.Request
	caller *access.Caller
}

type wsSub struct {
	sub    *heldSub
	cancel context.CancelFunc
	done   chan struct{}
	// params are the subscription's as it was asked for: a subscribe with
	// the same id and the same params is acknowledged again (wsConn.resubscribe).
	params subParams
}

// serveWS upgrades GET /realtime/ws to a WebSocket connection that carries
// the subscriptions its messages ask for (wsConn).
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
	done := s.openStream(c, caller)
	if done == nil {
		return
	}
	defer done()
	db := c.Query("database")
	if db == "" {
		db = "default"
	}
	if !collections.ValidDatabase(db) {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q.", truncate(db, 80)))
		return
	}
	if s.refuseWhenStopping(c) {
		return
	}
	ws, bc := s.upgradeWS(c)
	if ws == nil {
		return
	}
	if !rt.enter() {
		ws.Close() // shutting down
		return
	}
	defer rt.conns.Done()
	rt.connections.WithLabelValues("ws").Inc()
	defer rt.connections.WithLabelValues("ws").Dec()
	s.newWSConn(c, ws, bc, caller, db).run()
}

// upgradeWS answers the WebSocket upgrade (101) over a buffered connection;
// nil when it failed (an upgrade error is answered).
func (s *Server) upgradeWS(c *gin.Context) (*websocket.Conn, *bufConn) {
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
		return nil, nil // Error wrote the response
	}
	if hw.conn == nil || hw.conn.Flush() != nil { // the 101 response
		ws.Close()
		return nil, nil
	}
	return ws, hw.conn
}

// newWSConn is the connection of an upgraded request. It outlives the
// request's cancellation (the hijacked connection ends it instead).
func (s *Server) newWSConn(c *gin.Context, ws *websocket.Conn, bc *bufConn, caller *access.Caller, db string) *wsConn {
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request.Context()))
	conn := &wsConn{
		s: s, rt: s.rt, ws: ws, req: c.Request, addr: s.clientAddr(c), ctx: ctx, cancel: cancel,
		bc:     bc,
		caller: caller, db: db,
		subs:   map[string]*wsSub{},
		reauth: make(chan struct{}, 1),
	}
	conn.cred.Store(&wsCred{r: c.Request.Clone(ctx), caller: caller})
	conn.setExpiry(caller)
	return conn
}

// run serves the connection: the keeper writes heartbeats while this
// goroutine reads, until the connection fails or closes; then every
// subscription ends before the connection closes.
func (c *wsConn) run() {
	pongWait := max(60*time.Second, 2*c.rt.cfg.Heartbeat)
	c.setReadHandlers(pongWait)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.keep()
	}()
	c.readLoop(pongWait)
	c.cancel()
	for _, sub := range c.subs {
		sub.cancel()
		<-sub.done
		sub.sub.Close()
	}
	<-writerDone
	c.ws.Close()
}

// setReadHandlers bounds incoming messages, and keeps the read deadline
// pongWait ahead of each pong; pings are answered at once.
func (c *wsConn) setReadHandlers(pongWait time.Duration) {
	ws := c.ws
	ws.SetReadLimit(wsReadLimit)
	_ = ws.SetReadDeadline(time.Now().Add(pongWait))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(pongWait)) })
	ws.SetPingHandler(func(data string) error {
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(wsWriteWait))
		if err == nil {
			err = c.bc.Flush()
		}
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
}

// readLoop handles client messages until the connection fails or closes.
func (c *wsConn) readLoop(pongWait time.Duration) {
	for {
		typ, rd, err := c.ws.NextReader()
		if err != nil {
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
		if !c.readMessage(typ, rd) || c.ctx.Err() != nil {
			return
		}
	}
}

// readMessage reads and handles one message; false when the connection
// failed. A message is buffered like a request body, so it counts against
// the same server-wide budget while it is read and handled.
func (c *wsConn) readMessage(typ int, rd io.Reader) bool {
	lease := &bodyLease{budget: c.s.bodies, client: c.addr}
	defer lease.release()
	data, err := io.ReadAll(io.LimitReader(budgetedReader{Reader: rd, lease: lease}, maxWSMessage+1))
	busy := errors.Is(err, errBodyBudget)
	if err != nil && !busy {
		return false
	}
	switch {
	case busy:
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return false
		}
		c.send(c.ctx, c.s.errorMessage("", "", bodyBusy()))
	case len(data) > maxWSMessage:
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return false
		}
		c.reject("", errorf(http.StatusBadRequest, codeRequestTooLarge, "Messages are limited to %d KiB.", maxWSMessage>>10))
	case typ != websocket.TextMessage:
		c.reject("", errorf(http.StatusBadRequest, codeBadRequest, "Send JSON text messages."))
	default:
		c.handle(data)
	}
	return true
}

// reject answers a bad message; too many of them close the connection.
func (c *wsConn) reject(id string, err error) {
	c.bad++
	c.send(c.ctx, c.s.errorMessage(id, "", err))
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
	if !collections.ValidDatabase(p.Database) {
		c.reject(m.ID, errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q.", truncate(p.Database, 80)))
		return
	}
	r := c.req.Clone(c.ctx)
	r.Header = http.Header{"Authorization": {"Bearer " + p.Token}}
	caller, err := c.s.resolveCaller(r)
	if err != nil {
		c.send(c.ctx, c.s.errorMessage(m.ID, "", err))
		return
	}
	// Existing subscriptions keep the identity they were opened with, so a
	// switch to another identity ends them (the new credential must not
	// extend the old one's streams); the connection lives on until the new
	// credential expires. The same user with other roles or claims is
	// another identity to the rules: a credential issued after a role was
	// taken away must not keep the streams that role opened (a repeated
	// subscribe would otherwise acknowledge them).
	var why string
	switch {
	case caller.UID != c.caller.UID || caller.Admin != c.caller.Admin:
		why = "the connection authenticated as someone else"
	case !sameGrant(caller, c.caller):
		why = "the new credential has other roles or claims"
	}
	if why != "" {
		for id, sub := range c.subs {
			c.endSub(id, sub)
			c.send(c.ctx, c.s.errorMessage("", id, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: subscription %q ended: %s; subscribe again.", truncate(id, 40), why)))
		}
	}
	c.caller, c.db = caller, p.Database
	c.cred.Store(&wsCred{r: r, caller: caller})
	c.setExpiry(caller)
	c.send(c.ctx, encodeMessage(msgAuthAck, m.ID, nil))
}

// perToken are the claims every token of one credential has its own
// value of; sameGrant ignores them. Besides the registered ones, OIDC
// providers stamp each token with hashes, nonces and per-token ids (Entra's
// uti/rh/aio): counting those would end a connection's subscriptions on
// every refresh, and a client re-subscribing without a resume token would
// miss the changes in between.
var perToken = []string{"exp", "iat", "nbf", "jti", "auth_time", "at_hash", "c_hash", "s_hash", "nonce", "sid", "uti", "rh", "aio"}

// sameGrant reports whether two callers get the same answers from the
// security rules: the same kind, username, roles (in order) and claims,
// those that change with every token (perToken) aside.
func sameGrant(a, b *access.Caller) bool {
	if a.Kind != b.Kind || a.Username != b.Username || !slices.Equal(a.Roles, b.Roles) {
		return false
	}
	strip := func(m map[string]any) map[string]any {
		out := make(map[string]any, len(m))
		for k, v := range m {
			if !slices.Contains(perToken, k) {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a.Claims), strip(b.Claims))
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
	if len(p.Query) == 0 {
		c.reject(id, errorf(http.StatusBadRequest, codeInvalidQuery, "payload.query is required."))
		return
	}
	q, err := collections.DecodeQuery(p.Query)
	if err == nil {
		// A subscription ignores order, limit and cursor; a client may
		// reuse a query object that carries a (sealed) nextCursor.
		q.StartAfter = ""
		err = q.Normalize()
	}
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
	if old, ok := c.subs[id]; ok {
		select {
		case <-old.done: // ended on its own (slow consumer, reset): the id is free
			old.sub.Close()
			delete(c.subs, id)
		default:
			if sameStream(old.params, params) {
				c.resubscribe(id, old)
				return
			}
			c.reject(id, errorf(http.StatusBadRequest, codeBadRequest, "Subscription %q exists with other parameters; unsubscribe first.", truncate(id, 40)))
			return
		}
	}
	if len(c.subs) >= c.rt.cfg.MaxSubscriptions {
		c.send(c.ctx, c.s.errorMessage(id, id, errorf(http.StatusBadRequest, codeBadRequest, "At most %d subscriptions per connection.", c.rt.cfg.MaxSubscriptions)))
		return
	}
	sub, err := c.s.openSubscription(c.ctx, c.caller, subKey(c.caller, c.addr), params)
	if err != nil {
		c.send(c.ctx, c.s.errorMessage(id, id, err))
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	ws := &wsSub{sub: sub, cancel: cancel, done: make(chan struct{}), params: params}
	c.subs[id] = ws
	// The ack is queued before the forwarder starts, so it precedes the
	// subscription's first event.
	c.send(c.ctx, encodeMessage(msgSubscribeAck, id, map[string]string{"subId": id, "resumeToken": token(sub.Start())}))
	go c.forward(ctx, id, ws, params.includeData)
}

// resubscribe answers a subscribe whose id is live with the same params:
// Syntrix's TypeScript SDK sends every subscription again, with its id, on
// every auth_ack (also the one of its own first auth). The live
// subscription goes on untouched (no second snapshot, no event twice, no
// gap) and the ack is repeated with its start token. The connection's
// current credential must still be allowed to subscribe; if it is not,
// the subscription ends with the error.
func (c *wsConn) resubscribe(id string, old *wsSub) {
	if err := c.s.subscribeAllowed(c.caller, old.params); err != nil {
		c.endSub(id, old)
		c.send(c.ctx, c.s.errorMessage(id, id, err))
		return
	}
	c.send(c.ctx, encodeMessage(msgSubscribeAck, id, map[string]string{"subId": id, "resumeToken": token(old.sub.Start())}))
}

// endSub stops a subscription's forwarder (no event of it follows) and
// ends it.
func (c *wsConn) endSub(id string, sub *wsSub) {
	sub.cancel()
	<-sub.done
	sub.sub.Close()
	delete(c.subs, id)
}

// sameStream reports whether two subscribe requests ask for the same
// stream: the same database, collection, filters, includeData, snapshot
// and resume position. Order, limit, cursor and showDeleted do not shape a
// stream (realtime.Request) and are not compared. Filters compare by their
// JSON (DecodeQuery keeps numbers as written), so 20 and 20.0 differ.
func sameStream(a, b subParams) bool {
	if a.db != b.db || a.includeData != b.includeData || a.snapshot != b.snapshot ||
		a.resume != b.resume || a.after != b.after || a.ownRules != b.ownRules ||
		a.query.Collection != b.query.Collection || len(a.query.Filters) != len(b.query.Filters) {
		return false
	}
	fa, errA := json.Marshal(a.query.Filters)
	fb, errB := json.Marshal(b.query.Filters)
	return errA == nil && errB == nil && bytes.Equal(fa, fb)
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
		c.send(c.ctx, c.s.errorMessage(m.ID, p.ID, errorf(http.StatusNotFound, codeNotFound, "No subscription %q.", truncate(p.ID, 40))))
		return
	}
	// Stop the forwarder first: no event of the subscription follows the
	// ack.
	c.endSub(p.ID, sub)
	c.send(c.ctx, encodeMessage(msgUnsubscribeAck, m.ID, map[string]string{"subId": p.ID}))
}

// forward moves a subscription's events into the outbound queue.
func (c *wsConn) forward(ctx context.Context, id string, ws *wsSub, includeData bool) {
	delivered := c.rt.delivered.WithLabelValues("ws")
	var buf bytes.Buffer
	for {
		// Write every ready event, then flush once before waiting.
		ev, ok, err := ws.sub.TryNext(ctx)
		if err == nil && !ok {
			if !c.flush(ctx) {
				close(ws.done)
				return
			}
			ev, err = ws.sub.Next(ctx)
		}
		if err != nil {
			// Mark the subscription ended, and count it out of the
			// subscription bounds, before the client can learn it from
			// the message below: its id and its slot are then free for a
			// resubscribe (under another id too).
			ws.sub.Close()
			close(ws.done)
			if ctx.Err() != nil {
				return
			}
			msg, slow := c.s.endMessage(id, err)
			if slow {
				c.rt.slow.WithLabelValues("ws").Inc()
			}
			if msg != nil {
				c.send(ctx, msg)
			}
			return
		}
		buf.Reset()
		appendEvent(&buf, id, &ev, includeData)
		if !c.write(ctx, buf.Bytes(), false) {
			close(ws.done)
			return
		}
		delivered.Inc()
	}
}

// send writes msg; it blocks while the peer does not read (up to
// wsWriteWait per flush) and returns false when ctx has ended or the
// connection is closed or broken.
func (c *wsConn) send(ctx context.Context, msg []byte) bool {
	return c.write(ctx, msg, true)
}

// write writes msg and, when flush is set, flushes it (unless another
// writer waits: the last in line flushes for all). A caller that passes
// flush false must call flush before it waits for anything. msg is not
// retained.
func (c *wsConn) write(ctx context.Context, msg []byte, flush bool) bool {
	if ctx.Err() != nil {
		return false
	}
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	ok := !c.wclosed && ctx.Err() == nil
	if ok && c.ws.WriteMessage(websocket.TextMessage, msg) != nil {
		c.failLocked()
		return false
	}
	// The last writer in line flushes what the others wrote.
	if flush && !c.wclosed && c.waiting.Load() == 0 && c.bc.Flush() != nil {
		c.failLocked()
		return false
	}
	return ok
}

// flush flushes what was written (unless another writer waits for wmu:
// it flushes).
func (c *wsConn) flush(ctx context.Context) bool {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	if !c.wclosed && c.waiting.Load() == 0 && c.bc.Flush() != nil {
		c.failLocked()
		return false
	}
	return !c.wclosed && ctx.Err() == nil
}

// failLocked stops all writing after a failed write: the connection is
// closed, which ends the reader and so the handler.
func (c *wsConn) failLocked() {
	c.wclosed = true
	c.cancel()
	c.ws.Close()
}

// close flushes what is written, sends a close frame and closes the
// connection.
func (c *wsConn) close(code int, text string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wclosed {
		return
	}
	c.wclosed = true
	c.bc.setDeadline(time.Now().Add(time.Second))
	if c.bc.Flush() == nil {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
		_ = c.bc.Flush()
	}
	c.cancel()
	c.ws.Close()
}

var heartbeatMessage = encodeMessage(msgHeartbeat, "", nil)

// keep sends heartbeats (a message and a ping), checking the credential
// again before each (recheckCredential), and closes the connection when
// it expires or is revoked and at shutdown, until the connection's
// context ends.
func (c *wsConn) keep() {
	hb := time.NewTicker(c.rt.cfg.Heartbeat)
	defer hb.Stop()
	expiry := time.NewTimer(c.untilExpiry())
	defer expiry.Stop()
	for {
		select {
		case <-hb.C:
			cur := c.cred.Load()
			if err := c.s.recheckCredential(cur.r, cur.caller); err != nil {
				c.send(c.ctx, c.s.errorMessage("", "", err))
				c.close(websocket.ClosePolicyViolation, "credential revoked")
				return
			}
			if !c.send(c.ctx, heartbeatMessage) || !c.ping() {
				return
			}
		case <-c.reauth:
			expiry.Reset(c.untilExpiry())
		case <-expiry.C:
			if d := c.untilExpiry(); d > 0 {
				expiry.Reset(d) // re-authenticated meanwhile
				continue
			}
			c.send(c.ctx, c.s.errorMessage("", "", errTokenExpired))
			c.close(websocket.ClosePolicyViolation, "token expired")
			return
		case <-c.rt.stop:
			c.close(websocket.CloseGoingAway, "server shutting down")
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// setExpiry records the credential's expiry and wakes keep.
func (c *wsConn) setExpiry(caller *access.Caller) {
	var ms int64
	if exp := caller.Expiry(); !exp.IsZero() {
		ms = exp.UnixMilli()
	}
	c.expires.Store(ms)
	select {
	case c.reauth <- struct{}{}:
	default:
	}
}

func (c *wsConn) untilExpiry() time.Duration {
	ms := c.expires.Load()
	if ms == 0 {
		return untilExpiry(time.Time{})
	}
	return untilExpiry(time.UnixMilli(ms))
}

func (c *wsConn) ping() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wclosed {
		return false
	}
	err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait))
	if err == nil {
		err = c.bc.Flush()
	}
	if err != nil {
		c.failLocked()
		return false
	}
	return true
}

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
// the reader goroutine. It owns the write deadline: every write that
// reaches the network is bounded by wsWriteWait (refreshed when less than
// half of it is left, which saves a deadline update per message); gorilla's
// per-frame deadlines are ignored, the frames only reach the buffer.
type bufConn struct {
	net.Conn
	mu       sync.Mutex
	w        *bufio.Writer
	deadline time.Time
	fixed    bool // setDeadline was called: keep that deadline
}

func (c *bufConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) > c.w.Available() {
		c.refreshLocked()
	}
	return c.w.Write(p)
}

// SetWriteDeadline is a no-op: see bufConn.
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

// setDeadline fixes the write deadline from now on.
func (c *bufConn) setDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fixed, c.deadline = true, t
	_ = c.Conn.SetWriteDeadline(t)
}

func (c *bufConn) refreshLocked() {
	if c.fixed {
		return
	}
	now := time.Now()
	if c.deadline.Sub(now) < wsWriteWait/2 {
		c.deadline = now.Add(wsWriteWait)
		_ = c.Conn.SetWriteDeadline(c.deadline)
	}
}

// Flush writes the buffered bytes.
func (c *bufConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w.Buffered() == 0 {
		return nil
	}
	c.refreshLocked()
	return c.w.Flush()
}
