package plugins

import (
	"log/slog"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The sandbox's string-producing functions. Each charges the bytes it
// produces to the run's memory budget before allocating them, so that a
// memory bomb (string.rep('x', 1e9), s = s .. s in a loop) fails on the
// allocation that crosses the budget instead of exhausting the process:
// gopher-lua has no allocator hook, and one instruction can allocate
// gigabytes.

// luaBuilder accumulates a string, charging the run as it grows.
type luaBuilder struct {
	L   *lua.LState
	run *luaRun
	b   strings.Builder
}

func (vm *luaVM) newBuilder(L *lua.LState) *luaBuilder {
	return &luaBuilder{L: L, run: vm.run}
}

func (b *luaBuilder) charge(n int) {
	if b.b.Len()+n > maxLuaString {
		n = maxLuaString + 1 // fails, naming the bound on one string
	}
	if !b.run.charge(n) {
		b.L.RaiseError("%s", b.run.err.Error())
	}
}

func (b *luaBuilder) WriteString(s string) {
	b.charge(len(s))
	b.b.WriteString(s)
}

func (b *luaBuilder) addByte(c byte) {
	b.charge(1)
	b.b.WriteByte(c)
}

func (b *luaBuilder) String() string { return b.b.String() }

// chargeOrRaise charges n bytes to the run or raises the budget error.
func (vm *luaVM) chargeOrRaise(L *lua.LState, n int) {
	if !vm.run.charge(n) {
		L.RaiseError("%s", vm.run.err.Error())
	}
}

// concat is the `..` operator: compileLua rewrites every a .. b of a
// script into a call of it (see rewriteConcat), since the VM's own CONCAT
// instruction allocates without any check.
func (vm *luaVM) concat(L *lua.LState) int {
	a, b := L.Get(1), L.Get(2)
	if lua.LVCanConvToString(a) && lua.LVCanConvToString(b) {
		sa, sb := lua.LVAsString(a), lua.LVAsString(b)
		vm.chargeOrRaise(L, len(sa)+len(sb))
		L.Push(lua.LString(sa + sb))
		return 1
	}
	mm := L.GetMetaField(a, "__concat")
	if mm == lua.LNil {
		mm = L.GetMetaField(b, "__concat")
	}
	if fn, ok := mm.(*lua.LFunction); ok {
		L.Push(fn)
		L.Push(a)
		L.Push(b)
		L.Call(2, 1)
		return 1
	}
	bad := a
	if lua.LVCanConvToString(a) {
		bad = b
	}
	L.RaiseError("attempt to concatenate a %s value", bad.Type().String())
	return 0
}

// strRep is string.rep, charged before the repetition is built.
func (vm *luaVM) strRep(L *lua.LState) int {
	s := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || len(s) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	if n > maxLuaString/len(s) {
		vm.chargeOrRaise(L, maxLuaString+1) // fails (n*len(s) may overflow)
	}
	vm.chargeOrRaise(L, n*len(s))
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}

// copying returns a string function whose result (as long as its first
// argument: lower, upper, reverse) is charged before it runs.
func (vm *luaVM) copying(fn lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		vm.chargeOrRaise(L, len(L.CheckString(1)))
		return fn(L)
	}
}

// strFormat is string.format with C Lua's limits on specifications (width
// and precision of at most two digits; gopher-lua passes them to Go's fmt,
// where %999999d pads to a megabyte) and its result charged beforehand
// from an upper bound of its size.
func (vm *luaVM) strFormat(orig lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		f := L.CheckString(1)
		size, arg := len(f), 2
		for i := 0; i < len(f); i++ {
			if f[i] != '%' {
				continue
			}
			i++
			if i < len(f) && f[i] == '%' {
				continue
			}
			for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
				i++
			}
			digits := 0
			for i < len(f) && isDigit(f[i]) {
				i, digits = i+1, digits+1
			}
			if i < len(f) && f[i] == '.' {
				i++
				pd := 0
				for i < len(f) && isDigit(f[i]) {
					i, pd = i+1, pd+1
				}
				digits = max(digits, pd)
			}
			if digits > 2 {
				L.RaiseError("invalid format (width or precision too long)")
			}
			if i >= len(f) || strings.IndexByte("cdiouxXeEfgGqs", f[i]) < 0 {
				L.RaiseError("invalid option in format string")
			}
			n := 512 // padding (≤ 99), and a number (%99.99f of 1e308) or "table: 0x..."
			if v := L.Get(arg); v.Type() == lua.LTString {
				n += len(string(v.(lua.LString)))
				if f[i] == 'q' {
					n += 5 * len(string(v.(lua.LString))) // escapes
				}
			}
			size += n
			arg++
		}
		vm.chargeOrRaise(L, size)
		return orig(L)
	}
}

// tableConcat is table.concat, over plain tables and read-only context
// lists, its result charged before it is built.
func (vm *luaVM) tableConcat(L *lua.LState) int {
	t := L.CheckTable(1)
	sep := L.OptString(2, "")
	n := vm.length(t)
	i, j := L.OptInt(3, 1), L.OptInt(4, n)
	if i > j {
		L.Push(lua.LString(""))
		return 1
	}
	parts := make([]string, 0, min(luaSpan(i, j), n+1))
	size := 0
	for k := i; k <= j; k++ {
		v := vm.rawIndex(t, lua.LNumber(k))
		if !lua.LVCanConvToString(v) {
			L.RaiseError("invalid value (a %s) at index %d in table for concat", v.Type().String(), k)
		}
		s := lua.LVAsString(v)
		size += len(s) + len(sep)
		if size > maxLuaString {
			vm.chargeOrRaise(L, size) // fails
		}
		parts = append(parts, s)
	}
	vm.chargeOrRaise(L, size)
	L.Push(lua.LString(strings.Join(parts, sep)))
	return 1
}

// print discards its arguments, or logs them at debug level (bounded).
func (vm *luaVM) print(L *lua.LState) int {
	if !slog.Default().Enabled(vm.run.parent, slog.LevelDebug) {
		return 0
	}
	var b strings.Builder
	for i := 1; i <= L.GetTop() && b.Len() < 512; i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(L.Get(i).String())
	}
	msg := b.String()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	slog.Debug("plugins: lua print", "script", vm.run.name, "text", msg)
	return 0
}
