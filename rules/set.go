package rules

import (
	"context"
	_ "embed"
	"fmt"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/pathpattern"
)

// Auth is the authenticated caller; nil means anonymous (request.auth ==
// null in CEL). In CEL it is the map {uid, username, roles, claims}; a nil
// Roles is an empty list and a nil Claims an empty map. Claims values may be
// anything encoding/json decodes (json.Number included, see Request).
type Auth struct {
	UID, Username string
	Roles         []string
	Claims        map[string]any
}

// Op is the operation a request performs on a document.
type Op string

// Operations. In a rule's allow, "read" is get+list and "write" is
// create+update+delete.
const (
	OpGet    Op = "get"
	OpList   Op = "list"
	OpCreate Op = "create"
	OpUpdate Op = "update"
	OpDelete Op = "delete"
)

// opMask is a set of operations.
type opMask uint8

// maskOf returns the bit of op, 0 for an unknown op.
func maskOf(op Op) opMask {
	switch op {
	case OpGet:
		return 1 << 0
	case OpList:
		return 1 << 1
	case OpCreate:
		return 1 << 2
	case OpUpdate:
		return 1 << 3
	case OpDelete:
		return 1 << 4
	}
	return 0
}

// Request is one access decision.
//
// Document data (Resource, Existing, and what a Getter returns) holds
// values as collections.DecodeJSON produces them. In CEL a json.Number is an
// int when it is integral and fits int64 ("3", "3.0", "3e0"), a double
// otherwise; maps and lists convert element by element as they are read.
type Request struct {
	Auth *Auth
	Op   Op     // OpGet, OpList, OpCreate, OpUpdate, OpDelete
	Path string // the document path (for list: each listed document's path)
	// Time is request.time; the zero Time means time.Now().
	Time time.Time
	// Resource is request.resource.data: the document data as it would be
	// after the write (nil for reads and deletes, and then request.resource
	// is null).
	Resource map[string]any
	// Existing is resource.data: the stored document's data, nil when there
	// is none (and then resource is null). For list it is the data of the
	// listed document being decided.
	Existing map[string]any
}

// Getter reads other documents of the same database for get()/exists();
// (nil, false, nil) when absent.
type Getter interface {
	GetData(ctx context.Context, path string) (map[string]any, bool, error)
}

// Set is a compiled list of rules. It is immutable and safe for concurrent
// use.
type Set struct {
	rules     []*rule
	decisions decisionCache // AllowsAll's answers
	mays      decisionCache // May's answers
}

// constant classifies if expressions that are the literal true or false.
type constant int8

const (
	constNone constant = iota
	constTrue
	constFalse
)

// rule is one compiled [[rule]].
type rule struct {
	pat      *pattern
	ops      opMask
	src      string // the if expression
	prg      cel.Program
	partial  cel.Program // prg for partial evaluation (MayList)
	constant constant
	refs     refs // what the condition reads (AllowsAll)
}

// eval runs the rule's program on act. When nothing can interrupt (ctx
// has no Done channel) it skips ContextEval's per-call context plumbing;
// CostLimit still bounds the evaluation.
func (r *rule) eval(ctx context.Context, act *activation) (ref.Val, error) {
	if ctx.Done() == nil {
		out, _, err := r.prg.Eval(act)
		return out, err
	}
	out, _, err := r.prg.ContextEval(ctx, act)
	return out, err
}

// Len returns the number of rules.
func (s *Set) Len() int { return len(s.rules) }

// Allow decides req: it is allowed when any rule whose pattern matches
// req.Path and whose allow covers req.Op evaluates its if expression to
// true. No such rule → (false, nil).
//
// A rule whose evaluation fails (a missing field, a type error, the cost
// limit, more than MaxDocumentReads get/exists calls, a bad path given to
// get) simply does not allow; the other rules are still tried. Allow
// returns an error, and false, only when the decision could not be made: an
// invalid req.Op or req.Path, a Getter failure (or a get/exists call with a
// nil g), or ctx ending. g may be nil when no rule calls get or exists.
func (s *Set) Allow(ctx context.Context, req Request, g Getter) (bool, error) {
	bit := maskOf(req.Op)
	if bit == 0 {
		return false, fmt.Errorf("rules: unknown operation %q", req.Op)
	}
	if err := collections.ValidateDocPath(req.Path); err != nil {
		return false, fmt.Errorf("rules: %w", err)
	}
	var (
		segBuf [16]string
		capBuf [8]capture
		act    *activation // built on the first evaluation
	)
	segs := pathpattern.Split(segBuf[:0], req.Path)
	for _, r := range s.rules {
		if r.ops&bit == 0 || r.constant == constFalse {
			continue
		}
		caps, ok := r.pat.Match(req.Path, segs, capBuf[:0])
		if !ok {
			continue
		}
		if r.constant == constTrue {
			return true, nil
		}
		if act == nil {
			act = newActivation(ctx, &req, g)
		}
		act.caps = caps
		out, err := r.eval(ctx, act)
		if act.state.fatal != nil {
			return false, act.state.fatal
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return false, fmt.Errorf("rules: %w", cerr)
			}
			continue
		}
		if out == types.True {
			return true, nil
		}
	}
	return false, nil
}

