package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	"github.com/loomdb/loom/internal/celjson"
)

// CEL limits.
const (
	// CELCostLimit bounds the CEL cost (roughly: operations performed,
	// string and list sizes included) of one evaluation of a condition;
	// beyond it the evaluation fails, which counts as no match. A plain
	// comparison costs under 20 and walking the 50 recent messages with a
	// string test a few thousand. A pathological condition (nested
	// comprehensions, a regex over every message) reaches the limit in
	// about 10ms; every rule runs on every hook, and a higher limit would
	// let one rule file stall every agent step of every user.
	CELCostLimit = 100_000
	// maxCELBytes bounds the source of one condition.
	maxCELBytes = 4 << 10
	// celInterruptEvery is how many comprehension iterations run between
	// checks of the evaluation's context (its cancellation stops a run).
	celInterruptEvery = 100
)

// contextTypes are the Go types behind `context` and its nested structs.
// Each becomes a CEL object type ("plugins.Context", "plugins.Turn", ...)
// whose fields are named by the `cel` tags, so the checker refuses an
// unknown field (context.turn.tokens) or a type error
// (context.turn.number == 'x') when the rule is loaded, not at every
// evaluation.
var contextTypes = []reflect.Type{
	reflect.TypeFor[Context](), reflect.TypeFor[Turn](), reflect.TypeFor[History](),
	reflect.TypeFor[Message](), reflect.TypeFor[ToolCall](), reflect.TypeFor[User](),
	reflect.TypeFor[Project](), reflect.TypeFor[ToolResult](),
}

// celEnv declares `context`, the string extensions and get() on maps.
var celEnv = mustCELEnv()

func mustCELEnv() *cel.Env {
	args := make([]any, 0, len(contextTypes)+1)
	for _, t := range contextTypes {
		args = append(args, t)
	}
	args = append(args, ext.ParseStructTags(true))
	dynMap := cel.MapType(cel.StringType, cel.DynType)
	env, err := cel.NewEnv(
		ext.NativeTypes(args...),
		withContextTypes,
		cel.Variable("context", cel.ObjectType("plugins.Context")),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		// context.state.get('k', default): the seed's PluginState.get, on
		// any map with string keys (state, settings, event, ...).
		cel.Function("get",
			cel.MemberOverload("plugins_map_get_default", []*cel.Type{dynMap, cel.StringType, cel.DynType}, cel.DynType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return mapGet(args[0], args[1], args[2]) })),
			cel.MemberOverload("plugins_map_get", []*cel.Type{dynMap, cel.StringType}, cel.DynType,
				cel.BinaryBinding(func(m, k ref.Val) ref.Val { return mapGet(m, k, types.NullValue) })),
		),
		cel.ParserExpressionSizeLimit(maxCELBytes),
	)
	if err != nil {
		panic(fmt.Sprintf("plugins: CEL environment: %v", err))
	}
	return env
}

// withContextTypes wraps the type provider and adapter NativeTypes
// installed, for two things cel-go v0.31 does not do:
//
//   - NativeTypes knows no CEL type for a map[string]any field (state,
//     settings, event, arguments) and leaves it out of the struct, so
//     context.state would be an unknown field; the provider declares such a
//     field map(string, dyn).
//   - the registry converts a json.Number (what documents decode numbers
//     to: state, settings, event and tool arguments come from documents)
//     to a string, so context.state.get('count', 0) > 3 would be a type
//     error at run time; the adapter converts them as celjson does (int
//     when integral, else double), and wraps maps, lists and the context's
//     structs so that values nested in them go through it as well.
func withContextTypes(env *cel.Env) (*cel.Env, error) {
	a := contextAdapter{base: env.CELTypeAdapter(), native: map[reflect.Type]*types.NativeType{}}
	p := contextProvider{Provider: env.CELTypeProvider(), byName: map[string]reflect.Type{}}
	for _, t := range contextTypes {
		nt, err := types.NewNativeType(t, types.ParseStructTags(true))
		if err != nil {
			return nil, fmt.Errorf("CEL type %v: %w", t, err)
		}
		a.native[t] = nt
		p.byName[nt.TypeName()] = t
	}
	env, err := cel.CustomTypeAdapter(a)(env)
	if err != nil {
		return nil, err
	}
	return cel.CustomTypeProvider(p)(env)
}

// contextProvider is the registry with the map[string]any fields of the
// context's structs declared as map(string, dyn).
type contextProvider struct {
	types.Provider
	byName map[string]reflect.Type // CEL type name → Go type
}

