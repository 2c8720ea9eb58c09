package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// Syntrix's replication protocol (docs/syntrix.md, "Replication"), on
// Loom's change log:
//
//	GET  /replication/v1/databases/{db}/pull?collection=&checkpoint=&limit=
//	POST /replication/v1/databases/{db}/push
//	     {"collection", "changes": [{"action", "document": {"id", "version"?, ...}}]}
//
// Request and response shapes, and the 400 answers, are Syntrix's
// (internal/gateway/rest/handler_replication.go @ 0b5828b0 and types.go @
// 68836243 in syntrixbase/syntrix). Loom differs where Syntrix is unsafe or
// loses data: every document and conflict returned is one the caller may
// read, a push is one atomic commit, and "version" is a compare-and-set
// (Syntrix drops it and writes last-wins).
//
// The checkpoint is the change-log seq of the last document examined, as a
// decimal string ("0" = from the start). Every write has its own seq, so
// the checkpoint names one position exactly: a pull continues strictly after
// it, never repeats a document and never skips one committed later.

const routeSyntrixReplication = "/replication/v1/databases/:db"

// Pull page sizes: limit 0 or absent is DefaultSyntrixPullLimit; above
// MaxSyntrixPullLimit is refused, as Syntrix refuses it.
const (
	DefaultSyntrixPullLimit = 100
	MaxSyntrixPullLimit     = 1000
)

// MaxSyntrixPullScan bounds the documents one pull examines. Past that
// many hidden by the rules, the pull answers the readable ones found so
// far (possibly none) with the checkpoint moved past all it examined, so
// one request's work is bounded whatever the rules hide, and the next pull
// goes on from there.
const MaxSyntrixPullScan = 4 * MaxSyntrixPullLimit

// MaxSyntrixPushChanges bounds the changes of one push, which is one commit
// (the same bound as /batch).
const MaxSyntrixPushChanges = MaxBatchWrites

// Syntrix's answers, word for word: its clients and tests key on the
// status; the message is what a Syntrix user already knows.
const (
	syntrixMsgCollectionRequired = "Collection is required"
	syntrixMsgInvalidCheckpoint  = "Invalid checkpoint"
	syntrixMsgInvalidQuery       = "Invalid query parameters"
	syntrixMsgInvalidParams      = "Invalid replication parameters"
	syntrixMsgInvalidBody        = "Invalid request body"
	syntrixMsgInvalidCollection  = "Invalid collection"
	syntrixMsgInvalidDocument    = "Invalid document in changes"
	syntrixMsgIDRequired         = "Document ID is required in changes"
	syntrixMsgNoChanges          = "No valid changes to push"
)

// Push actions ("" is Syntrix's default: create or update).
const (
	syntrixActionNone   = ""
	syntrixActionCreate = "create"
	syntrixActionUpdate = "update"
	syntrixActionDelete = "delete"
)

// syntrixReplicationRoutes registers /replication/v1 (always on: the routes
// exist only for Syntrix clients).
func (s *Server) syntrixReplicationRoutes(r *gin.Engine) {
	g := r.Group(routeSyntrixReplication, s.authenticate, s.database)
	g.GET("/pull", s.syntrixPull)
	g.POST("/push", s.syntrixPush)
}

// syntrixBad is a 400 with Syntrix's message; Loom's explanation, when
// there is one, goes to details.reason.
func syntrixBad(msg string, reason error) *apiError {
	e := errorf(http.StatusBadRequest, codeBadRequest, "%s", msg)
	if reason != nil {
		e.withDetail("reason", toAPIError(reason).Message)
	}
	return e
}

// syntrixCaller refuses anonymous callers (Syntrix's routes are protected).
func (s *Server) syntrixCaller(c *gin.Context) (*access.Caller, bool) {
	caller := callerOf(c)
	if caller.Kind == access.KindAnonymous {
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: replication requires a credential (Authorization: Bearer <token>)."))
		return nil, false
	}
	return caller, true
}

// syntrixCollection checks a replicated collection: a valid path, not a
// system collection (not even for admins, as /replication/rxdb), and one the
// caller may list.
func (s *Server) syntrixCollection(caller *access.Caller, collection, invalidMsg string) error {
	if err := collections.ValidateCollectionPath(collection); err != nil {
		return syntrixBad(invalidMsg, err)
	}
	if collections.IsSystemPath(collection) {
		return errorf(http.StatusForbidden, codePermissionDenied, "System collections cannot be replicated.")
	}
	if err := access.Authorize(caller, access.ActionList, collection); err != nil {
		return err
	}
	return s.access.CheckList(caller, collection)
}

