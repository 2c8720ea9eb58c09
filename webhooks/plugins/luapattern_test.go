package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// patternCases are subjects and patterns on which the sandbox's matcher
// must agree with gopher-lua's (which follows Lua 5.1).
var patternCases = []struct{ s, p string }{
	{"hello world", "o"}, {"hello world", "o w"}, {"hello world", "(o)(r)"}, {"hello world", "l+"},
	{"hello world", "l-o"}, {"hello world", "^h"}, {"hello world", "^w"}, {"hello world", "d$"},
	{"hello world", "%s"}, {"hello world", "%S+"}, {"hello world", "[aeiou]"}, {"hello world", "[^aeiou ]+"},
	{"hello world", "()o()"}, {"hello world", "x*"}, {"hello world", ""}, {"hello world", ".-"},
	{"key = value", "(%w+)%s*=%s*(%w+)"}, {"  trim  ", "^%s*(.-)%s*$"}, {"f(a(b)c)d", "%b()"},
	{"THE (quick) fox", "%f[%a]%a+"}, {"abcabc", "(abc)%1"}, {"2024-01-02", "(%d+)-(%d+)-(%d+)"},
	{"a.b.c", "%."}, {"a+b", "a%+b"}, {"x]y", "[]x]+"}, {"a-z", "[a%-z]+"}, {"[x]", "%[(.)%]"},
	{"aaa", "a?a?a?a"}, {"aaab", "a-b"}, {"color colour", "colou?r"}, {"%d", "%%d"},
	{"UPPER lower 123 !?", "%u+"}, {"UPPER lower 123 !?", "%l+"}, {"UPPER lower 123 !?", "%p+"},
	{"UPPER lower 123 !?", "%x+"}, {"UPPER lower 123 !?", "%W+"}, {"UPPER lower 123 !?", "%D+"},
	{"tab\there", "%c"}, {"a\x00b", "%z"}, {"a\x00b", "[%z]"}, {"end", "$"}, {"a$b", "a$b"},
	{"one two  three", "(%a+)"}, {"", ""}, {"", "a*"}, {"abc", "[a-c]+"}, {"abc", "[^a-b]"},
}