// MayList reports whether some rule could allow auth to list a document
// directly in collection, a collection path whose "*" segments stand for
// any segment ("users/*/notes"). It is false only when no rule granting list
// has a pattern that can match collection + "/" + <any id> and a condition
// that, partially evaluated with what is known before any document is read
// (auth, the operation, the time, captures of literal segments), can still
// be true. So true does not mean any document will be allowed; false means
// none can be. Servers use it to refuse at once a query no rule could ever
// allow. collection is not validated.
func (s *Set) MayList(auth *Auth, collection string) bool {
	var segBuf [16]string
	segs := append(pathpattern.Split(segBuf[:0], collection), "*")
	return s.may(auth, segs, OpList)
}

// May reports whether some rule could allow auth one of ops on a document
// at path, where "*" segments stand for any segment ("posts/*" for a create
// whose id is not known yet); path "" stands for any document at all. Like
// MayList it partially evaluates each candidate rule with what is known
// before any document (or request body) is read: false means no such
// request of the caller can be allowed, so a server can refuse it before
// reading its body. path is not validated; an unknown op never matches.
//
// Answers are cached per Set when no condition reads the time or more of
// the caller than uid, username and roles (see decisionCache): the partial
// evaluation then depends on nothing but the caller, the operations and the
// path, so a create in the same collection by the same caller is decided
// once.
func (s *Set) May(auth *Auth, path string, ops ...Op) bool {
	var mask opMask
	for _, op := range ops {
		mask |= maskOf(op) // an unknown op adds nothing: it never matches
	}
	key, cached := s.mays.key(auth, "", path)
	if cached {
		key.ops = mask
		if may, ok := s.mays.get(key); ok {
			return may
		}
	}
	var segs []string // nil: any path
	if path != "" {
		var segBuf [16]string
		segs = pathpattern.Split(segBuf[:0], path)
	}
	may := s.may(auth, segs, ops...)
	if cached {
		s.mays.put(key, may)
	}
	return may
}

// may is the partial evaluation behind MayList and May: segs are the
// path's segments ("*" = any), nil for any path.
func (s *Set) may(auth *Auth, segs []string, ops ...Op) bool {
	for _, op := range ops {
		bit := maskOf(op)
		for _, r := range s.rules {
			if r.ops&bit == 0 || r.constant == constFalse || (segs != nil && !r.pat.MayMatch(segs)) {
				continue
			}
			if r.constant == constTrue || r.mayAllow(auth, op, segs) {
				return true
			}
		}
	}
	return false
}

// defaultSource is security.toml, the built-in rules, embedded so that
// they apply wherever the server starts: a signed-in user may read every
// document below users/{their uid}/ (not users/{uid} itself: {rest=**}
// needs at least one segment) and write every one except the agent
// runtime's: in a chat below users/{uid}/orch-chats/ a user may only write
// the chat document and create their own 'user' messages, and
// users/{uid}/agent-usage/ is read-only. A service key with the "service"
// role (the agent runtime's handlers) may read and write everything below
// users/. Everything else is denied, which leaves it to the admin key.
//
//go:embed security.toml
var defaultSource string

// DefaultSource returns the TOML of the built-in rules (security.toml, with
// its comments).
func DefaultSource() string { return defaultSource }

var defaultSet = sync.OnceValue(func() *Set {
	s, err := Parse([]byte(defaultSource), "built-in security.toml")
	if err != nil {
		panic(err) // embedded at build time; the tests parse it
	}
	return s
})

// Default returns the built-in rules, compiled from DefaultSource on first
// use. The Set is shared, which is safe: it is immutable.
func Default() *Set { return defaultSet() }
