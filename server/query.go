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
	q, err := s.readQuery(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.serveQuery(c, q)
}

// readQuery reads the body as a query object, decoded strictly by
// collections.DecodeQuery (not yet normalized).
func (s *Server) readQuery(c *gin.Context) (collections.Query, error) {
	body, err := s.readBody(c)
	if err != nil {
		return collections.Query{}, err
	}
	defer putBuf(body)
	if err := checkObject(body.Bytes()); err != nil {
		return collections.Query{}, err
	}
	return collections.DecodeQuery(body.Bytes())
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
	res, err := s.access.QueryForResponse(c.Request.Context(), callerOf(c), c.Param("db"), q)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeDocs(c, res)
}
