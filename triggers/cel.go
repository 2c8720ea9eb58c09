package triggers

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/loomdb/loom/internal/celjson"
)

// CEL limits.
const (
	// CostLimit bounds the CEL cost (roughly: operations performed) of one
	// evaluation of a condition or an ordering key, as for the rules; beyond
	// it the evaluation fails, which counts as no match.
	CostLimit = 10_000
	// maxExprBytes bounds the source of one expression.
	maxExprBytes = 16 << 10
)

// eventFields are the fields of the CEL variable event; envelopeFields
// those of event.document and event.before. Selecting any other field of
// them is a compile error (a typo would otherwise only show at run time,
// as an evaluation error on every change).
var (
	eventFields = []string{"type", "database", "collection", "path", "id", "params",
		"document", "before", "changedFields", "timestamp"}
	envelopeFields = []string{"id", "collection", "path", "version", "createdAt", "updatedAt", "data"}
)

// celEnv declares the one variable, event: a map whose values go through
// the json.Number-aware adapter.
var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.CustomTypeAdapter(celjson.Adapter{}),
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.ParserExpressionSizeLimit(maxExprBytes),
	)
	if err != nil {
		panic(fmt.Sprintf("triggers: CEL environment: %v", err))
	}
	return env
}()

// celOutput is the output an expression must have: one of kinds (dyn is
// accepted for all and checked at evaluation).
type celOutput struct {
	kinds []types.Kind
	name  string
}

var (
	outBool   = celOutput{[]types.Kind{types.BoolKind}, "bool"}
	outString = celOutput{[]types.Kind{types.StringKind}, "string"}
	outTime   = celOutput{[]types.Kind{types.TimestampKind, types.IntKind, types.UintKind, types.DoubleKind, types.StringKind},
		"a timestamp, a number (unix milliseconds) or an RFC 3339 string"}
)

// compileCEL compiles and type-checks a condition (outBool), an ordering
// key (outString) or a deliverAt (outTime).
func compileCEL(src string, want celOutput) (cel.Program, error) {
	a, iss := celEnv.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if k := a.OutputType().Kind(); k != types.DynKind && !slices.Contains(want.kinds, k) {
		return nil, fmt.Errorf("expression has type %s, want %s", a.OutputType(), want.name)
	}
	if err := checkFields(a.NativeRep().Expr(), false); err != nil {
		return nil, err
	}
	return celEnv.Program(a, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptOptimize))
}