// luaQuote quotes s as a Lua 5.1 string literal (which has no \x
// escapes).
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			fmt.Fprintf(&b, "\\%03d", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// stockLua runs src in a plain gopher-lua state with its own string
// library.
func stockLua(t *testing.T, src string) string {
	t.Helper()
	L := lua.NewState()
	defer L.Close()
	if err := L.DoString(src); err != nil {
		return "error"
	}
	return L.Get(-1).String()
}

// sandboxLua runs src (which returns a value) in a sandbox VM and gives
// the value as a string.
func sandboxLua(t *testing.T, src string) string {
	t.Helper()
	proto, err := compileLuaProto("p.lua", src)
	if err != nil {
		t.Fatal(err)
	}
	vm := newLuaVM()
	defer vm.L.Close()
	vm.run.start(context.Background(), "p.lua", LuaLimits{Instructions: 1e6, Timeout: time.Second, MemoryBytes: 1 << 24})
	env := vm.L.CreateTable(0, 2)
	env.Metatable = vm.envMeta
	fn := vm.L.NewFunctionFromProto(proto)
	fn.Env = env
	vm.L.SetContext(vm.run)
	vm.L.Push(fn)
	if err := vm.L.PCall(0, 1, nil); err != nil {
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorPanic {
			t.Fatalf("%s: a Go panic: %v", src, err)
		}
		return "error"
	}
	return vm.L.Get(-1).String()
}

// stockBugs are the cases where gopher-lua's matcher departs from Lua
// 5.1, with Lua 5.1's result.
var stockBugs = map[string]string{
	// no match returns nothing instead of nil
	`return table.concat({tostring(string.match("hello world", "^w"))}, ',')`: "nil",
	// an empty pattern ignores init
	`return table.concat({tostring(string.find("hello world", "", 3))}, ',')`: "3",
	// %f at the start of the subject (the previous char is \0)
	`return table.concat({tostring(string.find("THE (quick) fox", "%f[%a]%a+"))}, ',')`:                                                                              "1",
	`return table.concat({tostring(string.find("THE (quick) fox", "%f[%a]%a+", 3))}, ',')`:                                                                           "6",
	`return table.concat({tostring(string.match("THE (quick) fox", "%f[%a]%a+"))}, ',')`:                                                                             "THE",
	`return table.concat({string.gsub("THE (quick) fox", "%f[%a]%a+", '<%0>')}, ',')`:                                                                                "<THE> (<quick>) <fox>,3",
	`return table.concat({string.gsub("THE (quick) fox", "%f[%a]%a+", 'x', 1)}, ',')`:                                                                                "x (quick) fox,1",
	`return (function(s, p) local t = {} for a in string.gmatch(s, p) do t[#t+1] = tostring(a) end return table.concat(t, '|') end)("THE (quick) fox", "%f[%a]%a+")`: "THE|quick|fox",
	// Lua 5.1 clamps init to the subject's length
	`return table.concat({tostring(string.find("", "a*", 3))}, ',')`: "1",
}

func TestLuaPatternsMatchStock(t *testing.T) {
	q := luaQuote
	used := map[string]bool{}
	for _, tc := range patternCases {
		for _, expr := range []string{
			"table.concat({tostring(string.find(%s, %s))}, ',')",
			"table.concat({tostring(select(3, string.find(%s, %s)))}, ',')",
			"table.concat({tostring(string.find(%s, %s, 3))}, ',')",
			"table.concat({tostring(string.match(%s, %s))}, ',')",
			"table.concat({tostring(select(2, string.match(%s, %s)))}, ',')",
			"table.concat({string.gsub(%s, %s, '<%%0>')}, ',')",
			"table.concat({string.gsub(%s, %s, 'x', 1)}, ',')",
			"(function(s, p) local t = {} for a in string.gmatch(s, p) do t[#t+1] = tostring(a) end return table.concat(t, '|') end)(%s, %s)",
		} {
			src := "return " + fmt.Sprintf(expr, q(tc.s), q(tc.p))
			if strings.HasPrefix(tc.p, "^") && strings.Contains(expr, "gmatch") {
				continue // gopher-lua anchors gmatch; Lua 5.1 takes ^ literally there
			}
			want, ok := stockBugs[src]
			used[src] = ok
			if !ok {
				want = stockLua(t, src)
			}
			if got := sandboxLua(t, src); got != want {
				t.Errorf("%s: sandbox %q, want %q", src, got, want)
			}
		}
	}
	for src := range stockBugs {
		if !used[src] {
			t.Errorf("stockBugs has a case not run: %s", src)
		}
	}
}

// FuzzLuaPattern: whatever the subject and pattern, the matcher ends (its
// steps are budgeted) with a result or a Lua error, never a Go panic.
func FuzzLuaPattern(f *testing.F) {
	for _, tc := range patternCases {
		f.Add(tc.s, tc.p)
	}
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "(.-)(.-)(.-)b")
	f.Add("((((", "%b(")
	f.Add("x", "%f")
	f.Add("x", "[%")
	f.Add("x", "(()")
	f.Add("a", "()%1") // a back-reference to a position capture (sliced [:-2])
	f.Fuzz(func(t *testing.T, s, p string) {
		if len(s) > 1000 || len(p) > 100 {
			return
		}
		qs, qp := luaQuote(s), luaQuote(p)
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("stuck on %q %q", s, p)) })
		defer watchdog.Stop()
		sandboxLua(t, fmt.Sprintf(`local s, p = %s, %s
			local r = {pcall(string.find, s, p)}
			r[#r+1] = pcall(string.find, s, p, -3)
			r[#r+1] = pcall(string.match, s, p, 2)
			r[#r+1] = pcall(string.gsub, s, p, '%%0%%1')
			r[#r+1] = pcall(string.gsub, s, p, function(...) return select('#', ...) end)
			r[#r+1] = pcall(function() for a, b in string.gmatch(s, p) do end end)
			return #r`, qs, qp))
	})
}
