package rules

import (
	"slices"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// changedKeys(before, after) is the sorted list of the top-level keys that
// differ between two maps: added, removed, or with a value that is not
// equal (CEL ==); null stands for an empty map (resource.data of a
// create: changedKeys(resource == null ? {} : resource.data, ...) or
// simply changedKeys(null, ...)).
//
// It is what "only these fields change" rules need: comparing every other
// field in the rule itself (resource.data[k] == request.resource.data[k])
// costs CEL about one unit per ten bytes compared, so a document with a
// long text field (a task's instruction, a tool call's arguments) would
// exceed CostLimit and its owner could never write the one field the rule
// grants. Here the comparison costs one unit per KiB of the two maps
// (changedKeysCost), so documents up to the size limit fit.
const changedKeysOverload = "loom_rules_changed_keys"

func changedKeysFunc() cel.EnvOption {
	return cel.Function("changedKeys", cel.Overload(changedKeysOverload,
		[]*cel.Type{cel.DynType, cel.DynType}, cel.ListType(cel.StringType),
		cel.BinaryBinding(changedKeys)))
}

func changedKeys(before, after ref.Val) ref.Val {
	b, okB := asMap(before)
	a, okA := asMap(after)
	if !okB || !okA {
		return types.NewErr("changedKeys: want two maps (or null), got %s and %s", before.Type().TypeName(), after.Type().TypeName())
	}
	var out []string
	seen := map[string]bool{}
	visit := func(m, other traits.Mapper) ref.Val {
		if m == nil {
			return nil
		}
		for it := m.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return types.NewErr("changedKeys: key %v is not a string", k)
			}
			if seen[string(ks)] {
				continue
			}
			seen[string(ks)] = true
			if other == nil {
				out = append(out, string(ks))
				continue
			}
			ov, found := other.Find(k)
			if !found || m.Get(k).Equal(ov) != types.True {
				out = append(out, string(ks))
			}
		}
		return nil
	}
	if err := visit(a, b); err != nil {
		return err
	}
	if err := visit(b, a); err != nil {
		return err
	}
	slices.Sort(out)
	return types.NewStringList(adapter{}, out)
}

// asMap is v as a map; null is a nil map.
func asMap(v ref.Val) (traits.Mapper, bool) {
	if v == types.NullValue {
		return nil, true
	}
	m, ok := v.(traits.Mapper)
	return m, ok
}

// changedKeysCost is the runtime cost of a changedKeys call: one unit per
// KiB of both maps (their approximate encoded size), at least one.
func changedKeysCost() cel.ProgramOption {
	return cel.CostTrackerOptions(interpreter.OverloadCostTracker(changedKeysOverload,
		func(args []ref.Val, _ ref.Val) *uint64 {
			var size uint64
			for _, a := range args {
				size += valueSize(a)
			}
			n := 1 + size/1024
			return &n
		}))
}

// valueSize approximates the encoded size of v in bytes: its text, and 8
// for every other value (nested ones too).
func valueSize(v ref.Val) uint64 {
	switch x := v.(type) {
	case types.String:
		return 8 + uint64(len(x))
	case types.Bytes:
		return 8 + uint64(len(x))
	case traits.Mapper:
		n := uint64(8)
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			n += valueSize(k) + valueSize(x.Get(k))
		}
		return n
	case traits.Lister:
		n := uint64(8)
		for it := x.Iterator(); it.HasNext() == types.True; {
			n += valueSize(it.Next())
		}
		return n
	}
	return 8
}
