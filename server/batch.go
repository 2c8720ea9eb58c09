package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
)

// MaxBatchWrites bounds the writes of one batch: the README's "atomic batch
// of up to 500 writes".
const MaxBatchWrites = 500

// batch serves POST /batch: {"writes": [{type, path, data?, ifMatch?}...]}
// committed atomically in one Store.Commit. Any failure — a malformed write,
// a forbidden path or a store error — fails the whole batch with
// details.index naming the write. Each result shows only what the caller
// may read of the written document (access.Service.Commit).
func (s *Server) batch(c *gin.Context) {
	// The paths are in the body: before reading it, only whether the
	// caller could write anything at all.
	if err := s.access.CheckMay(callerOf(c), "", "write documents", access.WriteOps...); err != nil {
		s.writeError(c, err)
		return
	}
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	writes, err := s.parseBatch(callerOf(c), m)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var results []collections.WriteResult
	if len(writes) > 0 {
		results, err = s.access.Commit(c.Request.Context(), callerOf(c), c.Param("db"), writes)
		if err != nil {
			s.writeError(c, err)
			return
		}
	}

	buf := getBuf()
	defer putBuf(buf)
	buf.WriteString(`{"results":[`)
	for i := range writes {
		if i > 0 {
			buf.WriteByte(',')
		}
		if writes[i].Type == collections.WriteDelete || i >= len(results) || results[i].Doc == nil {
			buf.WriteString("null")
			continue
		}
		if err := results[i].Doc.AppendJSON(buf); err != nil {
			s.writeError(c, err)
			return
		}
	}
	buf.WriteString(`]}`)
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// parseBatch validates the batch body and every write, and authorizes each
// one, before anything is committed. Errors about write i are wrapped in a
// *collections.WriteError so the response carries details.index = i.
func (s *Server) parseBatch(caller *access.Caller, m map[string]any) ([]collections.Write, error) {
	var raw []any
	for k, v := range m {
		if k != "writes" {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q: the body is {\"writes\": [...]}.", truncate(k, 64))
		}
		list, ok := v.([]any)
		if !ok {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "\"writes\" must be a list of writes.")
		}
		raw = list
	}
	if raw == nil {
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "The body must be {\"writes\": [...]}.")
	}
	if len(raw) > MaxBatchWrites {
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "A batch has at most %d writes; this one has %d.", MaxBatchWrites, len(raw))
	}
	writes := make([]collections.Write, len(raw))
	for i, item := range raw {
		w, err := s.parseBatchWrite(caller, item)
		if err != nil {
			return nil, &collections.WriteError{Index: i, Path: w.Path, Err: err}
		}
		writes[i] = w
	}
	return writes, nil
}

func (s *Server) parseBatchWrite(caller *access.Caller, item any) (collections.Write, error) {
	var w collections.Write
	m, ok := item.(map[string]any)
	if !ok {
		return w, errorf(http.StatusBadRequest, codeBadRequest, "A write must be an object {\"type\", \"path\", \"data\"?, \"ifMatch\"?}.")
	}
	var (
		data    map[string]any
		hasData bool
	)
	for k, v := range m {
		switch k {
		case "type":
			t, _ := v.(string)
			switch collections.WriteType(t) {
			case collections.WriteCreate, collections.WriteReplace, collections.WriteUpdate, collections.WriteDelete:
				w.Type = collections.WriteType(t)
			default:
				return w, errorf(http.StatusBadRequest, codeBadRequest, "A write's \"type\" is create, replace, update or delete.")
			}
		case "path":
			p, ok := v.(string)
			if !ok {
				return w, errorf(http.StatusBadRequest, codeBadRequest, "A write's \"path\" must be a string.")
			}
			w.Path = p
		case "data":
			if v == nil {
				continue
			}
			d, ok := v.(map[string]any)
			if !ok {
				return w, errorf(http.StatusBadRequest, codeBadRequest, "A write's \"data\" must be a JSON object.")
			}
			data, hasData = d, true
		case "ifMatch":
			fs, err := parseFilters(v, "ifMatch")
			if err != nil {
				return w, err
			}
			w.IfMatch = fs
		default:
			return w, errorf(http.StatusBadRequest, codeBadRequest, "A write has unknown field %q.", truncate(k, 64))
		}
	}
	if w.Type == "" {
		return w, errorf(http.StatusBadRequest, codeBadRequest, "A write needs a \"type\": create, replace, update or delete.")
	}
	if err := collections.ValidateDocPath(w.Path); err != nil {
		return w, err
	}
	action := access.ActionUpdate
	switch w.Type {
	case collections.WriteDelete:
		if hasData {
			return w, errorf(http.StatusBadRequest, codeBadRequest, "A delete takes no \"data\".")
		}
		action = access.ActionDelete
	default:
		if !hasData {
			return w, errorf(http.StatusBadRequest, codeBadRequest, "A %s write needs \"data\" (an object).", w.Type)
		}
		if w.Type == collections.WriteCreate {
			action = access.ActionCreate
		}
		_, id := collections.SplitDocPath(w.Path)
		var err error
		if w.Data, err = collections.CleanInput(data, id); err != nil {
			return w, err
		}
	}
	if err := access.Authorize(caller, action, w.Path); err != nil {
		return w, err
	}
	return w, nil
}
