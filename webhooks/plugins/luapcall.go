package plugins

import (
	"errors"

	lua "github.com/yuin/gopher-lua"
)

// pcall and xpcall as the sandbox has them: Lua's, except that a Go panic
// inside them (a bug in a library function; gopher-lua's PCall recovers
// it as an ApiErrorPanic) is not the script's to catch. It goes on up to
// luaScript.run, which then drops the VM: a panic may have left it
// inconsistent, and with the library's pcall the script swallowed it and
// the VM went back to the pool.

func (vm *luaVM) pcall(L *lua.LState) int {
	L.CheckAny(1)
	if v := L.Get(1); v.Type() != lua.LTFunction && L.GetMetaField(v, "__call").Type() != lua.LTFunction {
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + v.Type().String() + " value"))
		return 2
	}
	if err := L.PCall(L.GetTop()-1, lua.MultRet, nil); err != nil {
		L.Push(lua.LFalse)
		L.Push(errorObject(err))
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// xpcall calls the handler once the error has unwound, as gopher-lua's
// does; an error in the handler is the result.
func (vm *luaVM) xpcall(L *lua.LState) int {
	fn := L.CheckFunction(1)
	handler := L.CheckFunction(2)
	top := L.GetTop()
	L.Push(fn)
	if err := L.PCall(0, lua.MultRet, nil); err != nil {
		L.Push(handler)
		L.Push(errorObject(err))
		var res lua.LValue
		if err := L.PCall(1, 1, nil); err != nil {
			res = errorObject(err)
		} else {
			res = L.Get(-1)
			L.Pop(1)
		}
		L.Push(lua.LFalse)
		L.Push(res)
		return 2
	}
	L.Insert(lua.LTrue, top+1)
	return L.GetTop() - top
}

// errorObject is the value a caught error gives the script; a Go panic
// is raised again instead.
func errorObject(err error) lua.LValue {
	var apiErr *lua.ApiError
	if !errors.As(err, &apiErr) {
		return lua.LString(err.Error())
	}
	if apiErr.Type == lua.ApiErrorPanic {
		panic(apiErr)
	}
	return apiErr.Object
}
