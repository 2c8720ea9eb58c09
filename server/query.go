package server

import (
	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// query serves POST /query: the body is a query object (README, Queries),
// decoded strictly by collections.DecodeQuery (unknown keys and operators
// are 400 INVALID_QUERY, never dropped) and normalized by serveQuery.
func (s *Server) query(c *gin.Context) {
	// The collection is in the body: before reading it, only whether the
	// caller could list anything at all.
	if err := s.access.CheckMay(callerOf(c), "", "query documents", rules.OpList); err != nil {
		s.writeError(c, err)
		return
	}
	body, err := s.readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if err := checkObject(body.Bytes()); err != nil {
		putBuf(body)
		s.writeError(c, err)
		return
	}
	q, err := collections.DecodeQuery(body.Bytes())
	putBuf(body)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.serveQuery(c, q)
}

// serveQuery answers a query or a collection listing (q decoded, not yet
// normalized; its startAfter is a sealed client cursor): access.Service.Query
// makes the path-level check, the rules check on the collection, and reads
// a page of readable documents with a sealed nextCursor.
//
// Under [compat] syntrix a missing (or 0) limit is the maximum page
// (collections.MaxLimit): Syntrix's clients do not page by default, and
// its server's default is unlimited, so a smaller page would silently
// drop documents; later pages still come through X-Next-Cursor.
func (s *Server) serveQuery(c *gin.Context, q collections.Query) {
	if s.syntrix && q.Limit == 0 {
		q.Limit = collections.MaxLimit
	}
	res, err := s.access.Query(c.Request.Context(), callerOf(c), c.Param("db"), q)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeDocs(c, res)
}
