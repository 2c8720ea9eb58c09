package triggers

import (
	"fmt"
	"sort"
	"strings"

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

// compileCEL compiles and type-checks a condition (output bool) or, with
// wantString, an ordering key (output string). dyn is accepted for both and
// checked at evaluation.
func compileCEL(src string, wantString bool) (cel.Program, error) {
	a, iss := celEnv.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	want, wantName := types.BoolKind, "bool"
	if wantString {
		want, wantName = types.StringKind, "string"
	}
	if k := a.OutputType().Kind(); k != want && k != types.DynKind {
		return nil, fmt.Errorf("expression has type %s, want %s", a.OutputType(), wantName)
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

// Eval evaluates the condition (empty = true) and, when it is true and an
// orderingKey is set, the key. A CEL runtime error (or the cost limit) is
// returned as err and counts as no match for the caller; so does a
// condition that is not a bool or a key that is not a string (an int key is
// converted to its decimal text).
func (c *Compiled) Eval(ev *Event) (matched bool, orderingKey string, err error) {
	if c.cond == nil && c.key == nil {
		return true, "", nil
	}
	act := eventActivation{celjson.Adapter{}.NativeToValue(ev.Map())}
	if c.cond != nil {
		out, _, err := c.cond.Eval(act)
		if err != nil {
			return false, "", fmt.Errorf("trigger %q: condition: %w", c.Def.ID, err)
		}
		b, ok := out.(types.Bool)
		if !ok {
			return false, "", fmt.Errorf("trigger %q: condition returned %s, want bool", c.Def.ID, out.Type().TypeName())
		}
		if !b {
			return false, "", nil
		}
	}
	if c.key != nil {
		out, _, err := c.key.Eval(act)
		if err != nil {
			return false, "", fmt.Errorf("trigger %q: orderingKey: %w", c.Def.ID, err)
		}
		switch v := out.(type) {
		case types.String:
			orderingKey = string(v)
		case types.Int, types.Uint:
			orderingKey = fmt.Sprint(v.Value())
		default:
			return false, "", fmt.Errorf("trigger %q: orderingKey returned %s, want string", c.Def.ID, out.Type().TypeName())
		}
	}
	return true, orderingKey, nil
}
