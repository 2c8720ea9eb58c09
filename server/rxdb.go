package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// RxDB replication (README, "RxDB replication"), wire-compatible with
// rxdb-server's replicateServer client:
//
//	GET  /replication/rxdb/{db}/{collection...}/{schemaVersion}/pull
//	POST /replication/rxdb/{db}/{collection...}/{schemaVersion}/push
//	GET  /replication/rxdb/{db}/{collection...}/{schemaVersion}/pullStream
//
// The checkpoint is {"id", "lwt"} where lwt is the document's change-log
// seq: strictly increasing in commit order, so a pull never skips a write
// that commits after it. Pulls, pushes and stream events go through the
// security rules (package access: Readable, CheckList, Commit).

// RxDB defaults applied to zero RxDBConfig fields.
const (
	// DefaultRxDBHeartbeat is the pullStream comment heartbeat interval.
	DefaultRxDBHeartbeat = 15 * time.Second
	// DefaultRxDBLimit is the pull page size when the client sends none
	// (also the stream's batch size); MaxRxDBLimit caps what it may ask.
	DefaultRxDBLimit = 100
	MaxRxDBLimit     = 1000
)

const routeRxDB = "/replication/rxdb/:db"

// RxDBConfig tunes /replication/rxdb.
type RxDBConfig struct {
	// MinSchemaVersion refuses clients of older schema versions with 426
	// (rxdb-server's client then emits outdatedClient$ and cancels). Zero
	// accepts every version.
	MinSchemaVersion int
	// Heartbeat is the pullStream comment interval (DefaultRxDBHeartbeat
	// when 0). Proxies close streams that stay silent for too long.
	Heartbeat time.Duration
}

// Replication actions: the last URL segment.
const (
	rxdbPull       = "pull"
	rxdbPush       = "push"
	rxdbPullStream = "pullStream"
)

// rxdbRoutes registers the RxDB replication endpoints.
func (s *Server) rxdbRoutes(r *gin.Engine) {
	if s.rxdb.Heartbeat <= 0 {
		s.rxdb.Heartbeat = DefaultRxDBHeartbeat
	}
	g := r.Group(routeRxDB, rxdbErrorFlag, rxdbStreamToken, s.authenticate, s.database)
	g.GET("/*rest", s.rxdbGet)
	g.POST("/*rest", s.rxdbPost)
}

// rxdbStreamToken accepts ?access_token= on pullStream, for browsers
// whose EventSource cannot send an Authorization header.
func rxdbStreamToken(c *gin.Context) {
	if c.Request.Method == http.MethodGet && strings.HasSuffix(c.Request.URL.Path, "/pullStream") {
		queryToken(c.Request)
	}
	c.Next()
}

// rxdbErrorFlag marks error bodies the way rxdb-server's client needs them.
// Its parseResponse handles 401, 403 and 426 by status; any other response
// it parses as JSON and throws (then retries) only when the body has a
// truthy "error" field. Without it a failed pull would hand the replication
// {documents: undefined}, which crashes it. So every other error body gets
// "error": true next to code and message.
func rxdbErrorFlag(c *gin.Context) {
	c.Writer = &rxdbErrorWriter{ResponseWriter: c.Writer}
	c.Next()
}

type rxdbErrorWriter struct {
	gin.ResponseWriter
	flag bool // the next body write starts an error object
}

func (w *rxdbErrorWriter) WriteHeader(status int) {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusUpgradeRequired:
	default:
		w.flag = status >= 400 && !w.Written()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *rxdbErrorWriter) Write(b []byte) (int, error) {
	if !w.flag || len(b) == 0 || b[0] != '{' {
		return w.ResponseWriter.Write(b)
	}
	w.flag = false
	if _, err := w.ResponseWriter.Write([]byte(`{"error":true,`)); err != nil {
		return 0, err
	}
	n, err := w.ResponseWriter.Write(b[1:])
	return n + 1, err
}

