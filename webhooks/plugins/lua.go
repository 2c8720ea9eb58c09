package plugins

import "errors"

// compileLua compiles a Lua script (name is its file, for errors) into a
// condition that runs it in a sandbox within limits. The script sees
// `context` as read-only tables and its result is the condition: it must
// return a boolean (return true / return false); anything else is an
// error.
func compileLua(name, source string, limits LuaLimits) (Condition, error) {
	return nil, errors.New("plugins: Lua conditions not written yet")
}
