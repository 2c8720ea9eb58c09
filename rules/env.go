package rules

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/celjson"
)

// Evaluation limits.
const (
	// MaxDocumentReads is how many get() and exists() calls one request may
	// make, over all the rules Allow evaluates for it. A call beyond it is
	// an evaluation error, so the rule making it does not allow.
	MaxDocumentReads = 10
	// CostLimit bounds the CEL cost (roughly: operations performed) of one
	// rule evaluation; beyond it the evaluation stops with an error and the
	// rule does not allow. A plain comparison rule costs under 20, and
	// 10,000 lets a rule walk a list of a couple of thousand elements. The
	// limit also caps what a pathological rule can cost: a few milliseconds
	// per evaluation, which a list pays per document. (Measured with
	// cel-go v0.31: about 0.3µs per cost unit inside comprehensions, where
	// cost tracking itself is superlinear; that is why the limit is not
	// higher.)
	CostLimit = 10_000
	// maxExprBytes bounds the source of one if expression.
	maxExprBytes = 16 << 10
	// interruptEvery is how many comprehension iterations run between
	// checks of the request context.
	interruptEvery = 100
)

// stateVar is the hidden variable that carries the per-request state to
// get() and exists(). "@" cannot start an identifier a user writes, so only
// the get and exists macros below can refer to it.
const stateVar = "@loom"

// stateTypeName is the opaque CEL type of stateVar. It is stripped from the
// checker's messages, which would otherwise show it in "no matching overload
// for 'get' applied to '(loom.rules.state, int)'".
const stateTypeName = "loom.rules.state"

var stateType = types.NewOpaqueType(stateTypeName)

// baseEnv declares everything but the captured path variables, which each
// rule adds with Extend.
var baseEnv = mustBaseEnv()

func mustBaseEnv() *cel.Env {
	st := cel.OpaqueType(stateTypeName)
	// get(p) and exists(p) are rewritten to get(@loom, p) and exists(@loom,
	// p): a function binding cannot see the activation, and this way the
	// per-request Getter, context and budget travel in one.
	withState := func(fn string) cel.Macro {
		return cel.GlobalMacro(fn, 1, func(eh cel.MacroExprFactory, _ ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
			return eh.NewCall(fn, eh.NewIdent(stateVar), args[0]), nil
		})
	}
	env, err := cel.NewEnv(
		cel.CustomTypeAdapter(adapter{}),
		cel.Variable("request", cel.DynType),
		cel.Variable("resource", cel.DynType),
		cel.Variable(stateVar, st),
		cel.Macros(withState("get"), withState("exists")),
		cel.Function("get", cel.Overload("loom_rules_get", []*cel.Type{st, cel.StringType}, cel.DynType,
			cel.BinaryBinding(func(s, p ref.Val) ref.Val { return callGetter(s, p, false) }))),
		cel.Function("exists", cel.Overload("loom_rules_exists", []*cel.Type{st, cel.StringType}, cel.BoolType,
			cel.BinaryBinding(func(s, p ref.Val) ref.Val { return callGetter(s, p, true) }))),
		changedKeysFunc(),
		cel.ParserExpressionSizeLimit(maxExprBytes),
	)
	if err != nil {
		panic(fmt.Sprintf("rules: CEL environment: %v", err))
	}
	return env
}

// compileExpr compiles an if expression for a rule whose pattern captures
// names. The result must be bool (or dyn, checked at evaluation). partial
// is the same expression for partial evaluation (MayList).
func compileExpr(src string, names []string) (prg, partial cel.Program, _ *cel.Ast, _ error) {
	env := baseEnv
	if len(names) > 0 {
		opts := make([]cel.EnvOption, len(names))
		for i, n := range names {
			opts[i] = cel.Variable(n, cel.StringType)
		}
		var err error
		if env, err = baseEnv.Extend(opts...); err != nil {
			return nil, nil, nil, err
		}
	}
	a, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, nil, nil, errors.New(strings.ReplaceAll(iss.Err().Error(), stateTypeName+", ", ""))
	}
	if t := a.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
		return nil, nil, nil, fmt.Errorf("expression has type %s, want bool", t)
	}
	prg, err := env.Program(a,
		cel.CostLimit(CostLimit), changedKeysCost(),
		cel.InterruptCheckFrequency(interruptEvery),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, nil, nil, err
	}
	partial, err = env.Program(a, cel.CostLimit(CostLimit), changedKeysCost(), cel.EvalOptions(cel.OptPartialEval))
	if err != nil {
		return nil, nil, nil, err
	}
	return prg, partial, a, nil
}

