package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server/realtime"
)

// Realtime (README, "Realtime: WebSocket and SSE"): /realtime/ws and
// /realtime/sse stream subscriptions from one realtime.Hub. Both transports
// share the subscription checks (openSubscription) and the event encoding
// (appendEvent), so an SSE event's data is byte-for-byte the WebSocket event
// message. RxDB's pullStream (rxdb_stream.go) is a subscription of the same
// hub.

// Realtime defaults applied to zero RealtimeConfig fields.
const (
	DefaultWSHeartbeat      = 30 * time.Second
	DefaultSSEHeartbeat     = 15 * time.Second
	DefaultMaxSubscriptions = 100
	DefaultMaxStreamsPerIP  = 1000
	// DefaultMaxSubscriptionsPerUser bounds the live subscriptions of one
	// user (or anonymous client address) over all its connections and
	// transports; DefaultMaxSubscriptionsTotal those of the whole server.
	// An idle subscription holds about 2 KB of heap, plus up to 16 KB of
	// queue while its subscriber lags (BENCHMARKS.md, "Resource
	// exhaustion"): at most about 4 MB per user and 190 MB in all.
	DefaultMaxSubscriptionsPerUser = 200
	DefaultMaxSubscriptionsTotal   = 10000
	// maxWSMessage is the largest inbound message answered normally;
	// larger ones get an error reply. wsReadLimit is where the connection
	// is cut instead (reading a huge frame just to reject it costs memory
	// and time).
	maxWSMessage = 64 << 10
	wsReadLimit  = 1 << 20
	// maxBadMessages closes a connection that keeps sending garbage.
	maxBadMessages = 10
	// wsWriteWait bounds one frame write; a peer that does not drain its
	// socket for this long is disconnected.
	wsWriteWait = 10 * time.Second
	maxSubIDLen = 128
)

// RealtimeConfig tunes the realtime endpoints.
type RealtimeConfig struct {
	// QueueSize is each subscription's queue of pending changes
	// (realtime.DefaultQueueSize when 0). A subscriber this far behind is
	// ended with SLOW_CONSUMER and resumes from the change log.
	QueueSize int
	// Heartbeat is the WebSocket heartbeat interval (DefaultWSHeartbeat).
	Heartbeat time.Duration
	// SSEHeartbeat is the SSE comment heartbeat interval
	// (DefaultSSEHeartbeat).
	SSEHeartbeat time.Duration
	// MaxSubscriptions bounds the subscriptions of one WebSocket
	// connection (DefaultMaxSubscriptions).
	MaxSubscriptions int
	// MaxSubscriptionsPerUser bounds the live subscriptions (WebSocket,
	// SSE and RxDB pullStream) of one user, or of one client address for anonymous callers
	// (DefaultMaxSubscriptionsPerUser; negative: no limit). The admin key
	// counts only towards the total.
	MaxSubscriptionsPerUser int
	// MaxSubscriptionsTotal bounds the live subscriptions of the server
	// (DefaultMaxSubscriptionsTotal; negative: no limit).
	MaxSubscriptionsTotal int
	// MaxStreamsPerIP bounds the open WebSocket, SSE and RxDB pullStream
	// connections from one client address (DefaultMaxStreamsPerIP;
	// negative: no limit). The admin key is not limited.
	MaxStreamsPerIP int
}

// streamLimiter counts open streams per client address.
type streamLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// acquire counts a stream in; false when the address is at its limit.
func (l *streamLimiter) acquire(ip string) bool {
	if l.max < 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip] >= l.max {
		return false
	}
	l.n[ip]++
	return true
}

func (l *streamLimiter) release(ip string) {
	if l.max < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip]--; l.n[ip] <= 0 {
		delete(l.n, ip)
	}
}

