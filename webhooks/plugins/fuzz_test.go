package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"
)

// FuzzParseRule: parsing and validating any text never panics, and what it
// accepts satisfies the schema's invariants.
func FuzzParseRule(f *testing.F) {
	f.Add(seedRule)
	f.Add(validRule)
	_ = fs.WalkDir(Builtin(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".toml") && !strings.HasSuffix(p, "manifest.toml") {
			b, _ := fs.ReadFile(Builtin(), p)
			f.Add(string(b))
		}
		return nil
	})
	f.Add("[rule]\nid = \"e\"\ntrigger = \"on_tool_call\"\n[condition]\nscript = \"a/../../b.lua\"\n[action]\ntype = \"emit_event\"\nevent_type = \"x\"\n[action.payload]\na = [1, \"{{ context }}\", {b = \"{% for i in range(3) %}{{i}}{% endfor %}\"}]\n")
	f.Add("[rule]\nid = \"s\"\ntrigger = \"on_turn_end\"\n[condition]\nexpression = \"x\"\n[action]\ntype = \"set_state\"\nkey = \"{{ context.turn.number }}\"\nvalue = {n = 1}\n")
	f.Fuzz(func(t *testing.T, src string) {
		r, errs := parseRule("f.toml", src)
		for _, e := range errs {
			le, ok := e.(*LoadError)
			if !ok || le.File != "f.toml" || le.Msg == "" {
				t.Fatalf("error %#v", e)
			}
		}
		if len(errs) > 0 {
			return
		}
		if !idPattern.MatchString(r.ID) || !r.Trigger.Valid() || r.Priority < 1 || r.Priority > 1000 {
			t.Fatalf("accepted %+v", r)
		}
		if (r.Condition == "") == (r.Script == "") {
			t.Fatalf("accepted condition %q script %q", r.Condition, r.Script)
		}
		if _, ok := actionFields[r.Action.Type]; !ok {
			t.Fatalf("accepted action %q", r.Action.Type)
		}
		// What was accepted renders without a panic (errors are fine).
		_, _ = r.Action.render((&Context{}).Map())
	})
}

// FuzzParseManifest: likewise for manifests; accepted settings have
// defaults of their type within their bounds.
func FuzzParseManifest(f *testing.F) {
	_ = fs.WalkDir(Builtin(), "plugins", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, "manifest.toml") {
			b, _ := fs.ReadFile(Builtin(), p)
			f.Add(string(b))
		}
		return nil
	})
	f.Add("[plugin]\nid = \"p\"\n[rules]\ninclude = [\"r/*.toml\"]\n[settings.s]\ntype = \"string\"\ndefault = \"a\"\noptions = [\"a\"]\n[settings.f]\ntype = \"float\"\ndefault = 1\nmin = -1e308\nmax = 1e308\n")
	f.Fuzz(func(t *testing.T, src string) {
		p, errs := parseManifest("plugins/p/manifest.toml", "p", src)
		if len(errs) > 0 {
			return
		}
		if p.ID != "p" || len(p.Include) == 0 {
			t.Fatalf("accepted %+v", p)
		}
		for name, s := range p.Settings {
			if _, msg := s.check(s.Default, true); msg != "" {
				t.Fatalf("setting %s: default %v: %s", name, s.Default, msg)
			}
		}
	})
}

// FuzzUserSettings: a user's settings document (any JSON the user writes
// over REST) never panics the check or the runtime's reading of it, and
// the two agree: a document the check accepts loses nothing when read, and
// what the runtime keeps passes the check.
func FuzzUserSettings(f *testing.F) {
	set, err := Load(LoadOptions{Builtin: Builtin()})
	if err != nil {
		f.Fatal(err)
	}
	for _, doc := range []string{
		`{}`,
		`{"disabledRules": ["tool-failure-loop"], "plugins": {"research-assistant": {"max_sources": 20, "auto_summarize": false}}}`,
		`{"disabledRules": "x", "plugins": {"research-assistant": {"max_sources": 20.5}}}`,
		`{"plugins": {"research-assistant": {"max_sources": 1e400, "nope": 1}, "other": {}}, "theme": "dark"}`,
		`{"disabledRules": [1, null], "plugins": []}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var doc map[string]any
		if dec.Decode(&doc) != nil {
			return
		}
		checkErr := set.ValidateUserSettings(doc)
		disabled, settings, bad := set.UserScope(doc)
		if (checkErr == nil) != (len(bad) == 0) {
			t.Fatalf("check %v, but the runtime dropped %v", checkErr, bad)
		}
		for key := range disabled {
			if r := set.Rule(key); r == nil || r.Core {
				t.Fatalf("disabled %q", key)
			}
		}
		kept := map[string]any{"plugins": map[string]any{}}
		for pid, values := range settings {
			vals := map[string]any{}
			for name, v := range values {
				vals[name] = v
			}
			kept["plugins"].(map[string]any)[pid] = vals
		}
		if err := set.ValidateUserSettings(kept); err != nil {
			t.Fatalf("kept %v: %v", kept, err)
		}
	})
}

// FuzzTemplate: any template source compiles or fails with an error, and
// renders (over a context with data in every field) to a bounded output or
// an error, without a panic or a hang.
func FuzzTemplate(f *testing.F) {
	for _, src := range []string{
		"Token budget at {{ (context.turn.token_usage * 100) | int }}%.",
		"{% for m in context.history.messages %}{{ m.role }}: {{ m.content | truncate(10) }}\n{% endfor %}",
		"{{ context.state.get('count', 0) + 1 }}",
		"{% for i in range(3) %}{% for j in range(3) %}{{ i * j }}{% endfor %}{% endfor %}",
		"{{ context.history.tools | map(attribute='name') | join(', ') }}",
		"{{ context.settings | tojson }}",
		"{% set ns = namespace(n=0) %}{% for t in context.history.tools %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
		"{% include 'x' %}",
	} {
		f.Add(src)
	}
	m := sampleContext().Map()
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := compileTemplate("f", src)
		if err != nil {
			return
		}
		done := make(chan struct{})
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("stuck on %q", src)) })
		defer watchdog.Stop()
		go func() {
			defer close(done)
			out, err := tmpl.Render(m)
			if err == nil && len(out) > maxRender {
				t.Errorf("%q rendered %d bytes", src, len(out))
			}
		}()
		<-done
	})
}

// FuzzCELCondition: any expression compiles or fails with an error, and
// evaluates within the cost limit to a result or an error, without a
// panic.
func FuzzCELCondition(f *testing.F) {
	for _, src := range []string{
		"context.turn.token_usage > 0.8",
		"context.history.messages.exists(m, m.content.contains('error'))",
		"context.state.get('count', 0) > 3",
		"context.history.failures['search'] >= 2 && context.result.error.startsWith('time')",
		"context.history.messages.map(m, m.content.split(' ')).size() > 1",
		"context.history.messages[0].content.replace('l', 'LL').size() > 0",
	} {
		f.Add(src)
	}
	c := sampleContext()
	f.Fuzz(func(t *testing.T, src string) {
		cond, err := compileCEL(src)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cond.Match(ctx, c)
	})
}
