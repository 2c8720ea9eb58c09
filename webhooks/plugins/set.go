package plugins

import (
	"regexp"
	"slices"
	"sort"
	"strings"
)

// newSet indexes validated rules and plugins.
func newSet(rules []*Rule, plugins []*Plugin, capabilities []string) *Set {
	s := &Set{
		Rules:    append([]*Rule(nil), rules...),
		Plugins:  append([]*Plugin(nil), plugins...),
		byHook:   map[Hook][]*Rule{},
		plugins:  map[string]*Plugin{},
		rules:    map[string]*Rule{},
		defaults: map[string]map[string]any{},
		needs:    map[Hook]Needs{},
	}
	sort.SliceStable(s.Rules, func(i, j int) bool { return ruleBefore(s.Rules[i], s.Rules[j]) })
	sort.Slice(s.Plugins, func(i, j int) bool { return s.Plugins[i].ID < s.Plugins[j].ID })
	for _, r := range s.Rules {
		s.byHook[r.Trigger] = append(s.byHook[r.Trigger], r)
		s.rules[r.Key()] = r
		n := s.needs[r.Trigger]
		n.or(ruleNeeds(r))
		s.needs[r.Trigger] = n
	}
	for _, p := range s.Plugins {
		s.plugins[p.ID] = p
		d := make(map[string]any, len(p.Settings))
		for name, st := range p.Settings {
			d[name] = st.Default
		}
		s.defaults[p.ID] = d
	}
	return s
}

// ruleBefore is the evaluation order: priority descending, then key.
func ruleBefore(a, b *Rule) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Key() < b.Key()
}

func (n *Needs) or(o Needs) {
	n.History = n.History || o.History
	n.User = n.User || o.User
	n.Project = n.Project || o.Project
	n.State = n.State || o.State
}

var everything = Needs{History: true, User: true, Project: true, State: true}

// ruleNeeds is what a rule reads of the context, judged from its text: a
// Lua script may read anything; a CEL expression or template reads a part
// when it names it. A text that uses `context` other than as
// context.<field> (context['history'], context.items(), {% set c =
// context %}) could read any part, so it needs everything.
func ruleNeeds(r *Rule) Needs {
	if r.Script != "" {
		return everything
	}
	var n Needs
	texts := append([]string{r.Condition}, r.Action.templates()...)
	for _, t := range texts {
		n.or(textNeeds(t))
	}
	return n
}

// contextUse finds each use of the identifier `context` and what follows.
var contextUse = regexp.MustCompile(`(^|[^A-Za-z0-9_.])context\s*(\.\s*([A-Za-z_][A-Za-z0-9_]*))?`)

// contextFields are the fields of Context as the languages name them.
var contextFields = map[string]bool{
	"turn": true, "history": true, "user": true, "project": true,
	"state": true, "settings": true, "event": true, "result": true,
}

func textNeeds(t string) Needs {
	for _, m := range contextUse.FindAllStringSubmatch(t, -1) {
		if m[3] == "" || !contextFields[m[3]] {
			return everything
		}
	}
	return Needs{
		History: strings.Contains(t, "history"),
		User:    strings.Contains(t, "user"),
		Project: strings.Contains(t, "project"),
		State:   strings.Contains(t, "state"),
	}
}

// templateParts is which fields of the context the templates texts read
// (nil: all of them, as textNeeds judges it), so that rendering copies only
// those.
func templateParts(texts []string) []string {
	var parts []string
	for _, t := range texts {
		for _, m := range contextUse.FindAllStringSubmatch(t, -1) {
			if m[3] == "" || !contextFields[m[3]] {
				return nil
			}
			if !slices.Contains(parts, m[3]) {
				parts = append(parts, m[3])
			}
		}
	}
	if parts == nil {
		parts = []string{} // reads nothing of the context
	}
	return parts
}

// mutation finds what in a template can change a value it was given: a
// {% set %} (or {% do %}) whose target is an attribute or an item, and the
// methods that change their receiver in place (gonja's list.append and
// reverse; dict.pop, setdefault, update and clear, which work on a copy
// today but need not).
var mutation = regexp.MustCompile(`\{%[-+]?\s*(set|do)\s+[^=%]*[.\[]|\.\s*(append|reverse|pop|setdefault|update|clear)\s*\(`)

// templatesMutate reports whether any of the texts may change the values
// of the context it renders with (a conservative textual judgement: a
// false positive only costs a copy).
func templatesMutate(texts []string) bool {
	for _, t := range texts {
		if mutation.MatchString(t) {
			return true
		}
	}
	return false
}

// templates returns the action's template sources.
func (a *Action) templates() []string {
	out := []string{a.Message, a.Key}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case []map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(a.Value)
	walk(a.Payload)
	return out
}