// openStream counts a long-lived stream of caller in; it answers 429 and
// returns nil when the client address has too many open. The returned
// func counts it out.
func (s *Server) openStream(c *gin.Context, caller *access.Caller) func() {
	if caller.Admin {
		return func() {}
	}
	ip := s.clientAddr(c)
	if !s.rt.streams.acquire(ip) {
		e := errorf(http.StatusTooManyRequests, codeRateLimited, "Too many open streams from this address (limit %d); close some first.", s.rt.streams.max)
		e.retryAfter = time.Second
		s.writeError(c, e)
		return nil
	}
	return func() { s.rt.streams.release(ip) }
}

// refuseWhenStopping answers 503 and reports true once shutdown has
// begun: a stream opened now would only be cut.
func (s *Server) refuseWhenStopping(c *gin.Context) bool {
	select {
	case <-s.rt.stop:
		s.writeError(c, errorf(http.StatusServiceUnavailable, codeUnavailable, "The server is shutting down."))
		return true
	default:
		return false
	}
}

// recheckCredential authenticates r's credential again for a stream opened
// by caller; an error means the stream must end. A credential can be
// revoked while a stream is open (a service key, which has no expiry to
// end it): every streaming transport re-checks at its heartbeats rather
// than per event. The admin key is configuration, not revocable.
func (s *Server) recheckCredential(r *http.Request, caller *access.Caller) error {
	if caller.Kind == access.KindAdminKey {
		return nil
	}
	_, err := s.resolveCaller(r)
	return err
}

// subLimiter counts live subscriptions per user (or anonymous address) and
// in total. Every subscription the hub holds costs memory whether or not
// its connection is busy, so both counts are bounded.
type subLimiter struct {
	perUser, total int // negative: no limit
	mu             sync.Mutex
	n              map[string]int // guarded by mu
	all            int            // guarded by mu
}

// acquire counts a subscription of key in ("" = exempt from the per-user
// bound: the admin key); it returns the error to answer when a bound is
// reached.
func (l *subLimiter) acquire(key string) *apiError {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= 0 && l.all >= l.total {
		e := errorf(http.StatusTooManyRequests, codeRateLimited, "The server has reached its limit of %d live subscriptions; retry later.", l.total)
		e.retryAfter = time.Second
		return e
	}
	if key != "" && l.perUser >= 0 && l.n[key] >= l.perUser {
		e := errorf(http.StatusTooManyRequests, codeRateLimited, "You have %d live subscriptions, the limit; unsubscribe some first.", l.perUser)
		e.retryAfter = time.Second
		return e
	}
	l.all++
	if key != "" {
		l.n[key]++
	}
	return nil
}

func (l *subLimiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all--
	if key == "" {
		return
	}
	if l.n[key]--; l.n[key] <= 0 {
		delete(l.n, key)
	}
}

// subKey is whose subscription it is for the per-user bound: the uid, or
// the client address when anonymous; "" for the admin key.
func subKey(caller *access.Caller, addr string) string {
	if caller.Admin && caller.UID == "" {
		return ""
	}
	return rateKey(caller, addr)
}

// heldSub is a subscription counted by the subLimiter; Close counts it out
// (once, however often it is called).
type heldSub struct {
	*realtime.Subscription
	release func()
	once    sync.Once
}

func (h *heldSub) Close() {
	h.Subscription.Close()
	h.once.Do(h.release)
}

// realtimeServer is the server's realtime state.
type realtimeServer struct {
	hub     *realtime.Hub
	cfg     RealtimeConfig
	stop    chan struct{}  // closed when Serve shuts down
	mu      sync.Mutex     // orders enter against shutdown
	stopped bool           // guarded by mu
	conns   sync.WaitGroup // WebSocket connections (hijacked: http.Server does not wait for them)

	streams     *streamLimiter
	subs        *subLimiter
	connections *prometheus.GaugeVec
	delivered   *prometheus.CounterVec
	slow        *prometheus.CounterVec
}