// Unwrap lets http.ResponseController reach the connection (pullStream
// clears its write deadline and flushes through it).
func (w *rxdbErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rxdbTarget is a parsed replication URL.
type rxdbTarget struct {
	db         string
	collection string
	action     string
	caller     *access.Caller
}

// parseRxDBPath splits "/{collection...}/{schemaVersion}/{action}".
func parseRxDBPath(rest string) (collection string, version int, action string, err error) {
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(segs) < 3 {
		return "", 0, "", errorf(http.StatusNotFound, codeNotFound, "Replication URLs are /replication/rxdb/{db}/{collection}/{schemaVersion}/{pull|push|pullStream}.")
	}
	n := len(segs)
	action = segs[n-1]
	switch action {
	case rxdbPull, rxdbPush, rxdbPullStream:
	default:
		return "", 0, "", errorf(http.StatusNotFound, codeNotFound, "Unknown replication endpoint %q: use pull, push or pullStream.", truncate(action, 40))
	}
	v := segs[n-2]
	version, convErr := strconv.Atoi(v)
	if convErr != nil || version < 0 || v != strconv.Itoa(version) {
		return "", 0, "", errorf(http.StatusBadRequest, codeBadRequest, "Schema version %q is not a non-negative integer.", truncate(v, 40))
	}
	collection = strings.Join(segs[:n-2], "/")
	if err := collections.ValidateCollectionPath(collection); err != nil {
		return "", 0, "", err
	}
	if collections.IsSystemPath(collection) {
		// Not even for admins: Loom's own state is not replicated (its
		// writes have no change-log seq to pull by, but _triggers', which
		// holds signing secrets and is logged for the nodes to follow).
		return "", 0, "", errorf(http.StatusForbidden, codePermissionDenied, "System collections cannot be replicated.")
	}
	return collection, version, action, nil
}

// rxdbResolve parses the URL and checks the caller: a credential is required
// (401), the schema version must be accepted (426), system collections stay
// closed.
func (s *Server) rxdbResolve(c *gin.Context, write bool) (*rxdbTarget, bool) {
	collection, version, action, err := parseRxDBPath(c.Param("rest"))
	if err != nil {
		s.writeError(c, err)
		return nil, false
	}
	caller := callerOf(c)
	if caller.Kind == access.KindAnonymous {
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: replication requires an Authorization header."))
		return nil, false
	}
	if version < s.rxdb.MinSchemaVersion {
		s.writeError(c, errorf(http.StatusUpgradeRequired, "OUTDATED_CLIENT", "Schema version %d is no longer accepted (minimum %d): update the client.", version, s.rxdb.MinSchemaVersion))
		return nil, false
	}
	action2 := access.ActionList
	if write {
		action2 = access.ActionCreate
	}
	if err := access.Authorize(caller, action2, collection); err != nil {
		s.writeError(c, err)
		return nil, false
	}
	return &rxdbTarget{db: c.Param("db"), collection: collection, action: action, caller: caller}, true
}

func (s *Server) rxdbGet(c *gin.Context) {
	t, ok := s.rxdbResolve(c, false)
	if !ok {
		return
	}
	switch t.action {
	case rxdbPull:
		s.rxdbPull(c, t)
	case rxdbPullStream:
		s.rxdbPullStream(c, t)
	default:
		c.Header("Allow", http.MethodPost)
		s.writeError(c, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "Method GET is not allowed here; allowed: POST."))
	}
}

func (s *Server) rxdbPost(c *gin.Context) {
	t, ok := s.rxdbResolve(c, true)
	if !ok {
		return
	}
	if t.action != rxdbPush {
		c.Header("Allow", http.MethodGet)
		s.writeError(c, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "Method POST is not allowed here; allowed: GET."))
		return
	}
	s.rxdbPush(c, t)
}

