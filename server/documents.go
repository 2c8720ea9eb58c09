package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// getDocuments serves GET /documents/*path: a document path (even number of
// segments) returns the document, a collection path (odd) lists it.
func (s *Server) getDocuments(c *gin.Context) {
	p := docPathParam(c)
	if p != "" && segments(p)%2 == 1 {
		s.listCollection(c, p)
		return
	}
	d, err := s.access.GetForResponse(c.Request.Context(), callerOf(c), c.Param("db"), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeDoc(c, http.StatusOK, d)
}

// listCollection serves GET on a collection path with the query-string
// parameters limit, startAfter, orderBy and showDeleted.
func (s *Server) listCollection(c *gin.Context, p string) {
	if err := collections.ValidateCollectionPath(p); err != nil {
		s.writeError(c, err)
		return
	}
	q, err := listQuery(c, p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.serveQuery(c, q)
}

// listQuery builds the query of a collection listing from the URL:
//
//	limit=N            default 100, at most 1000
//	startAfter=CURSOR  a nextCursor from the previous page of the same listing
//	orderBy=a,b:desc,-c,d:asc
//	showDeleted=true   include tombstones
//
// Other parameters are ignored (clients add cache busters).
func listQuery(c *gin.Context, collection string) (collections.Query, error) {
	q := collections.Query{Collection: collection}
	vals := c.Request.URL.Query()
	if v := vals.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return q, errorf(http.StatusBadRequest, codeInvalidQuery, "limit must be an integer.")
		}
		q.Limit = n
	}
	q.StartAfter = vals.Get("startAfter")
	if v := vals.Get("orderBy"); v != "" {
		for _, term := range strings.Split(v, ",") {
			o, err := parseOrderTerm(strings.TrimSpace(term))
			if err != nil {
				return q, err
			}
			q.OrderBy = append(q.OrderBy, o)
		}
	}
	if v := vals.Get("showDeleted"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return q, errorf(http.StatusBadRequest, codeInvalidQuery, "showDeleted must be true or false.")
		}
		q.ShowDeleted = b
	}
	return q, nil // serveQuery normalizes it
}

// parseOrderTerm parses one orderBy term: "field", "field:asc",
// "field:desc" or "-field".
func parseOrderTerm(t string) (collections.Order, error) {
	o := collections.Order{Field: t, Direction: "asc"}
	switch {
	case strings.HasPrefix(t, "-"):
		o.Field, o.Direction = t[1:], "desc"
	case strings.Contains(t, ":"):
		i := strings.LastIndexByte(t, ':')
		o.Field, o.Direction = t[:i], strings.ToLower(t[i+1:])
		if o.Direction != "asc" && o.Direction != "desc" {
			return o, errorf(http.StatusBadRequest, codeInvalidQuery, "orderBy term %q: the direction is asc or desc.", truncate(t, 64))
		}
	}
	if o.Field == "" {
		return o, errorf(http.StatusBadRequest, codeInvalidQuery, "orderBy has an empty term.")
	}
	return o, nil
}

// createDocument serves POST /documents/*collectionPath: the body is the
// document; its optional "id" names it, else a UUIDv7 is generated.
func (s *Server) createDocument(c *gin.Context) {
	col := docPathParam(c)
	if err := collections.ValidateCollectionPath(col); err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.authorizeBody(c, access.ActionCreate, col+"/*", "create documents in "+col, rules.OpCreate); err != nil {
		s.writeError(c, err)
		return
	}
	data, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var id string
	switch v := data[collections.FieldID].(type) {
	case nil:
		id = collections.NewID()
		delete(data, collections.FieldID) // "id": null means "generate one"
	case string:
		id = v
	default:
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "Field \"id\" must be a string."))
		return
	}
	p := col + "/" + id
	if err := collections.ValidateDocPath(p); err != nil {
		s.writeError(c, err)
		return
	}
	if data, err = collections.CleanInput(data, id); err != nil {
		s.writeError(c, err)
		return
	}
	db := c.Param("db")
	res, err := s.commitOne(c, db, collections.Write{Type: collections.WriteCreate, Path: p, Data: data})
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Header("Location", documentURL(db, p))
	s.writeDoc(c, http.StatusCreated, res.Doc)
}

// replaceDocument serves PUT /documents/*docPath: {"doc", "ifMatch"?}
// replaces the user fields, or creates the document (201) when it is absent
// and there is no precondition.
func (s *Server) replaceDocument(c *gin.Context) {
	s.writeWrapped(c, collections.WriteReplace)
}