// syntrixPull answers GET .../pull: {"documents":[...],"checkpoint":"<seq>"}.
func (s *Server) syntrixPull(c *gin.Context) {
	caller, ok := s.syntrixCaller(c)
	if !ok {
		return
	}
	q := c.Request.URL.Query()
	limit := DefaultSyntrixPullLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.writeError(c, syntrixBad(syntrixMsgInvalidQuery, errors.New("limit must be an integer")))
			return
		}
		if n < 0 || n > MaxSyntrixPullLimit {
			s.writeError(c, syntrixBad(syntrixMsgInvalidParams, errors.New("limit must be 0 to "+strconv.Itoa(MaxSyntrixPullLimit))))
			return
		}
		if n > 0 {
			limit = n
		}
	}
	collection := q.Get("collection")
	if collection == "" {
		s.writeError(c, syntrixBad(syntrixMsgCollectionRequired, nil))
		return
	}
	after, err := strconv.ParseInt(q.Get("checkpoint"), 10, 64)
	if err != nil || after < 0 {
		s.writeError(c, syntrixBad(syntrixMsgInvalidCheckpoint, errors.New(`checkpoint must be "0" or a checkpoint this server returned`)))
		return
	}
	if err := s.syntrixCollection(caller, collection, syntrixMsgInvalidParams); err != nil {
		s.writeError(c, err)
		return
	}
	db := c.Param("db")
	docs, next, err := s.syntrixChanges(c.Request.Context(), caller, db, collection, after, limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	buf := getBuf()
	defer putBuf(buf)
	buf.WriteString(`{"documents":`)
	if err := appendDocs(buf, docs); err != nil {
		s.writeError(c, err)
		return
	}
	buf.WriteString(`,"checkpoint":"`)
	buf.WriteString(strconv.FormatInt(next, 10))
	buf.WriteString(`"}`)
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// syntrixChanges reads the documents of collection (tombstones included)
// whose last write's seq is after `after`, in (seq, id) order, keeping
// those the caller may read, until limit are kept or the collection ends.
// It returns the seq of the last document examined: the checkpoint moves
// past documents the rules hide (so they are not scanned again) and the
// documents returned are exactly the readable ones up to it. Every write has
// its own seq (the Store contract, checked by collections/storetest for
// each engine: the writes of one commit get consecutive seqs), so no two
// documents share one and an integer checkpoint never splits a position:
// the next pull from it neither repeats nor skips a document. A page is
// short at the end of the collection, or when MaxSyntrixPullScan documents
// were examined (the rules hid most of them): then the checkpoint has
// moved, and the next pull continues.
func (s *Server) syntrixChanges(ctx context.Context, caller *access.Caller, db, collection string, after int64, limit int) ([]*collections.Document, int64, error) {
	if after == math.MaxInt64 {
		return nil, after, nil
	}
	// Strictly after (after+1, ""): every id is non-empty, so this is
	// every document with seq > after.
	scan := collections.Checkpoint{Seq: after + 1}
	last := after
	var docs []*collections.Document
	examined := 0
	batch := limit // store page size
	for {
		// Never read more than the scan budget left.
		batch = min(batch, MaxSyntrixPullScan-examined)
		page, err := s.store.ChangedSince(ctx, db, collection, scan, batch)
		if err != nil {
			return nil, after, err
		}
		for _, d := range page {
			examined++
			scan = collections.Checkpoint{Seq: d.Seq, ID: d.ID}
			ok, err := s.access.Readable(ctx, caller, db, rules.OpList, d)
			if err != nil {
				return nil, after, err
			}
			last = d.Seq
			if ok {
				docs = append(docs, d)
				if len(docs) == limit {
					return docs, last, nil
				}
			}
		}
		if len(page) < batch || examined == MaxSyntrixPullScan {
			return docs, last, nil
		}
		// The rules hid part of a full page: read on in growing pages, so
		// a small limit behind many hidden documents costs a few store
		// reads rather than one per limit documents.
		batch = min(2*batch, MaxSyntrixPullLimit)
	}
}

// syntrixChange is one validated push change.
type syntrixChange struct {
	action     string
	id         string
	version    int64
	hasVersion bool
	data       map[string]any // user fields, envelope removed
}

// syntrixPush answers POST .../push: {"conflicts":[...]} (always an array).
func (s *Server) syntrixPush(c *gin.Context) {
	caller, ok := s.syntrixCaller(c)
	if !ok {
		return
	}
	body, err := s.readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	collection, changes, err := parseSyntrixPush(body.Bytes(), c.Query("collection"))
	putBuf(body)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.syntrixCollection(caller, collection, syntrixMsgInvalidCollection); err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.access.CheckMay(caller, collection+"/*", "write "+collection, access.WriteOps...); err != nil {
		s.writeError(c, err)
		return
	}
	t := &rxdbTarget{db: c.Param("db"), collection: collection, caller: caller}
	conflicts, err := s.syntrixPushChanges(c.Request.Context(), t, changes)
	if err != nil {
		s.writeError(c, err)
		return
	}
	buf := getBuf()
	defer putBuf(buf)
	buf.WriteString(`{"conflicts":`)
	if err := appendDocs(buf, conflicts); err != nil {
		s.writeError(c, err)
		return
	}
	buf.WriteByte('}')
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// parseSyntrixPush validates the whole push body before anything is read
// or written. queryCollection is the URL's ?collection= (Syntrix's tests
// send it; the body's collection is the one used, and a different one in
// the URL is refused rather than ignored).
func parseSyntrixPush(b []byte, queryCollection string) (string, []syntrixChange, error) {
	m, err := collections.DecodeObject(b)
	if err != nil {
		return "", nil, invalidJSON(err)
	}
	for k := range m {
		if k != "collection" && k != "changes" {
			return "", nil, syntrixBad(syntrixMsgInvalidBody, errors.New("unknown field "+strconv.Quote(truncate(k, 64))+": a push is {collection, changes}"))
		}
	}
	var collection string
	switch v := m["collection"].(type) {
	case nil:
	case string:
		collection = v
	default:
		return "", nil, syntrixBad(syntrixMsgInvalidBody, errors.New("collection must be a string"))
	}
	if collection == "" {
		return "", nil, syntrixBad(syntrixMsgCollectionRequired, nil)
	}
	if err := collections.ValidateCollectionPath(collection); err != nil {
		return "", nil, syntrixBad(syntrixMsgInvalidCollection, err)
	}
	if queryCollection != "" && queryCollection != collection {
		return "", nil, syntrixBad(syntrixMsgInvalidCollection, errors.New("the URL's ?collection= differs from the body's collection"))
	}
	var raw []any
	switch v := m["changes"].(type) {
	case nil:
	case []any:
		raw = v
	default:
		return "", nil, syntrixBad(syntrixMsgInvalidBody, errors.New("changes must be an array of {action, document}"))
	}
	if len(raw) > MaxSyntrixPushChanges {
		return "", nil, errorf(http.StatusBadRequest, codeBadRequest, "A push has at most %d changes; this one has %d.", MaxSyntrixPushChanges, len(raw))
	}
	changes := make([]syntrixChange, len(raw))
	seen := make(map[string]bool, len(raw))
	for i, x := range raw {
		ch, err := parseSyntrixChange(x, collection)
		if err != nil {
			return "", nil, withIndex(err, i)
		}
		// One push is one commit: a document can be in it once.
		if seen[ch.id] {
			return "", nil, withIndex(errorf(http.StatusBadRequest, codeBadRequest, "Document %q appears twice in one push.", truncate(ch.id, 64)), i)
		}
		seen[ch.id] = true
		changes[i] = ch
	}
	if len(changes) == 0 {
		return "", nil, syntrixBad(syntrixMsgNoChanges, nil)
	}
	return collection, changes, nil
}

func parseSyntrixChange(x any, collection string) (syntrixChange, error) {
	m, ok := x.(map[string]any)
	if !ok {
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidBody, errors.New("a change must be an object {action, document}"))
	}
	for k := range m {
		if k != "action" && k != "document" {
			return syntrixChange{}, syntrixBad(syntrixMsgInvalidBody, errors.New("unknown field "+strconv.Quote(truncate(k, 64))+" in a change: use action and document"))
		}
	}
	var ch syntrixChange
	switch a := m["action"].(type) {
	case nil:
	case string:
		ch.action = a
	default:
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidBody, errors.New("action must be a string"))
	}
	switch ch.action {
	case syntrixActionNone, syntrixActionCreate, syntrixActionUpdate, syntrixActionDelete:
	default:
		return syntrixChange{}, errorf(http.StatusBadRequest, codeBadRequest, "Unknown action %q: use create, update, delete or leave it empty.", truncate(ch.action, 40))
	}
	var doc map[string]any
	switch d := m["document"].(type) {
	case nil:
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, errors.New("document is missing"))
	case map[string]any:
		doc = d
	default:
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidBody, errors.New("document must be an object"))
	}
	switch id := doc[collections.FieldID].(type) {
	case nil:
		return syntrixChange{}, syntrixBad(syntrixMsgIDRequired, nil)
	case string:
		if id == "" {
			return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, errors.New("document.id is empty"))
		}
		if err := collections.ValidateDocPath(collection + "/" + id); err != nil {
			return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, err)
		}
		ch.id = id
	default:
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, errors.New("document.id must be a string"))
	}
	if v, present := doc[collections.FieldVersion]; present && v != nil {
		n, ok := collections.Int64(v)
		if !ok || n < 0 {
			return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, errors.New("document.version must be a non-negative integer"))
		}
		ch.version, ch.hasVersion = n, true
	}
	// The envelope (id, collection, version, createdAt, updatedAt,
	// deleted) is Loom's: a pulled document pushed back keeps only its
	// fields. Whether it is deleted is the action's to say, as in Syntrix.
	data, err := collections.CleanInput(doc, ch.id)
	if err != nil {
		return syntrixChange{}, syntrixBad(syntrixMsgInvalidDocument, err)
	}
	ch.data = data
	return ch, nil
}

