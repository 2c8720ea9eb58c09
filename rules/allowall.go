package rules

import (
	"context"
	"slices"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

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
}

// requestFixed are the fields of request that are the same for every
// document an operation of one caller reads.
var requestFixed = map[string]bool{"auth": true, "op": true}

// refsOf analyses a checked condition whose pattern captures names.
func refsOf(a *cel.Ast, names []string) refs {
	root := a.NativeRep().Expr()
	// The request identifiers that are only the operand of a fixed field
	// (request.auth, request.op); any other use sees the whole request.
	fixed := map[int64]bool{}
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.SelectKind {
			return
		}
		sel := e.AsSelect()
		if op := sel.Operand(); op.Kind() == ast.IdentKind && op.AsIdent() == "request" && requestFixed[sel.FieldName()] {
			fixed[op.ID()] = true
		}
	}))
	var r refs
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.IdentKind {
			return
		}
		switch name := e.AsIdent(); {
		case name == stateVar:
			r.perDoc, r.reads = true, true
		case name == "resource":
			r.perDoc = true
		case name == "request":
			if !fixed[e.ID()] {
				r.perDoc = true
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
		var (
			out ref.Val
			err error
		)
		if ctx.Done() == nil {
			out, _, err = r.prg.Eval(act)
		} else {
			out, _, err = r.prg.ContextEval(ctx, act)
		}
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