// updateDocument serves PATCH /documents/*docPath: {"doc", "ifMatch"?} is
// deep-merged into the live document (null removes, dotted keys nest).
func (s *Server) updateDocument(c *gin.Context) {
	s.writeWrapped(c, collections.WriteUpdate)
}

func (s *Server) writeWrapped(c *gin.Context, typ collections.WriteType) {
	p := docPathParam(c)
	if err := collections.ValidateDocPath(p); err != nil {
		s.writeError(c, err)
		return
	}
	ops := []rules.Op{rules.OpUpdate} // the rules see a patch as an update
	if typ == collections.WriteReplace {
		ops = append(ops, rules.OpCreate) // an upsert
	}
	if err := s.authorizeBody(c, access.ActionUpdate, p, "write "+p, ops...); err != nil {
		s.writeError(c, err)
		return
	}
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	w, err := parseWrapper(m, true)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ifMatch, err := withIfMatchHeader(c, w.IfMatch)
	if err != nil {
		s.writeError(c, err)
		return
	}
	_, id := collections.SplitDocPath(p)
	data, err := collections.CleanInput(w.Doc, id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	db := c.Param("db")
	res, err := s.commitOne(c, db, collections.Write{Type: typ, Path: p, Data: data, IfMatch: ifMatch})
	if err != nil {
		s.writeError(c, err)
		return
	}
	if res.Created {
		c.Header("Location", documentURL(db, p))
		// Syntrix answers an upsert 200 whether or not it created
		// ([compat] syntrix).
		status := http.StatusCreated
		if s.syntrix {
			status = http.StatusOK
		}
		s.writeDoc(c, status, res.Doc)
		return
	}
	s.writeDoc(c, http.StatusOK, res.Doc)
}

// deleteDocument serves DELETE /documents/*docPath with an optional
// {"ifMatch": [...]} body.
func (s *Server) deleteDocument(c *gin.Context) {
	p := docPathParam(c)
	if err := collections.ValidateDocPath(p); err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.authorizeBody(c, access.ActionDelete, p, "delete "+p, rules.OpDelete); err != nil {
		s.writeError(c, err)
		return
	}
	body, err := s.readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var w wrapper
	if !isBlank(body.Bytes()) {
		m, err := decodeObject(body.Bytes())
		if err == nil {
			w, err = parseWrapper(m, false)
		}
		if err != nil {
			putBuf(body)
			s.writeError(c, err)
			return
		}
	}
	putBuf(body)
	ifMatch, err := withIfMatchHeader(c, w.IfMatch)
	if err != nil {
		s.writeError(c, err)
		return
	}
	db := c.Param("db")
	if _, err := s.commitOne(c, db, collections.Write{Type: collections.WriteDelete, Path: p, IfMatch: ifMatch}); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// authorizeBody is what a write route decides before reading its body:
// the coarse path-level check (whole: it looks at the first segment only,
// known before the body) and whether any rule could allow the caller ops
// on path ("*" segments: not known before the body). The full decision on
// the document follows once the body is read (access.Service.Commit).
func (s *Server) authorizeBody(c *gin.Context, action access.Action, path, what string, ops ...rules.Op) error {
	caller := callerOf(c)
	if err := access.Authorize(caller, action, path); err != nil {
		return err
	}
	return s.access.CheckMay(caller, path, what, ops...)
}

// withIfMatchHeader appends the If-Match header's version precondition to
// the body's ifMatch filters.
func withIfMatchHeader(c *gin.Context, fs []collections.Filter) ([]collections.Filter, error) {
	f, ok, err := ifMatchHeader(c.Request)
	if err != nil || !ok {
		return fs, err
	}
	fs = append(fs, f)
	if err := collections.NormalizeFilters(fs[len(fs)-1:]); err != nil {
		return nil, err
	}
	return fs, nil
}

// commitOne commits a single write. A single-document route has no batch
// index, so the *WriteError is unwrapped before the error is mapped. The
// result's document is what the caller may see of it (access.Service.Commit).
func (s *Server) commitOne(c *gin.Context, db string, w collections.Write) (*collections.WriteResult, error) {
	res, err := s.access.Commit(c.Request.Context(), callerOf(c), db, []collections.Write{w})
	if err != nil {
		var we *collections.WriteError
		if errors.As(err, &we) {
			return nil, we.Err
		}
		return nil, err
	}
	if len(res) != 1 || res[0].Doc == nil && w.Type != collections.WriteDelete {
		return nil, errors.New("server: store returned no result for a committed write")
	}
	return &res[0], nil
}
