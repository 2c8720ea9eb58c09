package triggers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
)

const (
	// maxRetryAfter caps a receiver's Retry-After.
	maxRetryAfter = 24 * time.Hour
	// disabledRecheck is how long a delivery of a disabled trigger waits
	// before looking again (an enable wakes it at once).
	disabledRecheck = time.Minute
)

// deliverer makes the webhook requests: one delivery reads top to bottom
// in this file (attempt → claim, signingKeys → post → outcomeOf: decide →
// patchRow → recorded: account; an ordering key's 2xx answers are stored by
// its recorder through recordAll instead). It holds
// no rows itself: the dispatcher (dispatch.go) decides which rows this node
// holds and when each runs, and poll.go finds the rows due in the outbox.
// The outcome of an attempt reaches the trigger's state through the
// registry (counters, last error, dead streak, 410 disable).
type deliverer struct {
	cfg   *Config
	store collections.Store
	reg   *registry
	disp  *dispatcher
	log   *slog.Logger
	m     *metrics
	rnd   func() float64
	// client sends the webhooks; builtinClient those of the built-in
	// handlers (Config.BuiltinTransport).
	client, builtinClient *http.Client

	// pollFrom is where the next poll continues in the due rows (used by
	// the poll loop only).
	pollFrom string
}

func newDeliverer(cfg *Config, store collections.Store, reg *registry, log *slog.Logger) *deliverer {
	dv := &deliverer{
		cfg: cfg, store: store, reg: reg, log: log, rnd: mrand.Float64,
		client:        deliveryClient(cfg.Transport),
		builtinClient: deliveryClient(cfg.BuiltinTransport),
	}
	dv.disp = newDispatcher(cfg, dv)
	return dv
}

