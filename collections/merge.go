package collections

import (
	"slices"
	"strings"
)

// ApplyPatch deep-merges patch into doc (PATCH semantics) and returns doc:
//   - a key whose value is an object merges into the existing object (or
//     replaces a non-object value);
//   - a key whose value is null removes the field;
//   - a dotted key ("a.b": 1) sets the nested field, creating objects on the
//     way;
//   - envelope fields at the top level are ignored (they are server-owned).
//
// Keys are applied in sorted order, so the result never depends on map
// iteration: a key sorts before the dotted keys it prefixes, and
// {"a": 1, "a.b": 2} always gives {"a": {"b": 2}}.
//
// doc is modified in place on success and left untouched on error; patch
// values are copied so later changes to the patch do not alias the document.
func ApplyPatch(doc, patch map[string]any) (map[string]any, error) {
	if doc == nil {
		doc = map[string]any{}
	}
	keys := make([]string, 0, len(patch))
	for k := range patch {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ops := make([]patchOp, 0, len(keys))
	// bound is an upper bound of the result's depth: merging never makes a
	// subtree deeper than the deeper of its two inputs.
	bound := Depth(doc)
	for _, k := range keys {
		if IsEnvelopeField(k) {
			continue
		}
		parts := []string{k}
		if strings.Contains(k, ".") {
			parts = strings.Split(k, ".")
			for _, p := range parts {
				if p == "" {
					return nil, invalidDocument("field path %q has an empty segment", k)
				}
			}
			if IsEnvelopeField(parts[0]) {
				continue
			}
		}
		v := patch[k]
		if d := len(parts) + Depth(v); d > bound {
			bound = d
		}
		ops = append(ops, patchOp{parts, v})
	}
	if bound > MaxDepth {
		// The result may nest too deep: find out on a copy so that a
		// rejected patch leaves doc as it was.
		trial := CloneValue(doc).(map[string]any)
		for _, op := range ops {
			setPath(trial, op.parts, op.v)
		}
		if Depth(trial) > MaxDepth {
			return nil, invalidDocument("document nests deeper than %d levels", MaxDepth)
		}
	}
	for _, op := range ops {
		setPath(doc, op.parts, op.v)
	}
	return doc, nil
}

type patchOp struct {
	parts []string
	v     any
}

func setPath(m map[string]any, parts []string, v any) {
	for len(parts) > 1 {
		next, ok := m[parts[0]].(map[string]any)
		if !ok {
			if v == nil {
				return // removing below a missing or scalar field: nothing to do
			}
			next = map[string]any{}
			m[parts[0]] = next
		}
		m, parts = next, parts[1:]
	}
	mergeValue(m, parts[0], v)
}

func mergeValue(m map[string]any, k string, v any) {
	switch pv := v.(type) {
	case nil:
		delete(m, k)
	case map[string]any:
		cur, ok := m[k].(map[string]any)
		if !ok {
			cur = map[string]any{}
			m[k] = cur
		}
		for kk, vv := range pv {
			mergeValue(cur, kk, vv)
		}
	default:
		m[k] = CloneValue(v)
	}
}