// rxdbPull answers GET .../pull?lwt=&id=&limit=.
func (s *Server) rxdbPull(c *gin.Context, t *rxdbTarget) {
	q := c.Request.URL.Query()
	cp := collections.Checkpoint{ID: q.Get("id")}
	if v := q.Get("lwt"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "lwt must be a non-negative integer (a checkpoint returned by this server)."))
			return
		}
		cp.Seq = n
	}
	if len(cp.ID) > collections.MaxIDBytes {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Checkpoint id longer than %d bytes.", collections.MaxIDBytes))
		return
	}
	limit := DefaultRxDBLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "limit must be a positive integer."))
			return
		}
		limit = min(n, MaxRxDBLimit)
	}
	if err := s.access.CheckList(t.caller, t.collection); err != nil {
		s.writeError(c, err)
		return
	}
	docs, next, _, err := s.rxdbChanges(c.Request.Context(), t.caller, t.db, t.collection, cp, limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	buf := getBuf()
	defer putBuf(buf)
	if err := appendRxDBBatch(buf, docs, next); err != nil {
		s.writeError(c, err)
		return
	}
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// rxdbChanges reads up to limit documents the caller may read, in (seq, id)
// order strictly after cp. It returns the checkpoint to continue from and
// whether more documents may follow. The checkpoint moves past documents
// the rules hid, so they are not scanned again, but never names one: past a
// hidden document it is {lwt: its seq, id: the last readable id of that seq
// or ""}, which re-examines at most the hidden documents of that one seq.
//
// A page comes back shorter than limit only at the end of the collection:
// the RxDB client stops pulling on a short page, so a page shortened by the
// rules would strand the documents after it. Pages are therefore refilled
// until full or the end is reached.
func (s *Server) rxdbChanges(ctx context.Context, caller *access.Caller, db, collection string, cp collections.Checkpoint, limit int) (docs []*collections.Document, next collections.Checkpoint, more bool, err error) {
	cur, scan := rxdbCursor{next: cp}, cp // scan: the last document examined
	for {
		page, err := s.store.ChangedSince(ctx, db, collection, scan, limit)
		if err != nil {
			return nil, cp, false, err
		}
		for _, d := range page {
			scan = collections.Checkpoint{Seq: d.Seq, ID: d.ID}
			ok, err := s.access.Readable(ctx, caller, db, rules.OpList, d)
			if err != nil {
				return nil, cp, false, err
			}
			cur.examine(d, ok)
			if ok {
				docs = append(docs, d)
				if len(docs) == limit {
					return docs, cur.next, true, nil
				}
			}
		}
		if len(page) < limit {
			return docs, cur.next, false, nil
		}
	}
}

// rxdbCursor moves a checkpoint over examined documents in (seq, id)
// order, for pull and pullStream alike. It moves past documents the rules
// hid, but never names one: past a hidden document it is {lwt: its seq,
// id: the last readable id of that seq or ""}.
type rxdbCursor struct{ next collections.Checkpoint }

func (c *rxdbCursor) examine(d *collections.Document, readable bool) {
	switch {
	case readable:
		c.next = collections.Checkpoint{Seq: d.Seq, ID: d.ID}
	case d.Seq != c.next.Seq:
		c.next = collections.Checkpoint{Seq: d.Seq}
	}
}

// rxdbForm is a document as RxDB replicates it: user fields, id and
// _deleted (no envelope fields: RxDB schemas forbid extra properties).
func rxdbForm(d *collections.Document) map[string]any {
	m := make(map[string]any, len(d.Data)+2)
	for k, v := range d.Data {
		m[k] = v
	}
	m[collections.FieldID] = d.ID
	m["_deleted"] = d.Deleted
	return m
}

// appendRxDBBatch writes {"documents":[...],"checkpoint":{"id","lwt"}}.
func appendRxDBBatch(buf *bytes.Buffer, docs []*collections.Document, cp collections.Checkpoint) error {
	buf.WriteString(`{"documents":[`)
	for i, d := range docs {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := json.Marshal(rxdbForm(d))
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	buf.WriteString(`],"checkpoint":{"id":`)
	writeString(buf, cp.ID)
	buf.WriteString(`,"lwt":`)
	buf.WriteString(strconv.FormatInt(cp.Seq, 10))
	buf.WriteString(`}}`)
	return nil
}

// rxdbMeta are RxDB's bookkeeping fields: never stored, ignored when
// comparing states.
var rxdbMeta = [...]string{"_deleted", "_meta", "_rev", "_attachments"}

// rxdbRow is one push row.
type rxdbRow struct {
	id       string
	deleted  bool
	data     map[string]any // cleaned user fields
	assumed  map[string]any // nil when absent; RxDB meta fields removed
	hasAssum bool
}

// parseRxDBPush validates the whole push body before anything is written.
func parseRxDBPush(b []byte, collection string) ([]rxdbRow, error) {
	v, err := collections.DecodeJSON(b)
	if err != nil {
		return nil, invalidJSON(err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errorf(http.StatusBadRequest, codeInvalidJSON, "The push body must be a JSON array of {newDocumentState, assumedMasterState?}.")
	}
	rows := make([]rxdbRow, len(arr))
	seen := make(map[string]bool, len(arr))
	for i, x := range arr {
		row, err := parseRxDBRow(x, collection)
		if err != nil {
			return nil, withIndex(err, i)
		}
		// One push is one commit: a document can be in it once (RxDB sends
		// each changed document's latest state once).
		if seen[row.id] {
			return nil, withIndex(errorf(http.StatusBadRequest, codeBadRequest, "Document %q appears twice in one push.", truncate(row.id, 64)), i)
		}
		seen[row.id] = true
		rows[i] = row
	}
	return rows, nil
}

func parseRxDBRow(x any, collection string) (rxdbRow, error) {
	m, ok := x.(map[string]any)
	if !ok {
		return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "A push row must be an object {newDocumentState, assumedMasterState?}.")
	}
	nd, ok := m["newDocumentState"].(map[string]any)
	if !ok {
		return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "newDocumentState must be an object.")
	}
	id, ok := nd[collections.FieldID].(string)
	if !ok {
		return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "newDocumentState.id must be a string (the RxDB schema's primaryKey must be \"id\").")
	}
	if err := collections.ValidateDocPath(collection + "/" + id); err != nil {
		return rxdbRow{}, err
	}
	row := rxdbRow{id: id}
	switch d := nd["_deleted"].(type) {
	case nil:
	case bool:
		row.deleted = d
	default:
		return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "newDocumentState._deleted must be a boolean.")
	}
	for _, f := range rxdbMeta {
		delete(nd, f)
	}
	// Loom owns the envelope names; dropping them silently would lose the
	// client's data on the next pull, so refuse instead.
	for k := range nd {
		if k != collections.FieldID && collections.IsEnvelopeField(k) {
			return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "Field %q is reserved by Loom and cannot be replicated; rename it in the RxDB schema.", k)
		}
	}
	data, err := collections.CleanInput(nd, id)
	if err != nil {
		return rxdbRow{}, err
	}
	row.data = data
	switch a := m["assumedMasterState"].(type) {
	case nil:
	case map[string]any:
		row.hasAssum = true
		row.assumed = a
		if _, ok := a["_deleted"]; !ok {
			a["_deleted"] = false
		}
		for _, f := range rxdbMeta[1:] {
			delete(a, f)
		}
	default:
		return rxdbRow{}, errorf(http.StatusBadRequest, codeBadRequest, "assumedMasterState must be an object when present.")
	}
	return row, nil
}

