package server

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/collections"
)

// The catalog admin API (README, "The embedded engine"): what the store
// holds, for browsing. Admin only; answered by engines that implement
// collections.Catalog.
const (
	routeCatalogDatabases = "/admin/v1/databases"
	routeCatalogDatabase  = "/admin/v1/databases/:db"

	catalogDefaultLimit = 100
	catalogMaxLimit     = 1000

	codeNotImplemented = "NOT_IMPLEMENTED"
)

func (s *Server) catalogRoutes(r *gin.Engine) {
	r.GET(routeCatalogDatabases, s.authenticate, s.requireAdmin, s.catalogDatabases)
	d := r.Group(routeCatalogDatabase, s.authenticate, s.requireAdmin, s.database)
	d.GET("/collections", s.catalogCollections)
	d.GET("/groups", s.catalogGroups)
}

// catalog returns the store's Catalog, or answers 501.
func (s *Server) catalog(c *gin.Context) (collections.Catalog, bool) {
	cat, ok := s.store.(collections.Catalog)
	if !ok {
		s.writeError(c, errorf(http.StatusNotImplemented, codeNotImplemented,
			"This storage engine cannot list databases, collections or collection groups (it does not implement collections.Catalog)."))
	}
	return cat, ok
}

// catalogPage reads `limit` (default 100, at most 1000; larger values are
// capped, as for queries) and `after`, checked by valid; it answers 400 on
// a bad value.
func (s *Server) catalogPage(c *gin.Context, valid func(string) bool, what string) (after string, limit int, ok bool) {
	limit = catalogDefaultLimit
	if v, set := c.GetQuery("limit"); set {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "limit must be a positive integer (at most %d).", catalogMaxLimit))
			return "", 0, false
		}
		limit = min(n, catalogMaxLimit)
	}
	after = c.Query("after")
	if after != "" && !valid(after) {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "after must be %s (the nextCursor of the previous page), not %q.", what, truncate(after, 80)))
		return "", 0, false
	}
	return after, limit, true
}

// nextCursor cuts a page read with limit+1 names to limit and returns the
// cursor of the next page: the last name, or nil on the last page.
func nextCursor(names []string, limit int) ([]string, *string) {
	if len(names) <= limit {
		return names, nil
	}
	names = names[:limit]
	last := names[limit-1]
	return names, &last
}

// catalogList answers the parts every listing shares: the engine's Catalog
// (else 501), the page parameters (after checked by valid, what names it),
// then list with limit+1 names to find the next cursor. ok is false when an
// error has been answered.
func (s *Server) catalogList(c *gin.Context, valid func(string) bool, what string,
	list func(cat collections.Catalog, after string, limit int) ([]string, error)) (names []string, next *string, ok bool) {
	cat, ok := s.catalog(c)
	if !ok {
		return nil, nil, false
	}
	after, limit, ok := s.catalogPage(c, valid, what)
	if !ok {
		return nil, nil, false
	}
	names, err := list(cat, after, limit+1)
	if err != nil {
		s.writeError(c, err)
		return nil, nil, false
	}
	names, next = nextCursor(names, limit)
	return names, next, true
}

func (s *Server) catalogDatabases(c *gin.Context) {
	names, next, ok := s.catalogList(c, collections.ValidDatabase, "a database name",
		func(cat collections.Catalog, after string, limit int) ([]string, error) {
			return cat.Databases(c.Request.Context(), after, limit)
		})
	if !ok {
		return
	}
	if names == nil {
		names = []string{}
	}
	c.JSON(http.StatusOK, gin.H{"databases": names, "nextCursor": next})
}

type catalogCollection struct {
	Path string `json:"path"`
}

func (s *Server) catalogCollections(c *gin.Context) {
	validColl := func(p string) bool { return collections.ValidateCollectionPath(p) == nil }
	names, next, ok := s.catalogList(c, validColl, "a collection path",
		func(cat collections.Catalog, after string, limit int) ([]string, error) {
			return cat.Collections(c.Request.Context(), c.Param("db"), c.Query("parent"), after, limit)
		})
	if !ok {
		return
	}
	out := make([]catalogCollection, len(names))
	for i, n := range names {
		out[i].Path = n
	}
	c.JSON(http.StatusOK, gin.H{"collections": out, "nextCursor": next})
}

type catalogGroup struct {
	Pattern string `json:"pattern"`
}

func (s *Server) catalogGroups(c *gin.Context) {
	validPattern := func(p string) bool { return collections.ValidateCollectionPattern(p) == nil }
	names, next, ok := s.catalogList(c, validPattern, "a collection group pattern",
		func(cat collections.Catalog, after string, limit int) ([]string, error) {
			return cat.Shapes(c.Request.Context(), c.Param("db"), after, limit)
		})
	if !ok {
		return
	}
	out := make([]catalogGroup, len(names))
	for i, n := range names {
		out[i].Pattern = n
	}
	c.JSON(http.StatusOK, gin.H{"groups": out, "nextCursor": next})
}
