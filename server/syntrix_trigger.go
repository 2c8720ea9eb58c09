package server

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/internal/pathpattern"
	"github.com/loomdb/loom/rules"
)

// The trigger API of Syntrix (docs/syntrix.md, "Trigger API and the
// Syntrix webhook format"): POST /trigger/v1/databases/:db/{get,write,query},
// what Syntrix's TriggerClient (sdk/syntrix-client-ts/src/trigger/
// trigger-client.ts) and its server contract
// (internal/gateway/rest/handler_trigger.go) use. It is always on.
//
// Callers: the admin key, the admin role, service keys, and the trigger
// tokens of Syntrix-format webhooks (internal/auth/triggertoken.go), which
// no other route accepts. End users get 403, anonymous callers 401.
// Security rules apply as on /batch; a trigger token is further held to its
// database and its scope of path patterns, checked on every path before
// package access sees it.
const routeTrigger = "/trigger/v1/databases/:db"

// MaxTriggerGetPaths bounds the paths of one /trigger/v1 get.
const MaxTriggerGetPaths = MaxBatchWrites

// triggerScopeKey holds the *triggerScope of a trigger-token caller.
const triggerScopeKey = "loom.triggerScope"

// triggerRoles are the roles of a trigger token's caller: "service" so that
// rules written for service keys (the built-in ones) apply, "trigger" so
// that rules can tell it apart.
var triggerRoles = []string{"service", "trigger"}

// triggerScope is what a trigger token may touch: one database, and the
// documents matched by one of its patterns.
type triggerScope struct {
	triggerID string
	db        string
	pats      []*pathpattern.Pattern
}

func (s *Server) triggerAPIRoutes(r *gin.Engine) {
	g := r.Group(routeTrigger, s.authenticateTrigger, s.requireTriggerCaller, s.database)
	g.POST("/get", s.triggerGet)
	g.POST("/write", s.triggerWrite)
	g.POST("/query", s.triggerQuery)
}

// authenticateTrigger is authenticate, plus trigger tokens.
func (s *Server) authenticateTrigger(c *gin.Context) {
	key, ok := credential(c.Request)
	if ok && s.auth != nil && key != "" {
		if g, err := s.auth.VerifyTriggerToken(key); err == nil {
			// The token lives its lifetime only while its trigger still
			// sends such tokens (a node without the triggers service
			// cannot tell, and relies on the expiry alone).
			if s.triggers != nil && !s.triggers.IssuesTokens(g.TriggerID, g.Database) {
				s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the trigger of this token was deleted or disabled, or no longer sends Syntrix webhooks to this database."))
				return
			}
			scope := &triggerScope{triggerID: g.TriggerID, db: g.Database}
			for _, src := range g.Scope {
				p, err := pathpattern.Compile(src)
				if err != nil {
					// Only Loom signs these: a pattern it cannot read is a
					// token to refuse, never one to widen.
					s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the trigger token's scope is not valid."))
					return
				}
				scope.pats = append(scope.pats, p)
			}
			// CallerOfIdentity: request.auth is built once for the
			// request's rule checks, as for every other credential.
			caller := access.CallerOfIdentity(&auth.Identity{
				Kind:     auth.KindTriggerToken,
				UID:      g.UID(),
				Username: g.TriggerID,
				Roles:    triggerRoles,
				Claims: map[string]any{
					"sub": g.UID(), "triggerId": g.TriggerID, "db": g.Database,
					"exp": float64(g.Expires.Unix()),
				},
			})
			c.Set(callerKey, caller)
			c.Set(triggerScopeKey, scope)
			if !s.allowRate(c, caller) {
				return
			}
			c.Next()
			return
		}
	}
	s.authenticate(c)
}

// requireTriggerCaller lets through the admin, service keys and trigger
// tokens.
func (s *Server) requireTriggerCaller(c *gin.Context) {
	caller := callerOf(c)
	switch {
	case caller.Admin, caller.Kind == auth.KindServiceKey:
	case caller.Kind == auth.KindTriggerToken:
		sc, ok := c.Get(triggerScopeKey)
		if !ok || sc == nil {
			s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "The trigger token has no scope."))
			return
		}
		if db := sc.(*triggerScope).db; db != c.Param("db") {
			s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "This trigger token is for database %q, not %q (wrong database).", db, truncate(c.Param("db"), 80)))
			return
		}
	case caller.Kind == access.KindAnonymous:
		s.writeError(c, errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the trigger API needs a service key, the admin key or a trigger token."))
		return
	default:
		s.writeError(c, errorf(http.StatusForbidden, codePermissionDenied, "The trigger API is for service keys, admins and trigger tokens, not end users."))
		return
	}
	c.Next()
}