// syntrixPushChanges applies a push as one commit, like rxdbPushRows: each
// change is planned against the document's current state (syntrixPlan) and
// committed by commitPlannedPush.
func (s *Server) syntrixPushChanges(ctx context.Context, t *rxdbTarget, changes []syntrixChange) ([]*collections.Document, error) {
	return s.commitPlannedPush(ctx, t, len(changes), func(i int) (*collections.Write, *collections.Document, error) {
		return s.syntrixPlan(ctx, t, changes[i])
	})
}

// syntrixPlan decides one change against the document's current state
// (live, tombstone, or none): the write to make, or the current document
// when the change conflicts (neither when there is nothing to do).
//
//	delete, nothing live                      → nothing (already deleted)
//	delete, version given and not the live one → conflict
//	delete                                    → delete
//	version 0                                 → create; conflict if live
//	version n > 0, nothing stored             → create
//	version n > 0, stored version ≠ n         → conflict (a tombstone too)
//	version n > 0, stored version = n         → replace (create over a tombstone)
//	"update", no version                      → replace or create (last write wins)
//	"" or "create", no version                → create; conflict if live
//
// The caller must be able to read the document (readableMaster): an
// unreadable one fails the push (403) whatever the change.
func (s *Server) syntrixPlan(ctx context.Context, t *rxdbTarget, ch syntrixChange) (*collections.Write, *collections.Document, error) {
	path := t.collection + "/" + ch.id
	cur, err := s.readableMaster(ctx, t, ch.id, ch.data, ch.action == syntrixActionDelete)
	if err != nil {
		return nil, nil, err
	}
	live := cur != nil && !cur.Deleted
	create := &collections.Write{Type: collections.WriteCreate, Path: path, Data: ch.data}
	var pin []collections.Filter
	if cur != nil {
		pin = []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(cur.Version, 10))}}
	}
	replace := &collections.Write{Type: collections.WriteReplace, Path: path, Data: ch.data, IfMatch: pin}

	if ch.action == syntrixActionDelete {
		switch {
		case !live:
			return nil, nil, nil
		case ch.hasVersion && ch.version != cur.Version:
			return nil, cur, nil
		}
		return &collections.Write{Type: collections.WriteDelete, Path: path, IfMatch: pin}, nil, nil
	}
	switch {
	case ch.hasVersion && ch.version == 0, !ch.hasVersion && ch.action != syntrixActionUpdate:
		if live {
			return nil, cur, nil
		}
		return create, nil, nil
	case !ch.hasVersion: // "update": last write wins
		if live {
			return replace, nil, nil
		}
		return create, nil, nil
	case cur == nil:
		return create, nil, nil
	case cur.Version != ch.version:
		return nil, cur, nil
	case cur.Deleted:
		return create, nil, nil
	}
	return replace, nil, nil
}
