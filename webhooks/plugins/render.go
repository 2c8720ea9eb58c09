package plugins

import "fmt"

// maxRendered bounds an action's rendered output in all (a message, or a
// value or payload tree): it becomes a prompt message or a document.
const maxRendered = 256 << 10

// render renders the action's templates with `context` = m, or a copy of
// it when a template may change what it is given ({% set x.y = %},
// list.reverse(): see templatesMutate): m's lists and maps are shared with
// the runtime (a plugin's state, which a template would rewrite outside
// set_state) and with the next rule's evaluation. Only the fields the
// templates read are copied.
func (a *Action) render(m map[string]any) (Rendered, error) {
	if a.tmpl.mutates {
		m = copyParts(m, a.tmpl.parts)
	}
	out := Rendered{
		Type: a.Type, Category: a.Category, Priority: a.Priority, DeliverAt: a.DeliverAt,
		Level: a.Level, EventType: a.EventType,
	}
	budget := maxRendered
	var err error
	if a.tmpl.message != nil {
		if out.Message, err = renderCounted(a.tmpl.message, m, &budget); err != nil {
			return Rendered{}, fmt.Errorf("action.message: %w", err)
		}
	}
	if a.tmpl.key != nil {
		if out.Key, err = renderCounted(a.tmpl.key, m, &budget); err != nil {
			return Rendered{}, fmt.Errorf("action.key: %w", err)
		}
	}
	if a.tmpl.value != nil {
		if out.Value, err = renderTree(a.tmpl.value, m, &budget); err != nil {
			return Rendered{}, fmt.Errorf("action.value: %w", err)
		}
	}
	if a.tmpl.payload != nil {
		p, err := renderTree(a.tmpl.payload, m, &budget)
		if err != nil {
			return Rendered{}, fmt.Errorf("action.payload: %w", err)
		}
		out.Payload, _ = p.(map[string]any)
	}
	return out, nil
}

func renderCounted(t *Template, m map[string]any, budget *int) (string, error) {
	s, err := t.Render(m)
	if err != nil {
		return "", err
	}
	*budget -= len(s)
	if *budget < 0 {
		return "", fmt.Errorf("rendered action above %d bytes", maxRendered)
	}
	return s, nil
}

// renderTree renders the templates of a compiled value tree into a new
// tree of the same shape.
func renderTree(v any, m map[string]any, budget *int) (any, error) {
	switch x := v.(type) {
	case *Template:
		return renderCounted(x, m, budget)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := renderTree(e, m, budget)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderTree(e, m, budget)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

// copyParts copies the fields parts of a context map (all of them when
// parts is nil).
func copyParts(m map[string]any, parts []string) map[string]any {
	if parts == nil {
		out, _ := copyTree(m).(map[string]any)
		return out
	}
	out := make(map[string]any, len(parts))
	for _, p := range parts {
		if v, ok := m[p]; ok {
			out[p] = copyTree(v)
		}
	}
	return out
}

// copyTree copies the maps and lists of a context tree (the other values
// are immutable).
func copyTree(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = copyTree(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyTree(e)
		}
		return out
	}
	return v
}