// mayAllow partially evaluates r's condition for op on a path (segs: its
// segments, "*" standing for any segment; nil for any path): what depends
// on the documents — resource, request.path, request.resource, get/exists
// and captures of "*" segments — is unknown; the caller, the operation, the
// time and the captured literal segments are known. It is false only when
// the condition can never be true, whatever the documents.
func (r *rule) mayAllow(auth *Auth, op Op, segs []string) bool {
	req := Request{Auth: auth, Op: op}
	act := newActivation(context.Background(), &req, nil)
	unknown := []*cel.AttributePatternType{
		cel.AttributePattern("resource"),
		cel.AttributePattern("request").QualString("path"),
		cel.AttributePattern("request").QualString("resource"),
		cel.AttributePattern(stateVar),
	}
	for i := 0; i < r.pat.Segments(); i++ {
		name := r.pat.Segment(i).Name
		if name == "" {
			continue
		}
		if i < len(segs) && segs[i] != "*" {
			act.caps = append(act.caps, capture{Name: name, Value: segs[i]})
		} else {
			unknown = append(unknown, cel.AttributePattern(name))
		}
	}
	if rest := r.pat.RestName(); rest != "" {
		unknown = append(unknown, cel.AttributePattern(rest))
	}
	vars, err := cel.PartialVars(act, unknown...)
	if err != nil {
		return true // cannot tell: never refuse what a rule might allow
	}
	out, _, _ := r.partial.Eval(vars)
	// An error result was not rescued by any unknown, so no document can
	// make it true either.
	return out == types.True || types.IsUnknown(out)
}

// literalBool reports whether the checked expression is the literal true or
// false.
func literalBool(a *cel.Ast) (value, ok bool) {
	e := a.NativeRep().Expr()
	if e.Kind() != ast.LiteralKind {
		return false, false
	}
	b, ok := e.AsLiteral().(types.Bool)
	return bool(b), ok
}

// state is the per-request value behind stateVar. It is used by one
// goroutine (Allow's) at a time.
type state struct {
	ctx   context.Context
	g     Getter
	reads int
	// fatal is the first Getter failure. Allow returns it instead of a
	// decision: a rule that could not read what it needs must not be
	// mistaken for one that denied.
	fatal error
}

var _ ref.Val = (*state)(nil)

func (s *state) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to %v", stateTypeName, t)
}
func (s *state) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("%s has no conversions", stateTypeName)
}
func (s *state) Equal(o ref.Val) ref.Val { return types.Bool(o == ref.Val(s)) }
func (s *state) Type() ref.Type          { return stateType }
func (s *state) Value() any              { return s }

// callGetter implements get(path) (exists=false) and exists(path).
func callGetter(sv, pv ref.Val, exists bool) ref.Val {
	fn := "get"
	if exists {
		fn = "exists"
	}
	s, ok := sv.(*state)
	if !ok {
		return types.NewErr("%s: no request state", fn)
	}
	p, ok := pv.(types.String)
	if !ok {
		return types.NewErr("%s: path must be a string", fn)
	}
	path := string(p)
	if err := collections.ValidateDocPath(path); err != nil {
		return types.NewErr("%s(%q): %v", fn, path, err)
	}
	if s.fatal != nil {
		return types.NewErr("%s(%q): an earlier read failed", fn, path)
	}
	if s.g == nil {
		s.fatal = fmt.Errorf("rules: %s(%q): no Getter to read documents with", fn, path)
		return types.WrapErr(s.fatal)
	}
	if s.reads >= MaxDocumentReads {
		return types.NewErr("%s(%q): more than %d get/exists calls in one request", fn, path, MaxDocumentReads)
	}
	s.reads++
	data, found, err := s.g.GetData(s.ctx, path)
	if err != nil {
		s.fatal = fmt.Errorf("rules: %s(%q): %w", fn, path, err)
		return types.WrapErr(s.fatal)
	}
	if exists {
		return types.Bool(found)
	}
	if !found {
		return types.NullValue
	}
	if data == nil {
		data = map[string]any{}
	}
	return dataVal(data)
}

// adapter is the json.Number-aware CEL type adapter shared with triggers.
type adapter = celjson.Adapter

// activation holds the variables of one Allow call. It is built once and
// shared by the rules Allow evaluates; values are converted only when an
// expression reads them.
type activation struct {
	req      Request
	request  requestVal
	resource ref.Val // nil until first read
	state    state
	caps     []capture // the current rule's captures
}

var _ interpreter.Activation = (*activation)(nil)

func newActivation(ctx context.Context, req *Request, g Getter) *activation {
	a := &activation{req: *req, state: state{ctx: ctx, g: g}}
	t := req.Time
	if t.IsZero() {
		t = time.Now()
	}
	a.request = requestVal{req: &a.req, time: types.Timestamp{Time: t}}
	return a
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "request":
		return &a.request, true
	case "resource":
		if a.resource == nil {
			a.resource = types.NullValue
			if a.req.Existing != nil {
				a.resource = dataVal(a.req.Existing)
			}
		}
		return a.resource, true
	case stateVar:
		return &a.state, true
	}
	for _, c := range a.caps {
		if c.Name == name {
			return types.String(c.Value), true
		}
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }
