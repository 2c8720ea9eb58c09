package rules

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"

	"github.com/loomdb/loom/internal/pathpattern"
)

// Whole-collection decisions. A condition that reads nothing a document
// can change — only request.auth, request.op and captures of the
// collection's own path segments — has the same value for every document
// of a collection, so evaluating it once decides them all. AllowsAll
// finds such a rule; everything else stays a per-document decision.

// refs is what a condition reads, from its checked expression.
type refs struct {
	// perDoc: the condition reads something that can differ from one
	// document (or one request) to the next — resource, request.path,
	// request.time, request.resource, request as a whole — or calls get
	// or exists.
	perDoc bool
	// reads: the condition calls get or exists. A failed read ends Allow
	// with an error, so such a rule matters even where another allows.
	reads bool
	// captures are the identifiers the condition names that are captures
	// of its pattern (an iteration variable of the same name counts too:
	// the analysis only over-approximates).
	captures []string
	// authOther: the condition may read more of the caller than whether
	// there is one (request.auth compared with null), its uid, username
	// and roles — claims, or request.auth or request as a whole.
	authOther bool
	// clock: the condition may read more of request than its auth, op,
	// path and resource fields — request.time, or request as a whole. May
	// knows the time, so its answer for such a condition can change from
	// one call to the next.
	clock bool
}

// requestNoClock are the fields of request that hold no time: May treats
// path and resource as unknown and knows auth and op.
var requestNoClock = map[string]bool{"auth": true, "op": true, "path": true, "resource": true}

// authKeyFields are the fields of request.auth a decision cache keys on.
var authKeyFields = map[string]bool{"uid": true, "username": true, "roles": true}

// requestFixed are the fields of request that are the same for every
// document an operation of one caller reads.
var requestFixed = map[string]bool{"auth": true, "op": true}

// identName is the variable an identifier names: a root-scoped ".request"
// (which reaches the request even inside a comprehension whose variable
// shadows request) is request.
func identName(e ast.Expr) string {
	return strings.TrimPrefix(e.AsIdent(), ".")
}

// refsOf analyses a checked condition whose pattern captures names.
func refsOf(a *cel.Ast, names []string) refs {
	root := a.NativeRep().Expr()
	// The request identifiers that are only the operand of a fixed field
	// (request.auth, request.op); any other use sees the whole request.
	fixed := map[int64]bool{}
	// The request identifiers that are only the operand of a field that is
	// not the time; any other use may see request.time.
	noClock := map[int64]bool{}
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.SelectKind {
			return
		}
		sel := e.AsSelect()
		if op := sel.Operand(); op.Kind() == ast.IdentKind && identName(op) == "request" {
			fixed[op.ID()] = requestFixed[sel.FieldName()]
			noClock[op.ID()] = requestNoClock[sel.FieldName()]
		}
	}))
	// What reads of the caller are known to read only the cache key:
	// request (when a field is selected from it), and request.auth when
	// compared with null or when uid, username or roles is selected.
	keyed := map[int64]bool{}
	isAuth := func(e ast.Expr) bool {
		if e.Kind() != ast.SelectKind {
			return false
		}
		op := e.AsSelect().Operand()
		return e.AsSelect().FieldName() == "auth" && op.Kind() == ast.IdentKind && identName(op) == "request"
	}
	isNull := func(e ast.Expr) bool {
		return e.Kind() == ast.LiteralKind && e.AsLiteral() == types.NullValue
	}
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			sel := e.AsSelect()
			if op := sel.Operand(); op.Kind() == ast.IdentKind && identName(op) == "request" {
				keyed[op.ID()] = true
			} else if isAuth(op) && authKeyFields[sel.FieldName()] {
				keyed[op.ID()] = true
			}
		}
		if e.Kind() != ast.CallKind {
			return
		}
		call := e.AsCall()
		if fn := call.FunctionName(); (fn == operators.Equals || fn == operators.NotEquals) && len(call.Args()) == 2 {
			a, b := call.Args()[0], call.Args()[1]
			if isAuth(a) && isNull(b) {
				keyed[a.ID()] = true
			} else if isAuth(b) && isNull(a) {
				keyed[b.ID()] = true
			}
		}
	}))
	var r refs
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(e ast.Expr) {
		if isAuth(e) && !keyed[e.ID()] {
			r.authOther = true
		}
		if e.Kind() != ast.IdentKind {
			return
		}
		switch name := identName(e); {
		case name == stateVar:
			r.perDoc, r.reads = true, true
		case name == "resource":
			r.perDoc = true
		case name == "request":
			if !fixed[e.ID()] {
				r.perDoc = true
			}
			if !keyed[e.ID()] {
				r.authOther = true
			}
			if !noClock[e.ID()] {
				r.clock = true
			}
		case slices.Contains(names, name) && !slices.Contains(r.captures, name):
			r.captures = append(r.captures, name)
		}
	}))
	return r
}

// AllowsAll reports whether auth may perform op (OpGet or OpList, as reads
// use them) on every document directly in collection, a collection path
// whose "*" segments stand for any segment ("users/*/notes"), whatever the
// document's id, data or version: some rule granting op matches every such
// document and its condition reads only what is the same for all of them
// (request.auth, request.op, captures of the collection's literal
// segments) and is true for auth. Such a condition is evaluated once here,
// exactly as Allow would evaluate it for each document, with the same
// result, cost limit included; a rule that errors does not allow.
//
// True means Allow would allow each of those documents: callers may skip
// the per-document decisions. False decides nothing: decide per document.
// It is also false when a rule Allow would evaluate first for some of those
// documents calls get or exists (a failed read makes Allow fail rather
// than deny). collection is not validated.
func (s *Set) AllowsAll(ctx context.Context, auth *Auth, op Op, collection string) bool {
	key, cached := s.decisions.key(auth, op, collection)
	if cached {
		if all, ok := s.decisions.get(key); ok {
			return all
		}
	}
	all := s.allowsAll(ctx, auth, op, collection)
	if cached && ctx.Err() == nil { // an interrupted evaluation decided nothing
		s.decisions.put(key, all)
	}
	return all
}