// withIndex returns err as an API error naming the push row.
func withIndex(err error, i int) error {
	ae := toAPIError(err)
	out := *ae
	out.Details = cloneDetails(ae.Details)
	out.withDetail("index", i)
	return &out
}

// rxdbPush answers POST .../push: the response is the array of master
// documents of the rows that conflicted ([] = all accepted).
func (s *Server) rxdbPush(c *gin.Context, t *rxdbTarget) {
	if err := s.access.CheckMay(t.caller, t.collection+"/*", "write "+t.collection, access.WriteOps...); err != nil {
		s.writeError(c, err)
		return
	}
	body, err := s.readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	rows, err := parseRxDBPush(body.Bytes(), t.collection)
	putBuf(body)
	if err != nil {
		s.writeError(c, err)
		return
	}
	// A collection the caller could never read is refused before any
	// master is looked at: its answers must not depend on what is stored.
	if err := s.access.CheckList(t.caller, t.collection); err != nil {
		s.writeError(c, err)
		return
	}
	conflicts, err := s.rxdbPushRows(c.Request.Context(), t, rows)
	if err != nil {
		s.writeError(c, err)
		return
	}
	buf := getBuf()
	defer putBuf(buf)
	buf.WriteByte('[')
	for i, d := range conflicts {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := json.Marshal(rxdbForm(d))
		if err != nil {
			s.writeError(c, err)
			return
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// maxPushAttempts bounds how often a push is planned again after a
// concurrent writer won the compare-and-set (each retry sees the new
// masters, so the second attempt normally ends in conflicts).
const maxPushAttempts = 4

// rxdbPushRows applies a push: every row is checked with RxDB's
// masterWrite rule against its master (see rxdbPlanRow), and the rows that
// do not conflict are written in one commit (commitPlannedPush).
func (s *Server) rxdbPushRows(ctx context.Context, t *rxdbTarget, rows []rxdbRow) ([]*collections.Document, error) {
	return s.commitPlannedPush(ctx, t, len(rows), func(i int) (*collections.Write, *collections.Document, error) {
		return s.rxdbPlanRow(ctx, t, rows[i])
	})
}

// commitPlannedPush applies a replication push of n rows as one commit,
// for /replication/rxdb and /replication/v1 alike. plan(i) decides row i
// against its current master: the write to make, or the master when the
// row conflicts (neither when there is nothing to do). Conflicting rows are
// left out and their masters returned; the rest are written together in
// one commit that checks the rules of every write before any is applied —
// a denied row fails the whole push (403) with nothing written. The writes
// are pinned to the masters' versions: when a concurrent writer moves one,
// the whole push is planned again (at most maxPushAttempts times).
func (s *Server) commitPlannedPush(ctx context.Context, t *rxdbTarget, n int, plan func(i int) (*collections.Write, *collections.Document, error)) ([]*collections.Document, error) {
	for attempt := 1; ; attempt++ {
		var conflicts []*collections.Document
		var writes []collections.Write
		var rowOf []int // row index of each write
		for i := range n {
			w, master, err := plan(i)
			if err != nil {
				return nil, rowError(err, i)
			}
			switch {
			case master != nil:
				conflicts = append(conflicts, master)
			case w != nil:
				writes = append(writes, *w)
				rowOf = append(rowOf, i)
			}
		}
		if len(writes) == 0 {
			return conflicts, nil
		}
		_, err := s.access.Commit(ctx, t.caller, t.db, writes)
		if err == nil {
			return conflicts, nil
		}
		lost := errors.Is(err, collections.ErrPreconditionFailed) || errors.Is(err, collections.ErrAlreadyExists) || errors.Is(err, collections.ErrNotFound)
		if lost && attempt < maxPushAttempts {
			continue
		}
		var we *collections.WriteError
		if errors.As(err, &we) && we.Index >= 0 && we.Index < len(rowOf) {
			return nil, rowError(we.Err, rowOf[we.Index])
		}
		return nil, err
	}
}

// rowError names the push row a client error is about (details.index).
func rowError(err error, i int) error {
	var we *collections.WriteError
	if errors.As(err, &we) {
		err = we.Err
	}
	if toAPIError(err).Status < 500 {
		return withIndex(err, i)
	}
	return err
}

// rxdbPlanRow decides one row with RxDB's masterWrite rule: the write to
// make, or the master document when the row conflicts (neither when there is
// nothing to do):
//
//	no master                         → insert
//	master, no assumedMasterState     → conflict
//	master == assumedMasterState      → write (delete when _deleted)
//	otherwise                         → conflict
//
// A tombstone is a master with _deleted true. A write is pinned to the
// master's version (a create over nothing fails if someone creates first).
func (s *Server) rxdbPlanRow(ctx context.Context, t *rxdbTarget, row rxdbRow) (*collections.Write, *collections.Document, error) {
	path := t.collection + "/" + row.id
	master, err := s.readableMaster(ctx, t, row.id, row.data, row.deleted)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case master != nil && (!row.hasAssum || !rxdbEqual(rxdbForm(master), row.assumed)):
		return nil, master, nil
	case master == nil || master.Deleted:
		if row.deleted {
			return nil, nil, nil // nothing to delete: the states already agree
		}
		// Creating over a tombstone continues its version count; a
		// concurrent create makes the commit fail with ErrAlreadyExists.
		return &collections.Write{Type: collections.WriteCreate, Path: path, Data: row.data}, nil, nil
	}
	pin := []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(master.Version, 10))}}
	if row.deleted {
		return &collections.Write{Type: collections.WriteDelete, Path: path, IfMatch: pin}, nil, nil
	}
	return &collections.Write{Type: collections.WriteReplace, Path: path, Data: row.data, IfMatch: pin}, nil, nil
}