func newRealtimeServer(s *Server, cfg RealtimeConfig, reg *prometheus.Registry) (*realtimeServer, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultWSHeartbeat
	}
	if cfg.SSEHeartbeat <= 0 {
		cfg.SSEHeartbeat = DefaultSSEHeartbeat
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.MaxStreamsPerIP == 0 {
		cfg.MaxStreamsPerIP = DefaultMaxStreamsPerIP
	}
	if cfg.MaxSubscriptionsPerUser == 0 {
		cfg.MaxSubscriptionsPerUser = DefaultMaxSubscriptionsPerUser
	}
	if cfg.MaxSubscriptionsTotal == 0 {
		cfg.MaxSubscriptionsTotal = DefaultMaxSubscriptionsTotal
	}
	rt := &realtimeServer{
		streams: &streamLimiter{max: cfg.MaxStreamsPerIP, n: map[string]int{}},
		subs:    &subLimiter{perUser: cfg.MaxSubscriptionsPerUser, total: cfg.MaxSubscriptionsTotal, n: map[string]int{}},
		hub:     realtime.New(s.store, realtime.Config{QueueSize: cfg.QueueSize, Logger: s.log}),
		cfg:     cfg,
		stop:    make(chan struct{}),
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loom_realtime_connections",
			Help: "Open realtime connections by transport (ws, sse).",
		}, []string{"transport"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_realtime_events_delivered_total",
			Help: "Realtime events (changes and snapshot pages) handed to connections, by transport.",
		}, []string{"transport"}),
		slow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_realtime_slow_consumers_total",
			Help: "Subscriptions ended with SLOW_CONSUMER, by transport.",
		}, []string{"transport"}),
	}
	subs := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loom_realtime_subscriptions",
		Help: "Live realtime subscriptions.",
	}, func() float64 { return float64(rt.hub.Subscriptions()) })
	for _, c := range []prometheus.Collector{rt.connections, rt.delivered, rt.slow, subs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// shutdown ends every stream (WebSockets get a close frame) and stops the
// hub; it waits for the WebSocket connections until ctx ends.
func (rt *realtimeServer) shutdown(ctx context.Context) {
	rt.mu.Lock()
	if !rt.stopped {
		rt.stopped = true
		close(rt.stop)
	}
	rt.mu.Unlock()
	done := make(chan struct{})
	go func() {
		rt.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	rt.hub.Close()
}

// enter counts a WebSocket connection in; false once shutdown started
// (the WaitGroup must not grow while shutdown waits on it).
func (rt *realtimeServer) enter() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped {
		return false
	}
	rt.conns.Add(1)
	return true
}

// realtimeRoutes registers the realtime endpoints.
func (s *Server) realtimeRoutes(r *gin.Engine) {
	r.GET("/realtime/ws", s.serveWS)
	r.GET("/realtime/sse", s.serveSSE)
	// The SSE path of Syntrix's TypeScript SDK (RealtimeSSEClient): the
	// same stream, the database from the path.
	r.GET(routeSSEDatabase, s.serveSSE)
}

// routeSSEDatabase is /realtime/sse with the database in the path.
const routeSSEDatabase = "/realtime/v1/databases/:db/sse"

// subParams is a parsed subscribe request.
type subParams struct {
	db          string
	query       collections.Query
	includeData bool
	snapshot    bool
	resume      bool
	after       int64
	// ownRules: the transport applies the rules itself instead of the
	// hub (RxDB's pullStream checks the one state it sends, as pull does).
	ownRules bool
}

// openSubscription applies the access checks and the subscription bounds,
// and subscribes; key is subKey's. Closing the result counts it out of
// the bounds. Errors are mapped by toAPIError.
func (s *Server) openSubscription(ctx context.Context, caller *access.Caller, key string, p subParams) (*heldSub, error) {
	if err := s.subscribeAllowed(caller, p); err != nil {
		return nil, err
	}
	if err := s.rt.subs.acquire(key); err != nil {
		return nil, err
	}
	release := func() { s.rt.subs.release(key) }
	req := realtime.Request{DB: p.db, Query: p.query, Resume: p.resume, After: p.after, Snapshot: p.snapshot}
	if !caller.Admin && !p.ownRules {
		// Readable per document, unless the rules let the caller read the
		// whole collection (decided again after a rules reload).
		req.Check = s.access.ReadCheck(caller, p.db, rules.OpList, p.query.Collection)
	}
	sub, err := s.rt.hub.Subscribe(ctx, req)
	switch {
	case errors.Is(err, realtime.ErrTokenAhead):
		release()
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "The resume token is ahead of the change log.")
	case err != nil:
		release()
		return nil, toAPIError(err)
	}
	return &heldSub{Subscription: sub, release: release}, nil
}

