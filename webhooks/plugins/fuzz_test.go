package plugins

import (
	"io/fs"
	"strings"
	"testing"
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
