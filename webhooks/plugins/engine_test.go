package plugins

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func firedKeys(f []Fired) string {
	keys := make([]string, len(f))
	for i, x := range f {
		keys[i] = x.Rule.Key()
	}
	return strings.Join(keys, ",")
}

func evalKeys(evs []Evaluation) string {
	keys := make([]string, len(evs))
	for i, x := range evs {
		keys[i] = x.Rule
	}
	return strings.Join(keys, ",")
}

// engineFixture: standalone b (prio 50), a (50), core (10, core), err (40,
// condition fails), off (disabled by file); plugin p (enabled): p/x (50);
// plugin q (off by default): q/y (60); plugin m (missing capability): m/z.
func engineFixture(t *testing.T) *Engine {
	t.Helper()
	useFakeConditions(t)
	rules := writeTree(t, map[string]string{
		"b.toml":    ruleTOML("b", "on_turn_start", 50, "true"),
		"a.toml":    ruleTOML("a", "on_turn_start", 50, "true"),
		"core.toml": strings.Replace(ruleTOML("core", "on_turn_start", 10, "true"), "priority", "core = true\npriority", 1),
		"err.toml":  ruleTOML("err", "on_turn_start", 40, "error"),
		"pan.toml":  ruleTOML("pan", "on_turn_start", 30, "panic"),
		"no.toml":   ruleTOML("no", "on_turn_start", 20, "false"),
		"off.toml":  strings.Replace(ruleTOML("off", "on_turn_start", 70, "true"), "priority", "enabled = false\npriority", 1),
		"end.toml":  ruleTOML("end", "on_turn_end", 1, "true"),
	})
	plugs := writeTree(t, map[string]string{
		"p/manifest.toml": pluginManifest("p", true, "[settings.n]\ntype = \"integer\"\ndefault = 3\nmax = 10\n"),
		"p/rules/x.toml":  strings.Replace(ruleTOML("x", "on_turn_start", 50, "true"), "fired at {{ context.turn.number }}", "n={{ context.settings.n }} s={{ context.state.k }}", 1),
		"q/manifest.toml": pluginManifest("q", false, ""),
		"q/rules/y.toml":  ruleTOML("y", "on_turn_start", 60, "true"),
		"m/manifest.toml": pluginManifest("m", true, "[capabilities]\nrequires = [\"vault\"]\n"),
		"m/rules/z.toml":  ruleTOML("z", "on_turn_start", 99, "true"),
	})
	set, err := Load(LoadOptions{RulesDir: rules, PluginsDir: plugs})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(set, EngineOptions{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEvaluateOrderAndSkips(t *testing.T) {
	e := engineFixture(t)
	c := &Context{Turn: Turn{Number: 4}}
	fired, evals := e.Evaluate(context.Background(), OnTurnStart, c, Scope{})
	// Priority desc, then key asc; off (file), q (plugin off), m (missing)
	// skipped; err and pan evaluated but not fired.
	if got := evalKeys(evals); got != "a,b,p/x,err,pan,no,core" {
		t.Fatalf("evaluations %s", got)
	}
	if got := firedKeys(fired); got != "a,b,p/x,core" {
		t.Fatalf("fired %s", got)
	}
	for _, f := range fired {
		if evals[f.Eval].Rule != f.Rule.Key() || !evals[f.Eval].Matched {
			t.Fatalf("fired %s points at %+v", f.Rule.Key(), evals[f.Eval])
		}
	}
	if evals[3].Err == "" || evals[3].Matched || !strings.Contains(evals[4].Err, "panicked") {
		t.Fatalf("errors not recorded: %+v %+v", evals[3], evals[4])
	}
	if fired[0].Action.Message != "a fired at 4" {
		t.Fatalf("message %q", fired[0].Action.Message)
	}
	if got := fired[2].Action.Message; got != "x n=3 s=" {
		t.Fatalf("plugin message %q", got)
	}
}

func TestEvaluateSwitchesUserAndState(t *testing.T) {
	e := engineFixture(t)
	scope := Scope{
		Switches: Switches{"off": true, "plugin:q": true, "a": false, "plugin:p": true},
		Disabled: map[string]bool{"b": true, "core": true},
		Settings: map[string]map[string]any{"p": {"n": int64(7)}},
		State: func(pid string) map[string]any {
			if pid == "p" {
				return map[string]any{"k": "v"}
			}
			return nil
		},
	}
	fired, _ := e.Evaluate(context.Background(), OnTurnStart, &Context{}, scope)
	// off and q/y switched on, a switched off, b disabled by the user, core
	// not (core rules ignore the user), m/z still missing its capability.
	if got := firedKeys(fired); got != "off,q/y,p/x,core" {
		t.Fatalf("fired %s", got)
	}
	if got := fired[2].Action.Message; got != "x n=7 s=v" {
		t.Fatalf("plugin message %q", got)
	}
	// A plugin switched off takes its rules with it.
	fired, _ = e.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{Switches: Switches{"plugin:p": false}})
	if strings.Contains(firedKeys(fired), "p/x") {
		t.Fatalf("p/x fired with its plugin off: %s", firedKeys(fired))
	}
}

func TestEvaluateCancelled(t *testing.T) {
	e := engineFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fired, evals := e.Evaluate(ctx, OnTurnStart, &Context{}, Scope{})
	if len(fired) != 0 || len(evals) != 0 {
		t.Fatalf("ran after cancel: %d %d", len(fired), len(evals))
	}
}

func TestActive(t *testing.T) {
	e := engineFixture(t)
	if !e.Active(OnTurnStart, nil) || !e.Active(OnTurnEnd, nil) || e.Active(OnToolCall, nil) {
		t.Fatal("active by files")
	}
	if e.Active(OnTurnEnd, Switches{"end": false}) {
		t.Fatal("switched off rule counted")
	}
	empty, err := NewEngine(nil, EngineOptions{})
	if err != nil || empty.Active(OnTurnStart, nil) {
		t.Fatal("empty engine active")
	}
	if f, ev := empty.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{}); f != nil || ev != nil {
		t.Fatal("empty engine evaluated")
	}
}

func TestMetrics(t *testing.T) {
	useFakeConditions(t)
	set, err := Load(LoadOptions{RulesDir: writeTree(t, map[string]string{
		"a.toml": ruleTOML("a", "on_turn_start", 1, "true"),
		"e.toml": ruleTOML("e", "on_turn_start", 1, "error"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := NewEngine(set, EngineOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(set, EngineOptions{Registerer: reg}); err != nil {
		t.Fatalf("second engine on one registry: %v", err)
	}
	e.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{})
	e.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{})
	var m dto.Metric
	if err := e.m.evaluations.WithLabelValues("a", "matched").Write(&m); err != nil || m.GetCounter().GetValue() != 2 {
		t.Fatalf("matched %v %v", m.GetCounter().GetValue(), err)
	}
	if err := e.m.evaluations.WithLabelValues("e", "error").Write(&m); err != nil || m.GetCounter().GetValue() != 2 {
		t.Fatalf("error %v %v", m.GetCounter().GetValue(), err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var hist uint64
	for _, f := range families {
		if f.GetName() == "loom_agent_rule_hook_seconds" {
			for _, mm := range f.GetMetric() {
				hist += mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if hist != 2 {
		t.Fatalf("hook observations %d", hist)
	}
}

func TestNeeds(t *testing.T) {
	cases := []struct {
		text string
		want Needs
	}{
		{"context.turn.token_usage > 0.8", Needs{}},
		{"context.history.failures['x'] >= 3", Needs{History: true}},
		{"context.state.get('k', 0) > 1 && context.user.id == 'u'", Needs{State: true, User: true}},
		{"{{ context.project.id }}", Needs{Project: true}},
		{"{{ context['history'] }}", everything},
		{"{% for k in context.items() %}{% endfor %}", everything},
		{"{% set c = context %}{{ c.turn }}", everything},
	}
	for _, tc := range cases {
		if got := textNeeds(tc.text); got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.text, got, tc.want)
		}
	}
}

// Rules of several plugins interleave by priority; each sees its own
// plugin's settings and state, even though the engine builds the context's
// map once per hook.
func TestEvaluatePerPluginContext(t *testing.T) {
	useFakeConditions(t)
	msg := func(id string, prio int) string {
		return strings.Replace(ruleTOML(id, "on_turn_end", prio, "true"), "fired at {{ context.turn.number }}",
			"{{ context.turn.number }} {{ context.settings.v }} {{ context.state.s }}", 1)
	}
	set, err := Load(LoadOptions{
		RulesDir: writeTree(t, map[string]string{"s1.toml": msg("s1", 90), "s2.toml": msg("s2", 70)}),
		PluginsDir: writeTree(t, map[string]string{
			"p/manifest.toml": pluginManifest("p", true, "[settings.v]\ntype = \"string\"\ndefault = \"pv\"\n"),
			"p/rules/a.toml":  msg("a", 80),
			"p/rules/b.toml":  msg("b", 60),
			"q/manifest.toml": pluginManifest("q", true, "[settings.v]\ntype = \"string\"\ndefault = \"qv\"\n"),
			"q/rules/a.toml":  msg("a", 75),
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := NewEngine(set, EngineOptions{})
	state := func(pid string) map[string]any { return map[string]any{"s": "st-" + pid} }
	c := &Context{Turn: Turn{Number: 9}}
	fired, _ := e.Evaluate(context.Background(), OnTurnEnd, c, Scope{State: state, Settings: map[string]map[string]any{"q": {"v": "user"}}})
	var got []string
	for _, f := range fired {
		got = append(got, f.Rule.Key()+"="+f.Action.Message)
	}
	want := "s1=s1 9  st-,p/a=a 9 pv st-p,q/a=a 9 user st-q,s2=s2 9  st-,p/b=b 9 pv st-p"
	if strings.Join(got, ",") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, ","), want)
	}
	// After Evaluate the context builds its map afresh.
	c.Turn.Number = 10
	if c.Map()["turn"].(map[string]any)["number"] != int64(10) {
		t.Fatal("stale map after Evaluate")
	}
}

// Evaluations run concurrently, and a Swap during them is safe: each
// finishes with the set it started with.
func TestEvaluateConcurrentWithSwap(t *testing.T) {
	e := engineFixture(t)
	first := e.Set()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				c := &Context{Turn: Turn{Number: int64(g)}}
				fired, _ := e.Evaluate(context.Background(), OnTurnStart, c, Scope{})
				if n := len(fired); n != 4 && n != 0 {
					t.Errorf("%d fired", n)
					return
				}
			}
		}(g)
	}
	for i := 0; i < 50; i++ {
		e.Swap(nil)
		e.Swap(first)
	}
	wg.Wait()
}

// A caller that judged Needs on one set evaluates that set, even when a
// reload put another in force in between.
func TestEvaluateTheSetTheCallerPrepared(t *testing.T) {
	e := engineFixture(t)
	prepared := e.Set()
	if !prepared.Active(OnTurnStart, nil) {
		t.Fatal("the fixture's set has no active rule at on_turn_start")
	}
	e.Swap(nil) // a reload to an empty set
	fired, evals := e.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{Set: prepared})
	if got := evalKeys(evals); got != "a,b,p/x,err,pan,no,core" || len(fired) != 4 {
		t.Fatalf("evaluated %s (fired %d), want the prepared set's rules", got, len(fired))
	}
	if _, evals := e.Evaluate(context.Background(), OnTurnStart, &Context{}, Scope{}); len(evals) != 0 {
		t.Fatalf("without Scope.Set the set in force (empty) runs; got %s", evalKeys(evals))
	}
}