var dynMapType = types.NewMapType(types.StringType, types.DynType)

func (p contextProvider) FindStructFieldType(structType, fieldName string) (*types.FieldType, bool) {
	if ft, ok := p.Provider.FindStructFieldType(structType, fieldName); ok {
		return ft, true
	}
	rt, ok := p.byName[structType]
	if !ok {
		return nil, false
	}
	for _, f := range reflect.VisibleFields(rt) {
		if f.Tag.Get("cel") != fieldName || f.Type != reflect.TypeFor[map[string]any]() {
			continue
		}
		get := func(obj any) reflect.Value {
			v := reflect.Indirect(reflect.ValueOf(obj))
			if v.Kind() != reflect.Struct || v.Type() != rt {
				return reflect.Value{}
			}
			return v.FieldByIndex(f.Index)
		}
		return &types.FieldType{
			Type: dynMapType,
			IsSet: func(obj any) bool {
				v := get(obj)
				return v.IsValid() && v.Len() > 0
			},
			GetFrom: func(obj any) (any, error) {
				v := get(obj)
				if !v.IsValid() {
					return nil, fmt.Errorf("no field %s on %T", fieldName, obj)
				}
				return v.Interface(), nil
			},
		}, true
	}
	return nil, false
}

// mapGet is m.get(k, def): m[k] when present, else def.
func mapGet(m, k, def ref.Val) ref.Val {
	mapper, ok := m.(interface {
		Find(ref.Val) (ref.Val, bool)
	})
	if !ok {
		return types.MaybeNoSuchOverloadErr(m)
	}
	if v, found := mapper.Find(k); found {
		return v
	}
	return def
}

// contextAdapter converts the Context to CEL values lazily, as fields are
// selected (see withContextTypes).
type contextAdapter struct {
	base   types.Adapter
	native map[reflect.Type]*types.NativeType
}

func (a contextAdapter) NativeToValue(v any) ref.Val {
	switch t := v.(type) {
	case json.Number:
		return celjson.NumberVal(t)
	case map[string]any:
		return types.NewStringInterfaceMap(a, t)
	case []any:
		return types.NewDynamicList(a, t)
	case []Message, []ToolCall:
		return types.NewDynamicList(a, t)
	case *Context:
		return a.native[reflect.TypeFor[Context]()].Adapt(a, t)
	}
	if nt, ok := a.native[reflect.TypeOf(v)]; ok {
		return nt.Adapt(a, v)
	}
	return a.base.NativeToValue(v)
}

// celCondition is a compiled CEL condition.
type celCondition struct {
	prg cel.Program
}

// compileCEL type-checks expr against the rule context (`context`, of
// Context's type) and returns its program, cost-limited. The expression
// must be of type bool.
func compileCEL(expr string) (Condition, error) {
	if len(expr) > maxCELBytes {
		return nil, fmt.Errorf("condition is %d bytes, over the limit of %d", len(expr), maxCELBytes)
	}
	a, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	// dyn (context.state.get('x', false), context.settings.enabled) is
	// accepted and checked at evaluation.
	if t := a.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
		return nil, fmt.Errorf("condition has type %s, want bool", t)
	}
	prg, err := celEnv.Program(a,
		cel.CostLimit(CELCostLimit),
		cel.InterruptCheckFrequency(celInterruptEvery),
		cel.CustomDecoratorV2(boundReplace),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, err
	}
	return celCondition{prg}, nil
}

// celActivation binds `context`.
type celActivation struct{ v ref.Val }

var _ interpreter.Activation = celActivation{}

func (a celActivation) ResolveName(name string) (any, bool) {
	if name == "context" {
		return a.v, true
	}
	return nil, false
}

func (a celActivation) Parent() interpreter.Activation { return nil }

// Match evaluates the condition. A runtime error (a missing map key, a
// division by zero), the cost limit or ctx's end is an error, which counts
// as no match.
func (c celCondition) Match(ctx context.Context, rc *Context) (bool, error) {
	if rc == nil {
		return false, errors.New("condition: no context")
	}
	out, _, err := c.prg.ContextEval(ctx, celActivation{celEnv.CELTypeAdapter().NativeToValue(rc)})
	if err != nil {
		return false, fmt.Errorf("condition: %w", err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("condition returned %s, want bool", out.Type().TypeName())
	}
	return bool(b), nil
}