// readableMaster returns the master of collection/id (rxdbMaster) for a
// push, once the caller is known to be able to read it. Replication needs
// read access to the document on the server: the master when there is one,
// else the state pushed (data, deleted). A conflict hands the master over,
// and even a matching assumed state or version would confirm a guess of its
// content, so an unreadable master is refused outright (403); refusing an
// unreadable pushed state over no master as well means that pushing a state
// the caller could not read answers the same 403 whether the id exists or
// not.
func (s *Server) readableMaster(ctx context.Context, t *rxdbTarget, id string, data map[string]any, deleted bool) (*collections.Document, error) {
	path := t.collection + "/" + id
	master, err := s.rxdbMaster(ctx, t.db, t.collection, path, id)
	if err != nil {
		return nil, err
	}
	seen := master
	if seen == nil {
		seen = &collections.Document{Path: path, Collection: t.collection, ID: id, Data: data, Deleted: deleted}
	}
	ok, err := s.access.Readable(ctx, t.caller, t.db, rules.OpGet, seen)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, access.Deny(t.caller, "replicate "+path)
	}
	return master, nil
}

// rxdbMaster returns the server's state of a document: the live document,
// its tombstone, or nil when it never existed (or its tombstone was purged).
func (s *Server) rxdbMaster(ctx context.Context, db, collection, path, id string) (*collections.Document, error) {
	d, err := s.store.Get(ctx, db, path)
	if err == nil {
		return d, nil
	}
	if !errors.Is(err, collections.ErrNotFound) {
		return nil, err
	}
	q := collections.Query{
		Collection:  collection,
		Filters:     []collections.Filter{{Field: collections.FieldID, Op: collections.OpEq, Value: id}},
		Limit:       1,
		ShowDeleted: true,
	}
	if err := q.Normalize(); err != nil {
		return nil, err
	}
	res, err := s.store.Query(ctx, db, q)
	if err != nil {
		return nil, err
	}
	if len(res.Docs) == 0 {
		return nil, nil
	}
	return res.Docs[0], nil
}

// rxdbEqual is RxDB's deepEqual over decoded JSON, except that numbers
// compare by value: the client re-encodes what it pulled, so 1.0 may come
// back as 1.
func rxdbEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !rxdbEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !rxdbEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		xf, err1 := x.Float64()
		yf, err2 := y.Float64()
		return err1 == nil && err2 == nil && xf == yf
	default:
		return a == b
	}
}
