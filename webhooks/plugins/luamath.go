package plugins

import (
	"math/rand/v2"

	lua "github.com/yuin/gopher-lua"
)

// mathRandom is math.random with Lua 5.1's argument checks: the library's
// passes m or n-m+1 to rand.Intn, which panics on an empty interval
// (math.random(0), math.random(5, 1)), and n-m+1 overflows for a wide one.
func mathRandom(L *lua.LState) int {
	switch L.GetTop() {
	case 0:
		L.Push(lua.LNumber(rand.Float64()))
	case 1:
		m := L.CheckInt(1)
		if m < 1 {
			L.ArgError(1, "interval is empty")
		}
		L.Push(lua.LNumber(rand.IntN(m) + 1))
	case 2:
		lo, hi := L.CheckInt(1), L.CheckInt(2)
		if lo > hi {
			L.ArgError(2, "interval is empty")
		}
		// hi-lo as uint64 is exact even where int overflows; +1 wraps to
		// 0 only for the whole int range, where any value will do.
		span := uint64(hi) - uint64(lo) + 1
		r := rand.Uint64()
		if span != 0 {
			r = rand.Uint64N(span)
		}
		L.Push(lua.LNumber(lo + int(r)))
	default:
		L.RaiseError("wrong number of arguments")
	}
	return 1
}