// subscribeAllowed is the check of a subscribe request before anything is
// held: a valid database, and a collection the caller may list.
func (s *Server) subscribeAllowed(caller *access.Caller, p subParams) error {
	if !collections.ValidDatabase(p.db) {
		return errorf(http.StatusBadRequest, codeBadRequest, "Invalid database name %q.", truncate(p.db, 80))
	}
	if err := access.Authorize(caller, access.ActionList, p.query.Collection); err != nil {
		return err
	}
	return s.access.CheckList(caller, p.query.Collection)
}

// parseToken parses a resume token: a change-log seq in decimal.
func parseToken(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, codeBadRequest, "Invalid resume token %q: use the resumeToken of an event.", truncate(s, 40))
	}
	return n, nil
}

// Message types of the wire format.
const (
	msgAuth           = "auth"
	msgAuthAck        = "auth_ack"
	msgSubscribe      = "subscribe"
	msgSubscribeAck   = "subscribe_ack"
	msgSnapshot       = "snapshot"
	msgEvent          = "event"
	msgReset          = "reset"
	msgUnsubscribe    = "unsubscribe"
	msgUnsubscribeAck = "unsubscribe_ack"
	msgError          = "error"
	msgHeartbeat      = "heartbeat"
	msgPing           = "ping"
	msgPong           = "pong"

	codeSlowConsumer = "SLOW_CONSUMER"
)

// message is the envelope {id?, type, payload?}.
type message struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// encodeMessage encodes an envelope with a payload that always encodes.
func encodeMessage(typ, id string, payload any) []byte {
	var raw json.RawMessage
	if payload != nil {
		raw, _ = json.Marshal(payload) // payloads are plain maps and strings
	}
	b, _ := json.Marshal(message{ID: id, Type: typ, Payload: raw})
	return b
}

// syntrixRealtimeUnauthorized is the code Syntrix's realtime server gives
// an authentication failure (error {code: "unauthorized", message: "invalid
// token"}), used under [compat] syntrix.
const syntrixRealtimeUnauthorized = "unauthorized"

type errorPayload struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	SubID       string `json:"subId,omitempty"`
	ResumeToken string `json:"resumeToken,omitempty"`
	// Details carries only Loom's own code when [compat] syntrix renamed
	// it ({"code": "UNAUTHENTICATED"}); absent otherwise.
	Details map[string]string `json:"details,omitempty"`
}

// errorMessage is the realtime error message (WebSocket and SSE) for err,
// its code as REST would send it (Server.wire), but one: under [compat]
// syntrix an authentication failure is "unauthorized", in lower case, the
// code of Syntrix's realtime protocol (its REST code is UNAUTHORIZED). The
// newest RealtimeClient of Syntrix's SDK (realtime.ts, docs/syntrix.md)
// refreshes its token and re-sends auth only on that exact code.
func (s *Server) errorMessage(id, subID string, err error) []byte {
	ae := s.wire(toAPIError(err), err)
	if s.syntrix && ae.Code == syntrixCodes[codeUnauthenticated] {
		ae.Code = syntrixRealtimeUnauthorized
	}
	p := errorPayload{Code: ae.Code, Message: ae.Message, SubID: subID}
	if c, ok := ae.Details["code"].(string); ok {
		p.Details = map[string]string{"code": c}
	}
	return encodeMessage(msgError, id, p)
}

func token(seq int64) string { return strconv.FormatInt(seq, 10) }