// checkScope refuses path (a document path, or a collection path or
// pattern when collection is true) unless the caller is not a trigger
// token or the token's scope covers it: for a collection, every document
// in it.
func checkScope(c *gin.Context, path string, collection bool) error {
	if callerOf(c).Kind != auth.KindTriggerToken {
		return nil
	}
	v, ok := c.Get(triggerScopeKey)
	if !ok || v == nil {
		return errorf(http.StatusForbidden, codePermissionDenied, "The trigger token has no scope.")
	}
	sc := v.(*triggerScope)
	var buf [16]string
	segs := pathpattern.Split(buf[:0], path)
	if collection {
		segs = append(segs, "*") // any document of the collection
	}
	for _, p := range sc.pats {
		if covers(p, segs) {
			return nil
		}
	}
	what := "document"
	if collection {
		what = "collection"
	}
	return errorf(http.StatusForbidden, codePermissionDenied, "The trigger token of %q does not cover the %s %s (outside its scope).", sc.triggerID, what, truncate(path, 256))
}

// covers reports whether p matches every path segs stands for, where a "*"
// in segs is any one segment: such a segment is covered only by a pattern
// segment that is not a literal.
func covers(p *pathpattern.Pattern, segs []string) bool {
	n := p.Segments()
	if p.HasRest() {
		if len(segs) <= n {
			return false
		}
	} else if len(segs) != n {
		return false
	}
	for i := 0; i < n; i++ {
		if segs[i] == "" {
			return false
		}
		if lit := p.Segment(i).Literal; lit != "" && lit != segs[i] {
			return false
		}
	}
	for _, s := range segs[n:] {
		if s == "" {
			return false
		}
	}
	return true
}

