package plugins

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// runLua runs src with the default budgets but a long timeout: a loaded
// test machine must not turn an instruction budget into a timeout.
func runLua(t *testing.T, src string, c *Context) (bool, error) {
	t.Helper()
	return runLuaLimits(t, src, c, LuaLimits{Timeout: 10 * time.Second})
}

func runLuaLimits(t *testing.T, src string, c *Context, limits LuaLimits) (bool, error) {
	t.Helper()
	cond, err := compileLua("test.lua", src, limits)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return cond.Match(context.Background(), c)
}

func TestLuaMatches(t *testing.T) {
	c := sampleContext()
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"return context.turn.token_usage > 0.8", true},
		{"return context.turn.number == 3 and context.turn.iteration_count < 5", true},
		{"return context.state.count > 3", true}, // json.Number
		{"return context.state.warned == true and context.state.missing == nil", true},
		{"return context.settings.threshold <= context.turn.token_usage", true},
		{"return #context.history.messages == 2 and context.history.messages[2].role == 'assistant'", true},
		{"return context.history.failures.search >= 2", true},
		{"return context.history.tools[1].arguments.limit == 5", true},
		{"return context.history.tools[1].timestamp == '2026-01-02T03:04:05Z'", true},
		{"return context.result.error == 'timeout' and not context.result.success", true},
		{"return context.turn == context.turn", true}, // stable identity
		{`local n = 0
		  for i, m in ipairs(context.history.messages) do n = n + #m.content end
		  return n == 13`, true},
		{`local ks = {}
		  for k, v in pairs(context.state) do ks[#ks+1] = k end
		  return table.concat(ks, ',') == 'count,ratio,warned'`, true},
		{`local n = 0
		  for k, v in pairs(context.history.messages) do n = n + k end
		  return n == 3`, true},
		{`local a, b = unpack(context.history.messages)
		  return a.role == 'user' and b.role == 'assistant'`, true},
		{"return string.find(context.history.messages[2].content, 'th(e)re') == 4", true},
		{"return (context.history.messages[1].content):upper() == 'HELLO'", true},
		{"return ('a,b,c'):gsub(',', ';') == 'a;b;c'", true},
		{"return string.format('%5.2f|%d|%s', 1.5, 42, 'x') == ' 1.50|42|x'", true},
		{"local s = 'x' .. 1 .. 'y'; return s == 'x1y'", true},
		{"return #string.rep('ab', 2^20) == 2^21 and #(string.rep('x', 2^20) .. string.rep('y', 2^20)) == 2^21", true},
		{"return math.max(1, 5) == 5 and math.floor(2.5) == 2", true},
		{"local t = {3, 1, 2}; table.sort(t); return t[1] == 1 and t[3] == 3", true},
		{"local t = {'b', 'c', 'a'}; table.sort(t); return table.concat(t) == 'abc'", true},
		{"local t = {1, 3, 2}; table.sort(t, function(a, b) return a > b end); return table.concat(t) == '321'", true},
		{"local t = {3, 1, 2}; table.sort(t, nil); return table.concat(t) == '123'", true},
		{"local mt = {__lt = function(a, b) return a.v < b.v end} local t = {setmetatable({v = 2}, mt), setmetatable({v = 1}, mt)} table.sort(t) return t[1].v == 1", true},
		{"return not pcall(table.sort, {1, 'x', 2})", true},
		{"return not pcall(table.sort, {1, 2, 3}, function() error('cmp') end)", true},
		{"local ok = pcall(error, 'x'); return ok == false", true},
		{"local ok, a, b = pcall(function(x) return x, 2 end, 1); return ok and a == 1 and b == 2", true},
		{"local ok, e = pcall(error, {code = 7}); return not ok and e.code == 7", true},
		{"local ok, e = pcall(42); return not ok and e == 'attempt to call a number value'", true},
		{"local ok, e = xpcall(function() error('x', 0) end, function(e) return 'h:' .. e end); return not ok and e == 'h:x'", true},
		{"local ok, e = xpcall(function() error('x') end, function(e) error('again', 0) end); return not ok and e == 'again'", true},
		{"local ok, a, b = xpcall(function() return 1, 2 end, print); return ok and a == 1 and b == 2", true},
		{"return type(context) == 'table' and type(string) == 'table'", true},
		{"return false", false},
		{"return context.turn.token_usage > 1", false},
	} {
		got, err := runLua(t, tc.src, c)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestLuaResultMustBeBoolean(t *testing.T) {
	for _, src := range []string{"return 1", "return 'true'", "return nil", "local x = 1", "return {}"} {
		_, err := runLua(t, src, sampleContext())
		if err == nil || !strings.Contains(err.Error(), "want a boolean") {
			t.Errorf("%s: err %v, want a non-boolean error", src, err)
		}
	}
}

func TestLuaCompileErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"return (", "test.lua"},
		{"\x1bLua\x51\x00\x01\x04", "binary chunks"},
		{strings.Repeat("-", maxLuaSourceBytes+1), "over the limit"},
	} {
		_, err := compileLua("test.lua", tc.src, LuaLimits{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: err %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

// TestLuaEscapes: what a script could use to reach the host is not there.
func TestLuaEscapes(t *testing.T) {
	checkLuaCases(t, []luaCase{
		{"os.execute", "os.execute('touch /tmp/pwned'); return true", "attempt to index a non-table object(nil)"},
		{"io.open", "io.open('/etc/passwd'); return true", "(nil)"},
		{"require", "require('os'); return true", "attempt to call a non-function object"},
		{"load", "load(function() return nil end); return true", "attempt to call a non-function object"},
		{"loadstring", "loadstring('return 1'); return true", "attempt to call a non-function object"},
		{"dofile", "dofile('/etc/passwd'); return true", "attempt to call a non-function object"},
		{"loadfile", "loadfile('/etc/passwd'); return true", "attempt to call a non-function object"},
		{"string.dump", "string.dump(function() end); return true", "attempt to call a non-function object"},
		{"binary chunk via string lib", "return string.load ~= nil", ""},
		{"package", "return package.loaded ~= nil", "(nil)"},
		{"debug", "debug.getregistry(); return true", "(nil)"},
		{"getfenv", "getfenv(1); return true", "attempt to call a non-function object"},
		{"setfenv", "setfenv(1, {}); return true", "attempt to call a non-function object"},
		{"rawset", "rawset(context, 'x', 1); return true", "attempt to call a non-function object"},
		{"rawget", "rawget(string, 'rep'); return true", "attempt to call a non-function object"},
		{"collectgarbage", "collectgarbage(); return true", "attempt to call a non-function object"},
		{"newproxy", "newproxy(true); return true", "attempt to call a non-function object"},
		{"coroutine", "coroutine.create(function() end); return true", "(nil)"},
		{"channel", "channel.make(); return true", "(nil)"},
		{"module", "module('x'); return true", "attempt to call a non-function object"},
		{"randomseed", "math.randomseed(1); return true", "attempt to call a non-function object"},
		{"_G has no loader", "return _G.load ~= nil or _G.require ~= nil", ""},
	})
}

// luaCase is a script run on sampleContext() and what it must give: an
// error containing want, or, want empty, false and no error.
type luaCase struct{ name, src, want string }

func checkLuaCases(t *testing.T, cases []luaCase) {
	t.Helper()
	for _, tc := range cases {
		got, err := runLua(t, tc.src, sampleContext())
		if tc.want == "" {
			if err != nil || got {
				t.Errorf("%s: %v, %v; want false, nil", tc.name, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want an error containing %q", tc.name, got, err, tc.want)
		}
	}
}

// TestLuaReadOnly: the context, the libraries and the string metatable
// cannot be written.
func TestLuaReadOnly(t *testing.T) {
	checkLuaCases(t, []luaCase{
		{"context field", "context.turn.number = 99; return true", "read-only"},
		{"context new key", "context.state.evil = 1; return true", "read-only"},
		{"context top", "context.turn = {}; return true", "read-only"},
		{"context list", "context.history.messages[1] = 'x'; return true", "read-only"},
		{"table.insert on context", "table.insert(context.history.messages, 'x'); return true", "read-only"},
		{"table.remove on context", "table.remove(context.history.messages); return true", "read-only"},
		{"table.sort on context", "table.sort(context.history.messages); return true", "read-only"},
		{"setmetatable on context", "setmetatable(context, {}); return true", "protected metatable"},
		{"getmetatable of context", "return getmetatable(context) ~= false", ""},
		{"string lib", "string.rep = nil; return true", "read-only"},
		{"math lib", "math.pi = 3; return true", "read-only"},
		{"table lib", "table.concat = print; return true", "read-only"},
		{"string metatable hidden", "return getmetatable('') ~= false", ""},
		{"string metatable locked", "setmetatable('', {}); return true", "table expected"},
		{"string value index", "local s = ''; s.rep = nil; return true", "attempt to index"},
		{"number metatable", "setmetatable(1, {__index = function() return 1 end}); return true", "table expected"},
		{"env metatable", "setmetatable(_G, nil); return true", "protected metatable"},
	})
	// The context the runtime passed is untouched.
	c := sampleContext()
	runLua(t, "pcall(function() context.state.count = 0 end); return true", c)
	if c.State["count"] != sampleContext().State["count"] {
		t.Fatalf("state changed: %v", c.State)
	}
}

// TestLuaIsolation: nothing a run changes is seen by the next run in the
// same (pooled) VM.
func TestLuaIsolation(t *testing.T) {
	vm := newLuaVM()
	luaPool.Put(vm)
	setup := `
		leaked = 'yes'
		_G.leaked2 = 'yes'
		string.x = 1 -- raises; pcall'd below
		return true`
	tamper := []string{
		"leaked = 'yes'; _G.leaked2 = 'yes'; return true",
		"pcall(function() string.rep = function() return 'evil' end end); return true",
		"pcall(function() math.floor = nil end); return true",
		"pcall(setmetatable, 1, {__index = function() return 'evil' end}); return true",
		"pcall(setmetatable, '', {__index = {rep = function() return 'evil' end}}); return true",
		"local mt = getmetatable(''); if mt then mt.__index = {rep = function() return 'evil' end} end; return true",
		"pairs = nil; ipairs = nil; tostring = nil; return true",
		"local t = {}; setmetatable(t, {__index = function() return 'evil' end}); return true",
		setup,
	}
	check := `return leaked == nil and leaked2 == nil and ('x'):rep(2) == 'xx' and string.rep('y', 2) == 'yy'
		and math.floor(1.5) == 1 and not pcall(function() return (5).x end) and pairs ~= nil and tostring(1) == '1'`
	for _, src := range tamper {
		// Several times: the pool may hand out another VM.
		for i := 0; i < 3; i++ {
			runLua(t, src, sampleContext())
			got, err := runLua(t, check, sampleContext())
			if err != nil || !got {
				t.Fatalf("after %q: %v, %v", src, got, err)
			}
		}
	}
}

// TestLuaIsolationSameVM runs the tamper and the check in one VM,
// deterministically (the pool may not return the same one).
func TestLuaIsolationSameVM(t *testing.T) {
	compile := func(src string) *luaScript {
		cond, err := compileLua("t.lua", src, LuaLimits{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cond.(*luaScript)
	}
	check := compile("return leaked == nil and string.rep ~= nil and not pcall(function() return (5).x end)")
	vm := newLuaVM()
	for _, src := range []string{
		`leaked = 1; pcall(function() string.rep = nil end)
		 pcall(setmetatable, 1, {__index = function() return 'evil' end}); return true`,
		"leaked = 1; error('boom')",                  // a script error
		"leaked = 1; while true do end",              // a budget spent
		"leaked = 1; local s = ('x'):rep(1e9)",       // a budget spent inside a library function
		"leaked = 1; local function f() f() end f()", // stack overflow
	} {
		_, err, reusable := compile(src).run(vm, context.Background(), sampleContext())
		if !reusable {
			t.Fatalf("%s: the VM is not reusable after %v", src, err)
		}
		ret, err, _ := check.run(vm, context.Background(), sampleContext())
		if err != nil || ret != lua.LTrue {
			t.Fatalf("after %s: %v, %v", src, ret, err)
		}
	}
}

func wantBudget(t *testing.T, name string, err error, d time.Duration) {
	t.Helper()
	if err == nil || !errors.Is(err, errLuaBudget) {
		t.Errorf("%s: err %v, want a budget error", name, err)
	}
	if d > 5*time.Second {
		t.Errorf("%s: took %v", name, d)
	}
}

// TestLuaBudgets: each bomb stops on its budget, quickly, and the process
// survives it.
func TestLuaBudgets(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"endless loop", "while true do end", "instructions"},
		{"endless loop in pcall", "while true do pcall(function() while true do end end) end", "instructions"},
		{"tail-call loop", "local function f() return f() end return f()", "instructions"},
		{"string.rep bomb", "local s = string.rep('x', 1e10) return true", "bytes"},
		{"string.rep bomb, method", "local s = ('x'):rep(2^31) return true", "bytes"},
		{"doubling concat", "local s = 'x' while true do s = s .. s end", "bytes"},
		{"wide concat", "local s = string.rep('x', 1e6) local t = s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s return true", "bytes"},
		{"concat in pcall", "local s = 'x' while true do pcall(function() s = s .. s end) end", "lua"},
		{"table.concat bomb", "local t = {} for i = 1, 1000 do t[i] = string.rep('x', 1e5) end local s = table.concat(t) .. table.concat(t) return true", "bytes"},
		{"gsub bomb", "local big = string.rep('x', 9e6) local s = big:gsub('^', big) return true", "bytes"},
		{"gsub of empty matches", "local s = string.rep('x', 1e5):gsub('', string.rep('%0', 1e5)) return true", "instructions"},
		{"format bomb", "local s = string.rep('x', 1e6) for i = 1, 100 do s = string.format('%s%s', s, s) end return true", "bytes"},
		{"many strings", "local t = {} for i = 1, 100 do t[i] = string.rep('x', 1e6) .. i end return true", "bytes of strings"},
		{"table filling", "local t = {} local i = 0 while true do i = i + 1 t[i] = i end", "instructions"},
		{"pattern backtracking", "return string.find(string.rep('a', 5000), '(.-)(.-)(.-)(.-)b') ~= nil", "instructions"},
		{"pattern backtracking, match", "return string.match(string.rep('a', 3000), '^(a-)(a-)(a-)(a-)b') ~= nil", "instructions"},
		// The library's sort makes all its comparisons inside one
		// instruction: unbudgeted, this ran for 11s.
		{"sort of long strings", "local a = string.rep('x', 4e6 - 1) local b = a:upper():lower() local t = {} for i = 1, 4000 do t[i] = (i % 2 == 0) and a or b end table.sort(t) return true", "instructions"},
		{"gmatch backtracking", "for x in string.gmatch(string.rep('a', 5000), '.-.-.-b') do end return true", "instructions"},
	} {
		start := time.Now()
		_, err := runLua(t, tc.src, sampleContext())
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		wantBudget(t, tc.name, err, time.Since(start))
		if err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestLuaStackLimits(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"deep recursion", "local function f(n) return 1 + f(n + 1) end return f(1) > 0", "stack overflow"},
		{"metamethod recursion", "local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end return t.x", "stack overflow"},
		{"unpack bomb", "return select('#', unpack({}, 1, 1e8)) > 0", "too many results"},
		{"registry via string.byte", "return select('#', string.byte(string.rep('x', 1e6), 1, -1)) > 0", "registry overflow"},
	} {
		start := time.Now()
		_, err := runLua(t, tc.src, sampleContext())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v", tc.name, d)
		}
	}
}

func TestLuaTimeout(t *testing.T) {
	// A script that stays under its instruction budget for long: sorting
	// with a slow comparator.
	_, err := runLuaLimits(t, "while true do end", sampleContext(),
		LuaLimits{Instructions: 1 << 40, Timeout: 20 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "ran longer than") {
		t.Fatalf("err %v, want the timeout", err)
	}
	// The caller's context ends a run too.
	cond, err := compileLua("t.lua", "while true do end", LuaLimits{Instructions: 1 << 40, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := cond.Match(ctx, sampleContext()); err == nil || !errors.Is(err, errLuaBudget) {
		t.Fatalf("err %v, want the caller's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestLuaMemoryGauge: with a large instruction budget, table growth is
// stopped by the allocation gauge.
func TestLuaMemoryGauge(t *testing.T) {
	_, err := runLuaLimits(t, "local t = {} local i = 0 while true do i = i + 1 t[i] = {i} end", sampleContext(),
		LuaLimits{Instructions: 1 << 40, Timeout: time.Minute, MemoryBytes: 8 << 20})
	if err == nil || !strings.Contains(err.Error(), "allocated more than") {
		t.Fatalf("err %v, want the memory gauge", err)
	}
	// Within the default instruction budget, tables of varargs allocate
	// ~50 KiB per instruction.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = runLua(t, `local big = {} for i = 1, 3000 do big[i] = i end
		local function f(...) local t = {} while true do t[#t+1] = {...} end end
		f(unpack(big))`, sampleContext())
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "allocated more than") {
		t.Fatalf("err %v, want the memory gauge", err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 4*luaDefaultMemory {
		t.Fatalf("the run allocated %d bytes", grown)
	}
}

func TestLuaErrorsBounded(t *testing.T) {
	_, err := runLua(t, "error(string.rep('x', 100000))", sampleContext())
	if err == nil || len(err.Error()) > maxLuaErrorBytes+100 {
		t.Fatalf("err of %d bytes", len(err.Error()))
	}
}

// TestLuaPatterns checks the budgeted matcher against Lua 5.1 results.
func TestLuaPatterns(t *testing.T) {
	for _, src := range []string{
		"return string.find('hello world', 'o w') == 5",
		"return select(2, string.find('hello world', 'o w')) == 7",
		"return string.find('a.b', '.', 1, true) == 2",
		"return string.find('abc', 'b', -1) == nil",
		"return string.match('key=value', '(%w+)=(%w+)') == 'key'",
		"return select(2, string.match('key=value', '(%w+)=(%w+)')) == 'value'",
		"return string.match('  trim  ', '^%s*(.-)%s*$') == 'trim'",
		"return string.match('hello', '()ll()') == 3",
		"return string.match('THE (quick) fox', '%((%a+)%)') == 'quick'",
		"return string.match('f(a(b)c)d', '%b()') == '(a(b)c)'",
		"return string.match('THE quick', '%f[%a]%a+', 4) == 'quick'",
		"return string.match('abcabc', '(abc)%1') == 'abc'",
		"return string.match('2024-01-02', '^(%d+)-(%d+)-(%d+)$') == '2024'",
		"return string.match('x', '[^%d]') == 'x' and string.match('5', '[^%d]') == nil",
		"return string.match('a-z', '[a%-z]+') == 'a-z'",
		"return string.match('x]', '[]x]+') == 'x]'",
		"return string.match('aaa', 'a-b') == nil and string.match('aaab', 'a-b') == 'aaab'",
		"return string.match('color colour', 'colou?r', 7) == 'colour'",
		"return string.gsub('hello world', '(%w+)', '<%1>') == '<hello> <world>'",
		"return select(2, string.gsub('abc', '', '-')) == 4",
		"return string.gsub('abc', '', '-') == '-a-b-c-'",
		"return string.gsub('hello', 'l', {l = 'L'}) == 'heLLo'",
		"return string.gsub('abc', '%w', function(c) return c:upper() .. '.' end) == 'A.B.C.'",
		"return string.gsub('abc', 'b', '%%') == 'a%c'",
		"return string.gsub('aaa', 'a', 'b', 2) == 'bba'",
		"return string.gsub('aaa', '^a', 'b') == 'baa'",
		`local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t+1] = k .. v end return table.concat(t, ' ') == 'a1 b2'`,
		`local n = 0 for w in string.gmatch('one two three', '%a+') do n = n + 1 end return n == 3`,
		"return not pcall(string.find, 'x', '[a')",
		"return not pcall(string.find, 'x', '%')",
		"return not pcall(string.match, 'x', '(x')",
		"return not pcall(string.gsub, 'x', 'x', '%2')",
		"return not pcall(string.find, 'x', string.rep('.', 5000))",
		"return not pcall(string.match, string.rep('a', 300), string.rep('(a)', 33))",
	} {
		got, err := runLua(t, src, sampleContext())
		if err != nil || !got {
			t.Errorf("%s: %v, %v", src, got, err)
		}
	}
}

func BenchmarkLua(b *testing.B) {
	cond, err := compileLua("bench.lua", `
		local turn = context.turn
		if context.state.warned then return false end
		local failures = 0
		for _, tool in ipairs(context.history.tools) do
			if not tool.success then failures = failures + 1 end
		end
		return turn.token_usage > (context.settings.threshold or 0.8) and failures == 0`, LuaLimits{})
	if err != nil {
		b.Fatal(err)
	}
	benchMatch(b, cond)
}

// benchMatch measures cond on sampleContext() with state warned false,
// where it must hold.
func benchMatch(b *testing.B, cond Condition) {
	c := sampleContext()
	c.State["warned"] = false
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ok, err := cond.Match(ctx, c)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// TestLuaContextMatchesMap: the lazy proxy over the Context shows what
// Context.Map() holds, names and values.
func TestLuaContextMatchesMap(t *testing.T) {
	vm := newLuaVM()
	for _, c := range []*Context{sampleContext(), {}} {
		var walk func(path string, a, b lua.LValue)
		walk = func(path string, a, b lua.LValue) {
			ta, okA := a.(*lua.LTable)
			tb, okB := b.(*lua.LTable)
			if okA != okB {
				t.Errorf("%s: %v vs %v", path, a, b)
				return
			}
			if !okA {
				if a != b {
					t.Errorf("%s: %v (%T) vs %v (%T)", path, a, a, b, b)
				}
				return
			}
			va, vb := vm.run.backing[ta], vm.run.backing[tb]
			if goLen(va) != goLen(vb) {
				t.Errorf("%s: length %d vs %d", path, goLen(va), goLen(vb))
			}
			if isList(vb) {
				for i := 1; i <= goLen(vb); i++ {
					walk(fmt.Sprintf("%s[%d]", path, i), vm.rawIndex(ta, lua.LNumber(i)), vm.rawIndex(tb, lua.LNumber(i)))
				}
				return
			}
			ka, kb := vm.sortedKeys(ta, va), vm.sortedKeys(tb, vb)
			if strings.Join(ka, ",") != strings.Join(kb, ",") {
				t.Errorf("%s: keys %v vs %v", path, ka, kb)
			}
			for _, k := range kb {
				walk(path+"."+k, vm.rawIndex(ta, lua.LString(k)), vm.rawIndex(tb, lua.LString(k)))
			}
		}
		walk("context", vm.proxy(c), vm.proxy(c.Map()))
	}
}

// TestLuaConcurrent runs scripts from many goroutines (for the race
// detector: shared protos, the pool).
func TestLuaConcurrent(t *testing.T) {
	cond, err := compileLua("c.lua", "x = (x or 0) + 1; return x == 1 and context.turn.number == 3 and ('a' .. 'b') == 'ab'", LuaLimits{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := sampleContext()
			for i := 0; i < 200; i++ {
				ok, err := cond.Match(context.Background(), c)
				if err == nil && !ok {
					err = errors.New("no match")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// BenchmarkLuaMemGauge measures one reading of the allocation counter
// (the memory backstop; a run reads it every luaMemCheckEvery
// instructions).
func BenchmarkLuaMemGauge(b *testing.B) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	b.ReportAllocs()
	for b.Loop() {
		metrics.Read(s)
	}
}

// BenchmarkLuaLoop measures the per-instruction cost of the budget
// (Done() on every instruction) on a loop of 10,000 iterations.
func BenchmarkLuaLoop(b *testing.B) {
	cond, err := compileLua("loop.lua", "local n = 0 for i = 1, 10000 do n = n + i end return n > 0", LuaLimits{})
	if err != nil {
		b.Fatal(err)
	}
	c := sampleContext()
	ctx := context.Background()
	for b.Loop() {
		if ok, err := cond.Match(ctx, c); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkLuaNewVM measures building a sandbox VM (what a run pays after
// its pool was emptied, or after an error dropped its VM).
func BenchmarkLuaNewVM(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		newLuaVM().L.Close()
	}
}

// TestLuaNotReusableAfterPanic: a VM in which a Go panic was recovered is
// not reused.
func TestLuaNotReusableAfterPanic(t *testing.T) {
	vm := newLuaVM()
	defer vm.L.Close()
	base := vm.envMeta.RawGetString("__index").(*lua.LTable)
	base.RawSetString("boom", vm.L.NewFunction(func(*lua.LState) int { panic("a bug") }))
	cond, err := compileLua("t.lua", "boom() return true", LuaLimits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err, reusable := cond.(*luaScript).run(vm, context.Background(), sampleContext())
	if err == nil || reusable {
		t.Fatalf("err %v, reusable %v", err, reusable)
	}
}

// TestLuaPanicNotSwallowed: a Go panic inside the sandbox (a bug in a
// library function) ends the run and drops the VM even when the script
// wrapped the call in pcall or xpcall, which would otherwise turn it into
// an ordinary Lua error and hand the VM back to the pool.
func TestLuaPanicNotSwallowed(t *testing.T) {
	for _, src := range []string{
		"local ok = pcall(boom) return true",
		"local ok = xpcall(boom, function(e) return e end) return true",
		"local ok = pcall(pcall, boom) return true",
	} {
		vm := newLuaVM()
		base := vm.envMeta.RawGetString("__index").(*lua.LTable)
		base.RawSetString("boom", vm.L.NewFunction(func(*lua.LState) int { panic("a bug") }))
		cond, err := compileLua("t.lua", src, LuaLimits{})
		if err != nil {
			t.Fatal(err)
		}
		_, err, reusable := cond.(*luaScript).run(vm, context.Background(), sampleContext())
		if err == nil || reusable || !strings.Contains(err.Error(), "a bug") {
			t.Errorf("%s: err %v, reusable %v", src, err, reusable)
		}
		vm.L.Close()
	}
}

// TestLuaMathRandom: math.random's arguments are checked as Lua 5.1 does
// (the library passed them to rand.Intn, which panics on an empty
// interval).
func TestLuaMathRandom(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"return not pcall(math.random, 0)", ""},
		{"return not pcall(math.random, 1e300)", ""},
		{"return not pcall(math.random, 5, 1)", ""},
		{"for i = 1, 50 do local r = math.random(3) if r < 1 or r > 3 or r ~= math.floor(r) then return false end end return true", ""},
		{"for i = 1, 50 do local r = math.random(-2, 2) if r < -2 or r > 2 then return false end end return true", ""},
		{"local r = math.random(-2^62, 2^62) return r >= -2^62 and r <= 2^62", ""},
		{"local r = math.random() return r >= 0 and r < 1", ""},
		{"return math.random(1, 2, 3) ~= nil", "wrong number of arguments"},
	} {
		ok, err := runLua(t, tc.src, sampleContext())
		switch {
		case tc.want == "" && (err != nil || !ok):
			t.Errorf("%s: %v, %v", tc.src, ok, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

// TestLuaScriptIndices: indices a script passes (±1e300 convert to the
// smallest int) neither panic nor slip past the registry bound.
func TestLuaScriptIndices(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"return table.concat({'a'}, '', -1e300, 1) == ''", "invalid value"},
		{"return table.concat({'a'}, '', -2^62, 2^62) == ''", "invalid value"},
		{"return select('#', unpack({}, -1e300, 5)) > 0", "too many results"},
		{"return select('#', unpack({}, -2^62, 2^62)) > 0", "too many results"},
	} {
		_, err := runLua(t, tc.src, sampleContext())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

// FuzzLuaScript: any source either fails to compile or runs to a result or
// an error within its budgets, in a sandbox that stays reusable unless a
// Go panic was recovered in it.
func FuzzLuaScript(f *testing.F) {
	for _, src := range []string{
		"return context.turn.number > 1",
		"local t = {} for i = 1, 10 do t[i] = i .. 'x' end return #t == 10",
		"while true do end",
		"local s = 'x' while true do s = s .. s end",
		"return string.find(string.rep('a', 50), '(.-)(.-)b') ~= nil",
		"local function f(n) return f(n + 1) + 1 end return f(1)",
		"return pcall(error, {}) == false",
		"for k, v in pairs(context) do local _ = tostring(v) end return true",
		"return ('%5.1f'):format(1.25) == '  1.2'",
		"setmetatable({}, {__index = function(t, k) return t[k] end}).x = 1",
		"return math.random(0) and table.concat({'a'}, '', -1e300, 1) and unpack({}, -2^62, 2^62)",
		"table.insert({}, -1, 1) table.remove({1}, -1e300) return string.sub('abc', -1e300, 1e300) == 'abc'",
		"return string.format('%x%c%d', -1, 1e300, 2^70) and tonumber('zz', 36) and string.char(1e300)",
		"local t = {3, 'a'} table.sort(t, function(a, b) return tostring(a) < tostring(b) end) return select(-1, 1, 2) == 2",
	} {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		cond, err := compileLua("f.lua", src, LuaLimits{Instructions: 20_000, Timeout: 5 * time.Second, MemoryBytes: 4 << 20})
		if err != nil {
			return
		}
		vm := newLuaVM()
		defer vm.L.Close()
		done := make(chan struct{})
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("stuck on %q", src)) })
		defer watchdog.Stop()
		go func() {
			defer close(done)
			_, err, _ := cond.(*luaScript).run(vm, context.Background(), sampleContext())
			var apiErr *lua.ApiError
			if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorPanic {
				t.Fatalf("%q: a Go panic in the sandbox: %v", src, err)
			}
		}()
		<-done
	})
}
