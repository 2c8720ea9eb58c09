package triggers

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/loomdb/loom/collections"
)

// SystemDB is the database that holds the trigger system collections.
const SystemDB = "default"

// System collections. Their writes are not in the change log, so the
// pipeline never triggers itself; _triggers is (collections.IsLogged), for
// every node's registry to follow, and the evaluator never matches it.
const (
	outboxColl  = "_outbox"
	triggerColl = "_triggers"
	metaPath    = "_trigger_meta/evaluator"
	leasePath   = "_trigger_meta/evaluator-lease"
	cursorName  = "triggers"
)

// Delivery statuses. A row is stored as pending, delivered, dead or
// canceled; the delivery log reports a pending row that has had no attempt
// yet and whose deliverAt is still ahead as scheduled.
const (
	StatusPending   = "pending"
	StatusDelivered = "delivered"
	StatusDead      = "dead"
	StatusCanceled  = "canceled"  // canceled through the admin API before it was delivered
	StatusScheduled = "scheduled" // reported only: pending, waiting for its deliverAt
)

// Outbox row fields (user data of an _outbox document).
const (
	fTrigger     = "triggerId"
	fEvent       = "eventId"
	fSeq         = "seq"
	fStatus      = "status"
	fKey         = "orderingKey"
	fNext        = "nextAttemptAt"
	fOwner       = "leaseOwner"
	fAttempts    = "attempts"
	fBudget      = "budgetUsed"
	fPayload     = "event"
	fFinishedAt  = "finishedAt"
	fDeliverAt   = "deliverAt"
	maxResponse  = 4 << 10
	maxErrorText = 512
)

// Indexes are the engine indexes the delivery queries need; the server
// declares them with its own.
var Indexes = []collections.Index{
	// due rows; also the scheduled rows, soonest first (a scheduled row's
	// nextAttemptAt is its deliverAt until its first attempt): an index of
	// their own costs every outbox insert and attempt record (+0.15 ms p50
	// in BenchmarkWebhookLatency, BENCHMARKS.md).
	{Collection: outboxColl, Fields: []string{fStatus, fNext}},
	{Collection: outboxColl, Fields: []string{fStatus, fSeq}},                 // log by status
	{Collection: outboxColl, Fields: []string{fStatus, fFinishedAt}},          // purge
	{Collection: outboxColl, Fields: []string{fTrigger, fSeq}},                // log by trigger
	{Collection: outboxColl, Fields: []string{fTrigger, fStatus, fSeq}},       // log by trigger and status
	{Collection: outboxColl, Fields: []string{fTrigger, fKey, fStatus, fSeq}}, // head of an ordering key
}

// Attempt is one recorded delivery attempt.
type Attempt struct {
	At        int64  `json:"at"` // unix ms
	Status    int    `json:"status"`
	LatencyMs int64  `json:"latencyMs"`
	Error     string `json:"error,omitempty"`
	Response  string `json:"response,omitempty"`
}

// Delivery is one outbox row: one matched (change, trigger) pair.
type Delivery struct {
	ID          string `json:"id"`
	TriggerID   string `json:"triggerId"`
	EventID     string `json:"eventId"`
	Seq         int64  `json:"seq"`
	Status      string `json:"status"`
	OrderingKey string `json:"orderingKey,omitempty"`
	// DeliverAt is when a scheduled delivery (a trigger with deliverAt) is
	// first attempted, unix ms.
	DeliverAt     int64     `json:"deliverAt,omitempty"`
	Attempts      []Attempt `json:"attempts"`
	NextAttemptAt int64     `json:"nextAttemptAt,omitempty"`
	CreatedAt     int64     `json:"createdAt"`
	FinishedAt    int64     `json:"finishedAt,omitempty"`

	owner   string
	budget  int // attempts counted against maxAttempts (replay resets it)
	event   map[string]any
	version int64
}