// triggerGet serves POST .../get: {"paths":[docPath...]} or
// {"path":docPath}, answered {"documents":[...],"docs":[...]} (one array
// under both names: Syntrix's server says documents, its TS SDK reads
// docs). Missing documents are skipped, as in Syntrix, and so are
// documents the rules do not let the caller read: access.Get makes a
// missing and a forbidden document one answer for a caller without read
// access, and skipping both keeps it that way. What the path alone decides
// (a malformed path, a system collection, a trigger token's scope) fails
// the whole request.
func (s *Server) triggerGet(c *gin.Context) {
	if err := s.access.CheckMay(callerOf(c), "", "read documents", rules.OpGet); err != nil {
		s.writeError(c, err)
		return
	}
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	paths, err := triggerGetPaths(m)
	if err != nil {
		s.writeError(c, err)
		return
	}
	caller := callerOf(c)
	for i, p := range paths {
		err := collections.ValidateDocPath(p)
		if err == nil {
			err = checkScope(c, p, false)
		}
		if err == nil {
			err = access.Authorize(caller, access.ActionGet, p)
		}
		if err != nil {
			s.writeError(c, &collections.WriteError{Index: i, Path: p, Err: err})
			return
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	buf.WriteString(`{"documents":[`)
	start, n := buf.Len(), 0
	for _, p := range paths {
		d, err := s.access.Get(c.Request.Context(), caller, c.Param("db"), p)
		var de *access.Denied
		switch {
		case errors.Is(err, collections.ErrNotFound), errors.As(err, &de):
			continue
		case err != nil:
			s.writeError(c, err)
			return
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		if err := d.AppendJSON(buf); err != nil {
			s.writeError(c, err)
			return
		}
		n++
	}
	repeatSince(buf, start, `],"docs":[`)
	buf.WriteString(`]}`)
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// triggerGetPaths reads {"paths":[...]} or {"path":"..."}.
func triggerGetPaths(m map[string]any) ([]string, error) {
	const shape = "The body is {\"paths\": [document paths]} or {\"path\": \"document path\"}."
	var paths []string
	seen := false
	for k, v := range m {
		switch k {
		case "path":
			p, ok := v.(string)
			if !ok {
				return nil, errorf(http.StatusBadRequest, codeBadRequest, "\"path\" must be a string. %s", shape)
			}
			paths = append(paths, p)
		case "paths":
			list, ok := v.([]any)
			if !ok {
				return nil, errorf(http.StatusBadRequest, codeBadRequest, "\"paths\" must be a list of strings. %s", shape)
			}
			if len(list) > MaxTriggerGetPaths {
				return nil, errorf(http.StatusBadRequest, codeBadRequest, "A get reads at most %d paths; this one has %d.", MaxTriggerGetPaths, len(list))
			}
			for _, x := range list {
				p, ok := x.(string)
				if !ok {
					return nil, errorf(http.StatusBadRequest, codeBadRequest, "\"paths\" must be a list of strings. %s", shape)
				}
				paths = append(paths, p)
			}
		default:
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Unknown field %q. %s", truncate(k, 64), shape)
		}
		if seen {
			return nil, errorf(http.StatusBadRequest, codeBadRequest, "Give \"paths\" or \"path\", not both.")
		}
		seen = true
	}
	if len(paths) == 0 {
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "paths cannot be empty. %s", shape)
	}
	return paths, nil
}

// triggerWrite serves POST .../write: {"writes":[{"type", "path", "data"?,
// "ifMatch"?}...]} committed as ONE atomic Loom batch (Syntrix applies
// them one by one and stops at the first error; all or nothing is what its
// SDK documents). Types: create, update (a merge patch), replace, set (=
// replace, what the SDK sends) and delete; a create, update, replace or set
// without data writes {}. The answer is 200 with an empty body; an error
// about write i carries details.index = i.
func (s *Server) triggerWrite(c *gin.Context) {
	caller := callerOf(c)
	if err := s.access.CheckMay(caller, "", "write documents", access.WriteOps...); err != nil {
		s.writeError(c, err)
		return
	}
	m, err := s.readObject(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	// Syntrix's write ops into /batch's shape; parseBatch does the rest.
	if list, ok := m["writes"].([]any); ok {
		for _, item := range list {
			syntrixWrite(item)
		}
	}
	writes, err := s.parseBatch(caller, m)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if len(writes) == 0 {
		s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "writes cannot be empty: the body is {\"writes\": [...]}."))
		return
	}
	for i, w := range writes {
		if err := checkScope(c, w.Path, false); err != nil {
			s.writeError(c, &collections.WriteError{Index: i, Path: w.Path, Err: err})
			return
		}
	}
	if _, err := s.access.Commit(c.Request.Context(), caller, c.Param("db"), writes); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusOK)
	c.Writer.WriteHeaderNow()
}

// syntrixWrite rewrites a Syntrix write op, in place, into the shape
// parseBatchWrite takes: type "set" is "replace", and a write other than a
// delete without data (or with null) writes {}.
func syntrixWrite(item any) {
	m, ok := item.(map[string]any)
	if !ok {
		return
	}
	t, _ := m["type"].(string)
	if t == "set" {
		m["type"] = string(collections.WriteReplace)
		t = string(collections.WriteReplace)
	}
	if t == string(collections.WriteDelete) {
		return
	}
	if d, ok := m["data"]; !ok || d == nil {
		m["data"] = map[string]any{}
	}
}

// triggerQuery serves POST .../query: the body of /query, answered
// {"docs":[...],"documents":[...],"nextCursor":...}: docs is what the TS
// SDK's TriggerClient.query reads, documents the name of the get answer.
// Unlike /query under [compat] syntrix, never a bare array: no Syntrix
// client that calls this route reads one (docs/syntrix.md). A missing
// limit is 1000, the maximum page, switch or not.
func (s *Server) triggerQuery(c *gin.Context) {
	if err := s.access.CheckMay(callerOf(c), "", "query documents", rules.OpList); err != nil {
		s.writeError(c, err)
		return
	}
	q, err := s.readQuery(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if err := collections.ValidateCollectionPattern(q.Collection); err != nil {
		s.writeError(c, err)
		return
	}
	if err := checkScope(c, q.Collection, true); err != nil {
		s.writeError(c, err)
		return
	}
	// The SDK's TriggerClient.query (and its QueryImpl.update/delete) never
	// pages and Syntrix's server has no default limit: a missing or 0 limit
	// is the maximum page, as /query answers under [compat] syntrix.
	if q.Limit == 0 {
		q.Limit = collections.MaxLimit
	}
	res, err := s.access.Query(c.Request.Context(), callerOf(c), c.Param("db"), q)
	if err != nil {
		s.writeError(c, err)
		return
	}
	buf := getBuf()
	defer putBuf(buf)
	buf.WriteString(`{"docs":`)
	start := buf.Len()
	if err := appendDocs(buf, res.Docs); err != nil {
		s.writeError(c, err)
		return
	}
	repeatSince(buf, start, `,"documents":`)
	writeNextCursor(buf, res.NextCursor)
	sendJSON(c, http.StatusOK, buf.Bytes())
}

// repeatSince appends sep and then a copy of what buf holds from start
// on: the trigger routes answer one document array under two names, and
// encode it once, in the response buffer itself. (If Write grows buf, it
// copies from the old array, which still holds those bytes.)
func repeatSince(buf *bytes.Buffer, start int, sep string) {
	end := buf.Len()
	buf.WriteString(sep)
	buf.Write(buf.Bytes()[start:end])
}
