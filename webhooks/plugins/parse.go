package plugins

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// Limits on what Load reads: the files are parsed at startup and on every
// reload, so a careless (or hostile) directory must not stall either.
const (
	maxFileBytes    = 256 << 10 // a rule file, a manifest or a Lua script
	maxRules        = 1000      // rules in a set
	maxPlugins      = 100       // plugins in a set
	maxIncludeGlobs = 32        // [rules] include entries of one manifest
	maxSettings     = 64        // settings of one plugin
	maxOptions      = 64        // options of one string setting
	maxRequires     = 32        // capabilities of one plugin
	maxTextField    = 4096      // name, description, version, category, ...
)

// idPattern is the kebab-case every rule and plugin id follows.
var idPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// settingNamePattern: setting names are read as context.settings.<name> in
// CEL, Lua and Jinja, so they must be identifiers in all three.
var settingNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// wordPattern bounds the free-form labels (category, event_type) that end
// up in prompts, documents and triggers' filters.
var wordPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$`)

// ruleFile is a rule file as written.
type ruleFile struct {
	Rule struct {
		ID          string `toml:"id"`
		Name        string `toml:"name"`
		Description string `toml:"description"`
		Version     string `toml:"version"`
		Trigger     string `toml:"trigger"`
		Priority    *int64 `toml:"priority"`
		Enabled     *bool  `toml:"enabled"`
		Core        bool   `toml:"core"`
	} `toml:"rule"`
	Condition struct {
		Expression *string `toml:"expression"`
		Script     *string `toml:"script"`
	} `toml:"condition"`
	Action struct {
		Type      string         `toml:"type"`
		Message   *string        `toml:"message"`
		Category  *string        `toml:"category"`
		Priority  *string        `toml:"priority"`
		DeliverAt *string        `toml:"deliver_at"`
		Level     *string        `toml:"level"`
		Key       *string        `toml:"key"`
		Value     any            `toml:"value"`
		EventType *string        `toml:"event_type"`
		Payload   map[string]any `toml:"payload"`
	} `toml:"action"`
}

// actionFields lists, per action type, the [action] keys it takes
// (required ones first, count in actionRequired): a key of another action
// is a mistake worth refusing (a message on a set_state would be ignored).
var actionFields = map[ActionType][]string{
	NotifySelf: {"message", "category", "priority", "deliver_at"},
	Log:        {"message", "level"},
	SetState:   {"key", "value"},
	EmitEvent:  {"event_type", "payload"},
}

var actionRequired = map[ActionType]int{NotifySelf: 1, Log: 1, SetState: 2, EmitEvent: 1}

var (
	notifyPriorities = []string{"low", "normal", "high", "critical"}
	deliverAts       = []string{"turn_start", "immediately"}
	logLevels        = []string{"debug", "info", "warning", "error"}
)

// parseRule parses and validates one rule file (file names it in errors).
// It compiles the templates but not the condition (the caller resolves a
// script's path first). errs holds every problem found.
func parseRule(file, src string) (r *Rule, errs []error) {
	var f ruleFile
	md, err := toml.Decode(src, &f)
	if err != nil {
		return nil, []error{&LoadError{File: file, Msg: tomlError(err)}}
	}
	id := f.Rule.ID
	bad := func(field, format string, args ...any) {
		errs = append(errs, &LoadError{File: file, Rule: id, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range md.Undecoded() {
		// value and payload are free-form trees (BurntSushi reports the
		// keys of their sub-tables as undecoded).
		if len(k) > 2 && k[0] == "action" && (k[1] == "value" || k[1] == "payload") {
			continue
		}
		bad(k.String(), "unknown key")
	}
	if !md.IsDefined("rule") {
		bad("rule", "missing [rule] table")
	}
	switch {
	case id == "":
		bad("rule.id", "missing")
	case len(id) > 100 || !idPattern.MatchString(id):
		// Do not echo a long or odd id back into every later message.
		id = ""
		bad("rule.id", "must be kebab-case (a-z, 0-9 and single dashes, at most 100 characters)")
	}
	r = &Rule{
		ID: id, Name: f.Rule.Name, Description: f.Rule.Description, Version: f.Rule.Version,
		Trigger: Hook(f.Rule.Trigger), Priority: 100, Enabled: true, Core: f.Rule.Core,
	}
	if r.Name == "" {
		r.Name = id
	}
	if r.Version == "" {
		r.Version = "1.0.0"
	}
	for _, fv := range []struct{ field, v string }{{"rule.name", r.Name}, {"rule.description", r.Description}, {"rule.version", r.Version}} {
		if len(fv.v) > maxTextField {
			bad(fv.field, "longer than %d bytes", maxTextField)
		}
	}
	if !r.Trigger.Valid() {
		if f.Rule.Trigger == "" {
			bad("rule.trigger", "missing")
		} else {
			bad("rule.trigger", "unknown hook %q (one of %s)", clip(f.Rule.Trigger), hookList())
		}
	}
	if f.Rule.Priority != nil {
		if p := *f.Rule.Priority; p < 1 || p > 1000 {
			bad("rule.priority", "%d is outside 1–1000", p)
		} else {
			r.Priority = int(p)
		}
	}
	if f.Rule.Enabled != nil {
		r.Enabled = *f.Rule.Enabled
	}

	expr, script := f.Condition.Expression, f.Condition.Script
	switch {
	case expr != nil && script != nil:
		bad("condition", "has both expression and script (one of them)")
	case expr == nil && script == nil:
		bad("condition", "needs an expression or a script")
	case expr != nil:
		if strings.TrimSpace(*expr) == "" {
			bad("condition.expression", "empty")
		}
		r.Condition = *expr
	default:
		if err := checkScriptPath(*script); err != nil {
			bad("condition.script", "%v", err)
		}
		r.Script = *script
	}

	parseAction(&f, md, r, bad)
	return r, errs
}

// parseAction validates [action] into r.Action, compiling its templates.
func parseAction(f *ruleFile, md toml.MetaData, r *Rule, bad func(field, format string, args ...any)) {
	a := &f.Action
	t := ActionType(a.Type)
	allowed, known := actionFields[t]
	if !known {
		if a.Type == "" {
			bad("action.type", "missing")
		} else {
			bad("action.type", "unknown action %q (one of notify_self, log, set_state, emit_event)", clip(a.Type))
		}
		return
	}
	r.Action.Type = t
	defined := map[string]bool{}
	for _, k := range []string{"message", "category", "priority", "deliver_at", "level", "key", "value", "event_type", "payload"} {
		defined[k] = md.IsDefined("action", k)
	}
	for i, k := range allowed {
		if i < actionRequired[t] && !defined[k] {
			bad("action."+k, "required by %s", t)
		}
		delete(defined, k)
	}
	for k, d := range defined {
		if d {
			bad("action."+k, "not used by %s", t)
		}
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	name := func(field string) string { return r.Key() + " " + field }
	tmpl := func(field, src string) *Template {
		if len(src) > maxTemplateSource {
			bad(field, "template longer than %d bytes", maxTemplateSource)
			return nil
		}
		tp, err := compileTemplate(name(field), src)
		if err != nil {
			bad(field, "%v", err)
		}
		return tp
	}
	enum := func(field string, p *string, def string, options []string) string {
		if p == nil {
			return def
		}
		for _, o := range options {
			if *p == o {
				return o
			}
		}
		bad(field, "%q is not one of %s", clip(*p), strings.Join(options, ", "))
		return def
	}
	act := &r.Action
	switch t {
	case NotifySelf, Log:
		act.Message = str(a.Message)
		if a.Message != nil {
			if strings.TrimSpace(act.Message) == "" {
				bad("action.message", "empty")
			}
			act.tmpl.message = tmpl("action.message", act.Message)
		}
		if t == Log {
			act.Level = enum("action.level", a.Level, "info", logLevels)
			break
		}
		act.Category = "info"
		if a.Category != nil {
			if !wordPattern.MatchString(*a.Category) {
				bad("action.category", "must be a word (letters, digits, _ . : -; at most 100 characters)")
			} else {
				act.Category = *a.Category
			}
		}
		act.Priority = enum("action.priority", a.Priority, "normal", notifyPriorities)
		act.DeliverAt = enum("action.deliver_at", a.DeliverAt, "turn_start", deliverAts)
	case SetState:
		act.Key = str(a.Key)
		if a.Key != nil {
			if strings.TrimSpace(act.Key) == "" {
				bad("action.key", "empty")
			}
			act.tmpl.key = tmpl("action.key", act.Key)
		}
		act.Value = a.Value
		act.tmpl.value = compileTree("action.value", a.Value, 0, tmpl, bad)
	case EmitEvent:
		act.EventType = str(a.EventType)
		if a.EventType != nil && !wordPattern.MatchString(act.EventType) {
			bad("action.event_type", "must be a word (letters, digits, _ . : -; at most 100 characters)")
		}
		act.Payload = a.Payload
		if a.Payload != nil {
			act.tmpl.payload = compileTree("action.payload", a.Payload, 0, tmpl, bad)
		}
	}
	act.tmpl.parts = templateParts(act.templates())
	act.tmpl.mutates = templatesMutate(act.templates())
}

// maxTreeDepth bounds the nesting of a value or payload.
const maxTreeDepth = 16

// compileTree returns v with every string replaced by its compiled
// template (maps and arrays walked; other values kept).
func compileTree(field string, v any, depth int, tmpl func(field, src string) *Template, bad func(field, format string, args ...any)) any {
	if depth > maxTreeDepth {
		bad(field, "nested deeper than %d", maxTreeDepth)
		return nil
	}
	switch x := v.(type) {
	case string:
		return tmpl(field, x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = compileTree(field+"."+k, e, depth+1, tmpl, bad)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = compileTree(fmt.Sprintf("%s[%d]", field, i), e, depth+1, tmpl, bad)
		}
		return out
	case []map[string]any: // an array of tables
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = compileTree(fmt.Sprintf("%s[%d]", field, i), e, depth+1, tmpl, bad)
		}
		return out
	default:
		return v
	}
}

// checkScriptPath accepts a relative, slash-separated path (the loader
// checks that it resolves inside the rule's directory tree).
func checkScriptPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty")
	case strings.HasPrefix(p, "/") || strings.Contains(p, `\`) || (len(p) > 1 && p[1] == ':'):
		return fmt.Errorf("must be a relative path (with /)")
	case path.Clean(p) == ".":
		return fmt.Errorf("names no file")
	}
	return nil
}

// within reports whether the relative path p, cleaned, stays inside root
// (an fs.FS path; "." is the whole tree).
func within(root, p string) bool {
	p = path.Clean(p)
	if !fs.ValidPath(p) {
		return false
	}
	return root == "." || p == root || strings.HasPrefix(p, root+"/")
}

// tomlError is a TOML syntax or type error, on one line and bounded.
func tomlError(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	return "invalid TOML: " + clip(msg)
}

// clip bounds a piece of a file quoted in an error.
func clip(s string) string { return clipN(s, 200) }

// clipN cuts s to at most n bytes (on a rune boundary), marking the cut.
func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func hookList() string {
	names := make([]string, len(Hooks))
	for i, h := range Hooks {
		names[i] = string(h)
	}
	return strings.Join(names, ", ")
}