// deliveryIDs returns the outbox document id and the event id (the
// webhook-id) of the match of change seq by trigger. The epoch makes ids
// unique across databases that restarted their seq numbering, so a receiver
// deduplicating on webhook-id never drops a new event.
func deliveryIDs(epoch string, seq int64, triggerID string) (id, eventID string) {
	x := epoch + "-" + strconv.FormatInt(seq, 10) + "-" + triggerID
	return "dlv_" + x, "evt_" + x
}

// newRow is the outbox document of a new match.
func newRow(d *Delivery) collections.Write {
	data := map[string]any{
		fTrigger:  d.TriggerID,
		fEvent:    d.EventID,
		fSeq:      d.Seq,
		fStatus:   StatusPending,
		fNext:     d.NextAttemptAt,
		fAttempts: []any{},
		fBudget:   0,
		fPayload:  d.event,
	}
	if d.owner != "" {
		data[fOwner] = d.owner
	}
	if d.OrderingKey != "" {
		data[fKey] = d.OrderingKey
	}
	if d.DeliverAt != 0 {
		data[fDeliverAt] = d.DeliverAt
	}
	return collections.Write{Type: collections.WriteCreate, Path: outboxColl + "/" + d.ID, Data: data}
}

// decodeDelivery reads an outbox document.
func decodeDelivery(doc *collections.Document) (*Delivery, error) {
	d := &Delivery{ID: doc.ID, CreatedAt: doc.CreatedAt, version: doc.Version}
	str := func(f string) string { s, _ := doc.Data[f].(string); return s }
	d.TriggerID, d.EventID, d.Status = str(fTrigger), str(fEvent), str(fStatus)
	d.OrderingKey, d.owner = str(fKey), str(fOwner)
	d.Seq = num(doc.Data[fSeq])
	d.NextAttemptAt = num(doc.Data[fNext])
	d.FinishedAt = num(doc.Data[fFinishedAt])
	d.DeliverAt = num(doc.Data[fDeliverAt])
	d.budget = int(num(doc.Data[fBudget]))
	d.event, _ = doc.Data[fPayload].(map[string]any)
	if raw, ok := doc.Data[fAttempts].([]any); ok {
		b, err := json.Marshal(raw)
		if err == nil {
			err = json.Unmarshal(b, &d.Attempts)
		}
		if err != nil {
			return nil, fmt.Errorf("outbox row %s: attempts: %w", doc.ID, err)
		}
	}
	if d.TriggerID == "" || d.EventID == "" || d.event == nil {
		return nil, fmt.Errorf("outbox row %s is malformed", doc.ID)
	}
	if d.Status != StatusPending {
		d.NextAttemptAt = 0
	}
	return d, nil
}

// scheduled reports whether d waits for its deliverAt at now: pending, not
// attempted yet, deliverAt ahead.
func (d *Delivery) scheduled(now time.Time) bool {
	return d.Status == StatusPending && len(d.Attempts) == 0 && d.DeliverAt > ms(now)
}

// scheduledDoc is scheduled for a stored row, without decoding it.
func scheduledDoc(doc *collections.Document, now time.Time) bool {
	as, _ := doc.Data[fAttempts].([]any)
	return str(doc.Data[fStatus]) == StatusPending && len(as) == 0 && num(doc.Data[fDeliverAt]) > ms(now)
}

// attemptsValue is the stored form of attempts.
func attemptsValue(as []Attempt) []any {
	out := make([]any, len(as))
	for i, a := range as {
		m := map[string]any{"at": a.At, "status": a.Status, "latencyMs": a.LatencyMs}
		if a.Error != "" {
			m["error"] = a.Error
		}
		if a.Response != "" {
			m["response"] = a.Response
		}
		out[i] = m
	}
	return out
}

// num reads an integer stored in a document (0 when absent).
func num(v any) int64 {
	n, _ := collections.Int64(v)
	return n
}

func ms(t time.Time) int64 { return t.UnixMilli() }