// endMessage is the message that reports why a subscription's stream ended
// (nil for a quiet end: unsubscribed or connection closing), and whether it
// was a slow consumer.
func (s *Server) endMessage(subID string, err error) (msg []byte, slow bool) {
	var se *realtime.SlowConsumerError
	switch {
	case errors.As(err, &se):
		return encodeMessage(msgError, subID, errorPayload{
			Code:        codeSlowConsumer,
			Message:     "The subscriber fell too far behind; resubscribe with resumeToken.",
			SubID:       subID,
			ResumeToken: token(se.Token),
		}), true
	case errors.Is(err, realtime.ErrReset):
		return encodeMessage(msgReset, subID, map[string]string{
			"subId":  subID,
			"reason": "The resume token is older than the change log's retention; fetch a new snapshot.",
		}), false
	case errors.Is(err, realtime.ErrClosed), errors.Is(err, context.Canceled):
		return nil, false
	}
	return s.errorMessage(subID, subID, err), false
}

// appendEvent encodes an event or snapshot message. The documents' JSON is
// shared by all subscribers of a change.
func appendEvent(buf *bytes.Buffer, subID string, ev *realtime.Event, includeData bool) {
	if ev.IsSnapshot() {
		buf.WriteString(`{"id":`)
		rtString(buf, subID)
		buf.WriteString(`,"type":"snapshot","payload":{"subId":`)
		rtString(buf, subID)
		buf.WriteString(`,"documents":[`)
		for i, d := range ev.Snapshot {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := d.AppendJSON(buf); err != nil {
				buf.WriteString("null")
			}
		}
		buf.WriteString(`],"resumeToken":"`)
		buf.WriteString(token(ev.Seq))
		buf.WriteString(`","more":`)
		buf.WriteString(strconv.FormatBool(ev.More))
		buf.WriteString(`}}`)
		return
	}
	// Everything after the subId is the same for every subscriber that
	// sees this change with the same type and includeData: encode it once.
	tail := ev.Change.Memo(memoSlot(ev.Type, includeData), func() []byte {
		return eventTail(ev, includeData)
	})
	buf.Grow(len(`{"type":"event","payload":{"subId":`) + len(subID) + 2 + len(tail))
	buf.WriteString(`{"type":"event","payload":{"subId":`)
	rtString(buf, subID)
	buf.Write(tail)
}

func memoSlot(typ collections.ChangeOp, includeData bool) int {
	slot := 0
	switch typ {
	case collections.OpUpdate:
		slot = 2
	case collections.OpDelete:
		slot = 4
	}
	if includeData {
		slot++
	}
	return slot
}

// eventTail encodes an event message from the resumeToken on.
func eventTail(ev *realtime.Event, includeData bool) []byte {
	c := ev.Change
	var buf bytes.Buffer
	n := 256
	if includeData {
		n += len(c.AfterJSON()) + len(c.BeforeJSON())
	}
	buf.Grow(n)
	buf.WriteString(`,"resumeToken":"`)
	buf.WriteString(token(ev.Seq))
	buf.WriteString(`","delta":{"type":"`)
	buf.WriteString(string(ev.Type))
	buf.WriteString(`","op":"`)
	buf.WriteString(string(c.Op))
	buf.WriteString(`","id":`)
	rtString(&buf, c.After.ID)
	buf.WriteString(`,"path":`)
	rtString(&buf, c.Path)
	buf.WriteString(`,"collection":`)
	rtString(&buf, c.After.Collection)
	if includeData {
		if ev.Type != collections.OpDelete {
			buf.WriteString(`,"document":`)
			buf.Write(c.AfterJSON())
		}
		if ev.Type != collections.OpCreate && c.Before != nil {
			buf.WriteString(`,"before":`)
			buf.Write(c.BeforeJSON())
		}
	}
	buf.WriteString(`,"timestamp":`)
	buf.WriteString(strconv.FormatInt(c.Time, 10))
	buf.WriteString(`}}}`)
	return buf.Bytes()
}

func rtString(buf *bytes.Buffer, s string) {
	writeString(buf, s) // encoding/json's escaping, without allocating
}