func (s *Set) allowsAll(ctx context.Context, auth *Auth, op Op, collection string) bool {
	bit := maskOf(op)
	if bit == 0 {
		return false
	}
	var segBuf [16]string
	segs := append(pathpattern.Split(segBuf[:0], collection), "*")
	for _, r := range s.rules {
		if r.ops&bit == 0 || r.constant == constFalse || !r.pat.MayMatch(segs) {
			continue // never decides any of these documents
		}
		if !r.pat.MustMatch(segs) {
			if r.refs.reads {
				return false
			}
			continue // allows some at most: the per-document rules decide those
		}
		if r.constant == constTrue {
			return true
		}
		act, ok := r.fixedActivation(ctx, auth, op, segs)
		if !ok {
			if r.refs.reads {
				return false
			}
			continue
		}
		out, err := r.eval(ctx, act)
		if err == nil && out == types.True {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return false
}

// fixedActivation returns the activation to evaluate r's condition once
// for every document of a collection (segs: the collection's segments and
// "*" for the id): false when the condition reads anything a document can
// change, a capture of a "*" segment or of the final {name=**} (which
// holds the id) included.
func (r *rule) fixedActivation(ctx context.Context, auth *Auth, op Op, segs []string) (*activation, bool) {
	if r.refs.perDoc {
		return nil, false
	}
	act := newActivation(ctx, &Request{Auth: auth, Op: op}, nil)
	for _, name := range r.refs.captures {
		i := r.captureIndex(name)
		if i < 0 || segs[i] == "*" {
			return nil, false
		}
		act.caps = append(act.caps, capture{Name: name, Value: segs[i]})
	}
	return act, true
}

// captureIndex is the segment index of r's {name} capture; -1 for the
// final {name=**}.
func (r *rule) captureIndex(name string) int {
	for i := 0; i < r.pat.Segments(); i++ {
		if r.pat.Segment(i).Name == name {
			return i
		}
	}
	return -1
}

// maxDecisions bounds a Set's decision cache; a full cache starts over.
const maxDecisions = 4096

// maxDecisionKeyBytes bounds the strings one cached decision keeps (the
// collection and the caller's uid, username and roles), so that the cache
// holds at most maxDecisions*maxDecisionKeyBytes of them whatever callers
// send; a larger key is decided each time.
const maxDecisionKeyBytes = 4096

// decisionCache remembers AllowsAll's answers of one Set (a reload makes a
// new Set, and so a new cache). It is used only when no condition reads
// more of the caller than the key holds (refs.authOther), and then the
// answer is a function of the key: a condition AllowsAll evaluates reads
// nothing else that can change (not the time, not a document). The zero
// value is disabled.
type decisionCache struct {
	enabled bool
	mu      sync.RWMutex
	m       map[decisionKey]bool
}

// decisionKey is everything an answer can depend on.
type decisionKey struct {
	op         Op
	ops        opMask // May's operations (op is then "")
	collection string // May: the path
	anonymous  bool
	uid        string
	username   string
	// roles joined with NUL, and how many: the join alone is "" both for
	// no roles and for one empty role (an OIDC token's roles are not
	// validated).
	roles  string
	nroles int
}

// newDecisionCache returns the cache for rules, disabled when a condition
// may read more of the caller than a decisionKey holds.
func newDecisionCache(rules []*rule) decisionCache {
	for _, r := range rules {
		if r.refs.authOther {
			return decisionCache{}
		}
	}
	return decisionCache{enabled: true, m: map[decisionKey]bool{}}
}

// newMayCache returns the cache for May's answers: a partial evaluation
// knows the caller and the time, so the cache is off also when a condition
// may read the time.
func newMayCache(rules []*rule) decisionCache {
	for _, r := range rules {
		if r.refs.clock {
			return decisionCache{}
		}
	}
	return newDecisionCache(rules)
}

// key returns the key of a decision; false when it is not to be cached.
func (c *decisionCache) key(auth *Auth, op Op, collection string) (decisionKey, bool) {
	if !c.enabled {
		return decisionKey{}, false
	}
	k := decisionKey{op: op, collection: collection, anonymous: auth == nil}
	size := len(collection)
	if auth != nil {
		size += len(auth.UID) + len(auth.Username)
		for _, r := range auth.Roles {
			if strings.IndexByte(r, 0) >= 0 {
				return decisionKey{}, false // the join would be ambiguous
			}
			size += len(r) + 1
		}
	}
	if size > maxDecisionKeyBytes {
		return decisionKey{}, false // decided each time: the cache's memory stays bounded
	}
	if auth != nil {
		k.uid, k.username = auth.UID, auth.Username
		k.roles, k.nroles = strings.Join(auth.Roles, "\x00"), len(auth.Roles)
	}
	return k, true
}

func (c *decisionCache) get(k decisionKey) (all, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	all, ok = c.m[k]
	return all, ok
}

func (c *decisionCache) put(k decisionKey, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxDecisions {
		clear(c.m)
	}
	c.m[k] = all
}