// checkFields refuses a selection of an unknown field of event, or of
// event.document / event.before. shadowed is true inside a comprehension
// whose own variable is called event.
func checkFields(e ast.Expr, shadowed bool) error {
	switch e.Kind() {
	case ast.SelectKind:
		s := e.AsSelect()
		op := s.Operand()
		if !shadowed && op.Kind() == ast.IdentKind && op.AsIdent() == "event" && !contains(eventFields, s.FieldName()) {
			return fmt.Errorf("event has no field %q (fields: %s)", s.FieldName(), strings.Join(sortedCopy(eventFields), ", "))
		}
		if !shadowed && op.Kind() == ast.SelectKind {
			inner := op.AsSelect()
			if io := inner.Operand(); io.Kind() == ast.IdentKind && io.AsIdent() == "event" &&
				(inner.FieldName() == "document" || inner.FieldName() == "before") &&
				!contains(envelopeFields, s.FieldName()) {
				return fmt.Errorf("event.%s has no field %q (fields: %s; user fields are under event.%s.data)",
					inner.FieldName(), s.FieldName(), strings.Join(envelopeFields, ", "), inner.FieldName())
			}
		}
		return checkFields(op, shadowed)
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			if err := checkFields(c.Target(), shadowed); err != nil {
				return err
			}
		}
		for _, a := range c.Args() {
			if err := checkFields(a, shadowed); err != nil {
				return err
			}
		}
	case ast.ListKind:
		for _, x := range e.AsList().Elements() {
			if err := checkFields(x, shadowed); err != nil {
				return err
			}
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			if err := checkFields(me.Key(), shadowed); err != nil {
				return err
			}
			if err := checkFields(me.Value(), shadowed); err != nil {
				return err
			}
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if err := checkFields(f.AsStructField().Value(), shadowed); err != nil {
				return err
			}
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		if err := checkFields(c.IterRange(), shadowed); err != nil {
			return err
		}
		if err := checkFields(c.AccuInit(), shadowed); err != nil {
			return err
		}
		inner := shadowed || c.IterVar() == "event" || c.IterVar2() == "event" || c.AccuVar() == "event"
		for _, x := range []ast.Expr{c.LoopCondition(), c.LoopStep(), c.Result()} {
			if err := checkFields(x, inner); err != nil {
				return err
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedCopy(list []string) []string {
	c := append([]string(nil), list...)
	sort.Strings(c)
	return c
}

// eventActivation binds the variable event.
type eventActivation struct{ v ref.Val }

var _ interpreter.Activation = eventActivation{}

func (a eventActivation) ResolveName(name string) (any, bool) {
	if name == "event" {
		return a.v, true
	}
	return nil, false
}

func (a eventActivation) Parent() interpreter.Activation { return nil }

// MaxDeliverAhead bounds how far ahead a deliverAt may schedule a delivery.
const MaxDeliverAhead = 366 * 24 * time.Hour

// Result is what a trigger makes of an event it matches.
type Result struct {
	// Matched: the condition holds (and the other expressions evaluated).
	Matched bool
	// OrderingKey is the evaluated orderingKey ("" without one).
	OrderingKey string
	// DeliverAt is when the first attempt is due, unix ms: the evaluated
	// deliverAt, or now when that is in the past; 0 without a deliverAt.
	DeliverAt int64
}

// Evaluate evaluates the condition (empty = true) and, when it is true,
// the orderingKey and the deliverAt. A CEL runtime error (or the cost
// limit) is returned as err and counts as no match for the caller; so does
// a condition that is not a bool, a key that is not a string (an int key
// is converted to its decimal text), and a deliverAt that is not a time
// (a timestamp, a number of unix milliseconds or an RFC 3339 string),
// is negative, NaN or infinite, or is more than MaxDeliverAhead after now.
// A deliverAt before now is now.
func (c *Compiled) Evaluate(ev *Event, now time.Time) (Result, error) {
	if c.cond == nil && c.key == nil && c.at == nil {
		return Result{Matched: true}, nil
	}
	act := eventActivation{celjson.Adapter{}.NativeToValue(ev.Map())}
	if c.cond != nil {
		out, _, err := c.cond.Eval(act)
		if err != nil {
			return Result{}, fmt.Errorf("trigger %q: condition: %w", c.Def.ID, err)
		}
		b, ok := out.(types.Bool)
		if !ok {
			return Result{}, fmt.Errorf("trigger %q: condition returned %s, want bool", c.Def.ID, out.Type().TypeName())
		}
		if !b {
			return Result{}, nil
		}
	}
	var r Result
	if c.key != nil {
		out, _, err := c.key.Eval(act)
		if err != nil {
			return Result{}, fmt.Errorf("trigger %q: orderingKey: %w", c.Def.ID, err)
		}
		switch v := out.(type) {
		case types.String:
			r.OrderingKey = string(v)
		case types.Int, types.Uint:
			r.OrderingKey = fmt.Sprint(v.Value())
		default:
			return Result{}, fmt.Errorf("trigger %q: orderingKey returned %s, want string", c.Def.ID, out.Type().TypeName())
		}
	}
	if c.at != nil {
		out, _, err := c.at.Eval(act)
		if err != nil {
			return Result{}, fmt.Errorf("trigger %q: deliverAt: %w", c.Def.ID, err)
		}
		if r.DeliverAt, err = deliverAtOf(out, now); err != nil {
			return Result{}, fmt.Errorf("trigger %q: deliverAt: %w", c.Def.ID, err)
		}
	}
	r.Matched = true
	return r, nil
}

// deliverAtOf converts a deliverAt result to unix ms: no earlier than now,
// no later than now + MaxDeliverAhead (an error).
func deliverAtOf(out ref.Val, now time.Time) (int64, error) {
	nowMs := now.UnixMilli()
	limit := nowMs + MaxDeliverAhead.Milliseconds()
	tooFar := func(what string) error {
		return fmt.Errorf("%s is more than %d days ahead", what, MaxDeliverAhead/(24*time.Hour))
	}
	var at int64
	switch v := out.(type) {
	case types.Timestamp:
		at = v.Time.UnixMilli()
	case types.Int:
		at = int64(v)
	case types.Uint:
		if uint64(v) > uint64(limit) {
			return 0, tooFar(fmt.Sprintf("%d ms", uint64(v)))
		}
		at = int64(v)
	case types.Double:
		f := float64(v)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, fmt.Errorf("%v is not a time", f)
		case f > float64(limit):
			return 0, tooFar(fmt.Sprintf("%v ms", f))
		case f < 0:
			return 0, fmt.Errorf("%v ms is negative", f)
		}
		at = int64(f)
	case types.String:
		t, err := time.Parse(time.RFC3339Nano, string(v))
		if err != nil {
			return 0, fmt.Errorf("%q is not an RFC 3339 time", truncate(string(v), 64))
		}
		at = t.UnixMilli()
	default:
		return 0, fmt.Errorf("returned %s, want a timestamp, a number (unix milliseconds) or an RFC 3339 string", out.Type().TypeName())
	}
	switch {
	case at < 0:
		return 0, fmt.Errorf("%d ms is negative (before 1970)", at)
	case at > limit:
		return 0, tooFar(time.UnixMilli(at).UTC().Format(time.RFC3339))
	case at < nowMs:
		return nowMs, nil
	}
	return at, nil
}