// deliveryClient sends webhooks through t. It has no timeout: each request
// carries its trigger's timeout in its context. Redirects are never
// followed (a 3xx is a failure).
func deliveryClient(t http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// job is a delivery held by this node: in flight, queued behind its
// ordering key, or waiting for its next attempt.
type job struct {
	d *Delivery
	// leasedUntil is when this node's lease on the row ends; past it the
	// row must be claimed again before an attempt.
	leasedUntil time.Time
	// inserted is closed when the commit inserting a fresh row is done,
	// with insertErr set when it failed; nil for rows already stored.
	inserted  chan struct{}
	insertErr error
}

// stored waits until j's row is in the outbox; false when it never will be
// (its insert failed and the change will be evaluated again) or ctx ended.
func (j *job) stored(ctx context.Context) bool {
	if j.inserted == nil {
		return true
	}
	select {
	case <-j.inserted:
	case <-ctx.Done():
		return false
	}
	if j.insertErr != nil {
		return false
	}
	j.inserted = nil
	return true
}

// outcome of one attempt.
type outcome int

const (
	done  outcome = iota // finished, parked, or no longer ours
	retry                // attempt again at d.NextAttemptAt
	// acked: answered 2xx and handed to the key's recorder (attemptKeyed),
	// which stores it and releases the row.
	acked
)

// attempt makes one delivery attempt of j and records it.
func (dv *deliverer) attempt(ctx context.Context, j *job) outcome {
	return dv.attemptKeyed(ctx, j, nil)
}

// attemptKeyed is attempt for the head of an ordering key: with a recorder,
// a 2xx answer is not recorded here but handed to rec, which stores it in
// order with the key's other answers while the key's next row goes (the
// attempt then counts as in flight until rec stored it, so a drain waits
// for the record). Any other answer is recorded here, as by attempt.
func (dv *deliverer) attemptKeyed(ctx context.Context, j *job, rec *keyRecorder) outcome {
	d := j.d
	e := dv.reg.entry(d.TriggerID)
	now := time.Now()
	if (e == nil || !e.enabled() || d.Seq <= e.st.ActiveFrom) && !j.stored(ctx) {
		return done
	}
	if e == nil {
		// The trigger was deleted: nothing will ever deliver this row.
		return dv.finishWithoutAttempt(ctx, j, "trigger "+d.TriggerID+" no longer exists")
	}
	if d.Seq <= e.st.ActiveFrom {
		// A trigger of the same id was deleted and created again: the row
		// belongs to the old one and must not reach the new URL.
		return dv.finishWithoutAttempt(ctx, j, "trigger "+d.TriggerID+" was deleted; this delivery belonged to it")
	}
	if !e.enabled() {
		dv.park(ctx, j.d, now)
		return done
	}
	if now.After(j.leasedUntil.Add(-time.Second)) {
		if !dv.claim(ctx, j, e, now) {
			return done
		}
	}
	keys, err := signingKeys(e, now)
	if err != nil {
		if !j.stored(ctx) {
			return done
		}
		return dv.finishWithoutAttempt(ctx, j, "signing secret: "+err.Error())
	}

	free, ok := dv.disp.worker(ctx, d.TriggerID, originKey(d.event))
	if !ok {
		return done
	}
	defer free()
	// A drain lets attempts already started finish; none starts after it.
	if !dv.disp.begin() {
		return done // shutting down: the row stays leased and is taken back at the next start
	}
	handed := false
	defer func() {
		if !handed {
			dv.disp.end()
		}
	}()
	a, retryAfter := dv.post(ctx, e, d, keys)
	if !j.stored(ctx) || ctx.Err() != nil {
		return done
	}
	r := dv.outcomeOf(j, e, a, retryAfter, time.Now())
	if rec != nil && r.status == StatusDelivered {
		handed = true
		rec.add(r)
		return acked
	}
	ver, err := dv.patchRow(ctx, d, r.patch)
	if err != nil {
		dv.recordFailed(ctx, d, err)
		return done // no longer ours (or the store is failing): the lease expires and someone retries
	}
	dv.recorded(ctx, r, ver)
	return r.out
}

// claim takes the lease on a row this node holds in memory but whose
// lease ended (a retry, or a row leased before a restart).
func (dv *deliverer) claim(ctx context.Context, j *job, e *entry, now time.Time) bool {
	lease := now.Add(e.c.Timeout + dv.cfg.LeaseSlack)
	ver, err := dv.patchRow(ctx, j.d, map[string]any{fOwner: dv.cfg.NodeID, fNext: ms(lease)})
	if err != nil {
		return false // another node claimed it
	}
	j.d.version = ver
	j.leasedUntil = lease
	return true
}

// claimAll is claim for rows of trigger e, all in one commit (one
// version-checked update per row); when that commit fails, each row is
// claimed on its own. It reports which rows were claimed.
func (dv *deliverer) claimAll(ctx context.Context, e *entry, js []*job, now time.Time) []bool {
	ok := make([]bool, len(js))
	lease := now.Add(e.c.Timeout + dv.cfg.LeaseSlack)
	writes := make([]collections.Write, len(js))
	for i, j := range js {
		writes[i] = rowUpdate(j.d, map[string]any{fOwner: dv.cfg.NodeID, fNext: ms(lease)})
	}
	res, err := dv.store.Commit(ctx, SystemDB, writes, collections.CommitOptions{})
	if err == nil {
		for i, j := range js {
			j.d.version = res[i].Doc.Version
			j.leasedUntil = lease
			ok[i] = true
		}
		return ok
	}
	for i, j := range js {
		ok[i] = len(js) > 1 && ctx.Err() == nil && dv.claim(ctx, j, e, now)
	}
	return ok
}

// signingKeys returns the keys a delivery of e is signed with now.
func signingKeys(e *entry, now time.Time) ([][]byte, error) {
	secret := e.c.Def.Secret
	if secret == "" {
		secret = e.st.Secret
	}
	k, err := secretKey(secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if e.st.PrevSecret != "" && e.st.PrevUntil > ms(now) {
		if pk, err := secretKey(e.st.PrevSecret); err == nil {
			keys = append(keys, pk)
		}
	}
	return keys, nil
}

// post sends one webhook request.
func (dv *deliverer) post(ctx context.Context, e *entry, d *Delivery, keys [][]byte) (Attempt, time.Duration) {
	start := time.Now()
	a := Attempt{At: ms(start)}
	var (
		body  []byte
		err   error
		token string // the preIssuedToken (format "syntrix"): minted now, never stored
	)
	if e.c.Def.Format == FormatSyntrix {
		if token, err = dv.syntrixToken(e, d); err != nil {
			a.Error = "preIssuedToken: " + err.Error()
			return a, 0
		}
		body, err = syntrixBody(e, d, token)
	} else {
		body, err = json.Marshal(map[string]any{
			"id":        d.EventID,
			"type":      "document." + str(d.event["type"]),
			"triggerId": d.TriggerID,
			"database":  d.event["database"],
			"timestamp": d.event["timestamp"],
			"attempt":   len(d.Attempts) + 1,
			"event":     d.event,
		})
	}
	if err != nil {
		a.Error = "encode body: " + err.Error()
		return a, 0
	}
	rctx, cancel := context.WithTimeout(ctx, e.c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, e.c.Def.URL, bytes.NewReader(body))
	if err != nil {
		a.Error = err.Error()
		return a, 0
	}
	for k, v := range e.c.Def.Headers {
		req.Header.Set(k, v)
	}
	ts := start.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Loom/"+dv.cfg.Version)
	req.Header.Set("webhook-id", d.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(keys, d.EventID, ts, body))
	client := dv.client
	if dv.reg.builtin(e) {
		client = dv.builtinClient
	}
	resp, err := client.Do(req)
	a.LatencyMs = time.Since(start).Milliseconds()
	dv.m.attemptSeconds.WithLabelValues(d.TriggerID).Observe(time.Since(start).Seconds())
	if err != nil {
		if rctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			a.Error = fmt.Sprintf("timeout after %s", e.c.Timeout)
		} else {
			a.Error = truncate(err.Error(), maxErrorText)
		}
		return a, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	a.Status = resp.StatusCode
	a.Response = loggedResponse(b, token)
	return a, retryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// answer is an attempt's outcome: what it stores in its row and what
// follows it.
type answer struct {
	j      *job
	e      *entry
	a      Attempt
	gone   bool
	budget int
	status string
	next   int64
	out    outcome
	patch  map[string]any
}

// outcomeOf decides what follows attempt a of j and the patch that stores it.
func (dv *deliverer) outcomeOf(j *job, e *entry, a Attempt, retryAfter time.Duration, now time.Time) *answer {
	d := j.d
	// A 410 from the built-in handlers is an ordinary failure: they never
	// send it, and one document must not switch them off for everyone.
	gone := a.Status == http.StatusGone && !dv.reg.builtin(e)
	budget := d.budget + 1
	status, next, out := dv.decide(e, a, gone, budget, retryAfter, now)
	patch := map[string]any{
		fStatus:   status,
		fAttempts: attemptsValue(append(d.Attempts, a)),
		fBudget:   budget,
		fNext:     next,
	}
	// The lease ends with the attempt: a retry is claimed again when due,
	// so a row with an owner is always one in flight.
	patch[fOwner] = nil
	if status != StatusPending {
		patch[fFinishedAt] = ms(now)
	}
	return &answer{j: j, e: e, a: a, gone: gone, budget: budget, status: status, next: next, out: out, patch: patch}
}

// recorded updates the row in memory once r is stored (at version ver)
// and accounts for it.
func (dv *deliverer) recorded(ctx context.Context, r *answer, ver int64) {
	d := r.j.d
	d.version = ver
	d.Attempts = append(d.Attempts, r.a)
	d.budget = r.budget
	d.Status = r.status
	d.NextAttemptAt = r.next
	r.j.leasedUntil = time.UnixMilli(r.next) // a retry claims again
	dv.account(ctx, r.e, d, r.a, r.gone)
}

// recordFailed logs a record that failed for another reason than the row
// no longer being this node's.
func (dv *deliverer) recordFailed(ctx context.Context, d *Delivery, err error) {
	if !errors.Is(err, collections.ErrPreconditionFailed) && ctx.Err() == nil {
		dv.log.Error("recording a delivery attempt", "delivery", d.ID, "err", err)
	}
}

// recordAll stores the answers of an ordering key's rows, in order, in one
// commit (one version-checked update per row). When that commit fails, each
// row is stored on its own, so a row that is no longer this node's (or
// cannot be stored) fails alone and the others are kept. It returns the
// answers not stored: their rows stay pending, to be delivered again.
func (dv *deliverer) recordAll(ctx context.Context, rs []*answer) (failed []*answer) {
	writes := make([]collections.Write, len(rs))
	for i, r := range rs {
		writes[i] = rowUpdate(r.j.d, r.patch)
	}
	res, err := dv.store.Commit(ctx, SystemDB, writes, collections.CommitOptions{})
	if err == nil {
		for i, r := range rs {
			dv.recorded(ctx, r, res[i].Doc.Version)
		}
		return nil
	}
	if len(rs) == 1 || ctx.Err() != nil {
		dv.recordFailed(ctx, rs[0].j.d, err)
		return rs
	}
	for _, r := range rs {
		ver, err := dv.patchRow(ctx, r.j.d, r.patch)
		if err != nil {
			dv.recordFailed(ctx, r.j.d, err)
			failed = append(failed, r)
			continue
		}
		dv.recorded(ctx, r, ver)
	}
	return failed
}

// decide says what follows an attempt: delivered, dead (its budget is
// spent), parked until an enable (gone), or a retry after the backoff or
// the receiver's Retry-After. next is when the row is due again (0 when
// it is finished).
func (dv *deliverer) decide(e *entry, a Attempt, gone bool, budget int, retryAfter time.Duration, now time.Time) (status string, next int64, out outcome) {
	switch {
	case a.Status >= 200 && a.Status < 300:
		return StatusDelivered, 0, done
	case gone:
		// The receiver says the endpoint is gone: disable the trigger; the
		// row is parked until an enable.
		return StatusPending, ms(now.Add(disabledRecheck)), done
	case budget >= e.c.MaxAttempts():
		return StatusDead, 0, done
	}
	delay := e.c.Backoff(budget, dv.rnd)
	if retryAfter > 0 {
		delay = retryAfter
	}
	return StatusPending, ms(now.Add(delay)), retry
}

// account tells the metrics and the trigger's state (through the
// registry) how a recorded attempt went; a 410 disables the trigger.
func (dv *deliverer) account(ctx context.Context, e *entry, d *Delivery, a Attempt, gone bool) {
	c := Counts{}
	switch {
	case d.Status == StatusDelivered:
		c.Delivered = 1
		dv.m.deliveries.WithLabelValues(d.TriggerID, "delivered").Inc()
		dv.reg.deliveredOK(ctx, e)
	case d.Status == StatusDead:
		c.Dead, c.FailedAttempts = 1, 1
		dv.m.deliveries.WithLabelValues(d.TriggerID, "dead").Inc()
		dv.reg.wentDead(ctx, e, d, attemptError(a))
	default:
		c.FailedAttempts = 1
		dv.m.deliveries.WithLabelValues(d.TriggerID, "failed").Inc()
		dv.reg.noteError(e, attemptError(a))
		if gone {
			// If the disable is not stored, the parked row is attempted
			// again when due and its next 410 tries again.
			if err := dv.reg.setEnabled(ctx, d.TriggerID, false, fmt.Sprintf("receiver answered 410 Gone at %s", time.UnixMilli(a.At).UTC().Format(time.RFC3339))); err != nil {
				dv.log.Error("disabling a trigger after 410 Gone", "trigger", d.TriggerID, "err", err)
			}
		}
	}
	dv.reg.count(d.TriggerID, c)
}

// finishWithoutAttempt marks a row dead for a reason that no retry fixes.
func (dv *deliverer) finishWithoutAttempt(ctx context.Context, j *job, reason string) outcome {
	a := Attempt{At: ms(time.Now()), Error: reason}
	_, err := dv.patchRow(ctx, j.d, map[string]any{
		fStatus: StatusDead, fAttempts: attemptsValue(append(j.d.Attempts, a)),
		fNext: 0, fFinishedAt: a.At, fOwner: nil,
	})
	if err == nil {
		dv.m.deliveries.WithLabelValues(j.d.TriggerID, "dead").Inc()
		dv.log.Warn("delivery dead without an attempt", "delivery", j.d.ID, "reason", reason)
	}
	return done
}

// park releases a row of a disabled trigger and makes it due again a
// little later; enabling the trigger makes it due at once (wakeTrigger).
// The row is not held in memory meanwhile.
func (dv *deliverer) park(ctx context.Context, d *Delivery, now time.Time) {
	_, _ = dv.patchRow(ctx, d, map[string]any{fNext: ms(now.Add(disabledRecheck)), fOwner: nil})
}

// patchRow updates an outbox row this node holds (version-checked).
func (dv *deliverer) patchRow(ctx context.Context, d *Delivery, patch map[string]any) (int64, error) {
	res, err := dv.store.Commit(ctx, SystemDB, []collections.Write{rowUpdate(d, patch)}, collections.CommitOptions{})
	if err != nil {
		return 0, err
	}
	return res[0].Doc.Version, nil
}

// rowUpdate is the version-checked update of d's outbox row.
func rowUpdate(d *Delivery, patch map[string]any) collections.Write {
	return collections.Write{
		Type: collections.WriteUpdate, Path: outboxColl + "/" + d.ID, Data: patch,
		IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: d.version}},
	}
}

// originOf names the top-level document d's document lives under (its
// database and first two path segments), hashed to keep the trigger state
// small.
func originOf(d *Delivery) string {
	sum := sha256.Sum256([]byte(originKey(d.event)))
	return hex.EncodeToString(sum[:8])
}

// originKey is the database and top-level document of an event's document
// ("default\x00users/alice" for users/alice/chats/c1/messages/m1): in the
// usual layout, the tenant it belongs to.
func originKey(event map[string]any) string {
	segs := strings.SplitN(str(event["path"]), "/", 3)
	return str(event["database"]) + "\x00" + strings.Join(segs[:min(2, len(segs))], "/")
}

func attemptError(a Attempt) string {
	if a.Error != "" {
		return a.Error
	}
	return "HTTP " + strconv.Itoa(a.Status)
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil || errors.Is(err, strconv.ErrRange) {
		// Compared in seconds first: n × 1 s overflows a Duration past
		// about 292 years (or n itself overflows), and a wrapped value
		// would be taken for no hint instead of the cap.
		switch {
		case n <= 0:
			return 0
		case n >= int(maxRetryAfter/time.Second):
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

func str(v any) string { s, _ := v.(string); return s }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// loggedResponse is a receiver's answer b as the delivery log keeps it:
// the token (if any) redacted, valid UTF-8, at most maxResponse bytes. It
// copies b once (the string).
func loggedResponse(b []byte, token string) string {
	return truncateUTF8(redactToken(b, token))
}

// truncateUTF8 keeps a response body as text, cut at a rune boundary.
func truncateUTF8(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) > maxResponse {
		s = s[:maxResponse]
		for len(s) > 0 && !utf8Start(s[len(s)-1]) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func utf8Start(c byte) bool { return c < 0x80 || c >= 0xC0 }
