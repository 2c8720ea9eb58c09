package collections

import "strings"

// ApplyPatch deep-merges patch into doc (PATCH semantics) and returns doc:
//   - a key whose value is an object merges into the existing object (or
//     replaces a non-object value);
//   - a key whose value is null removes the field;
//   - a dotted key ("a.b": 1) sets the nested field, creating objects on the
//     way;
//   - envelope fields at the top level are ignored (they are server-owned).
//
// doc is modified in place; patch values are copied so later changes to the
// patch do not alias the document.
func ApplyPatch(doc, patch map[string]any) (map[string]any, error) {
	if doc == nil {
		doc = map[string]any{}
	}
	for k, v := range patch {
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
		setPath(doc, parts, v)
	}
	if Depth(doc) > MaxDepth {
		return nil, invalidDocument("document nests deeper than %d levels", MaxDepth)
	}
	return doc, nil
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
