package plugins

import (
	"encoding/json"
	"math"
	"reflect"
	"sort"
	"strconv"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The context as Lua sees it: read-only tables over the Context, with the
// names and values of Context.Map() (times as RFC 3339 strings, absent
// maps empty), converted lazily as the script reads them: a condition
// typically reads two or three fields of a context holding dozens of
// messages, and building Map() for every run of every script would cost
// more than the run (TestLuaContextMatchesMap checks they agree).
//
// Each map or list is a proxy: an empty table whose (shared, protected)
// metatable reads from the Go value the run keeps for it (__index),
// refuses writes (__newindex) and gives its length (__len). Since a proxy
// never holds a key itself, every write reaches __newindex, and
// rawset/rawget are not in the sandbox; next, pairs, ipairs, unpack and the
// table library know proxies (maps iterate in key order).

// proxyKey names a child proxy (a nested map or list) by its parent and
// its key there, so that reading context.turn twice gives the same table.
type proxyKey struct {
	parent *lua.LTable
	key    string
	index  int
}

// proxy returns a new read-only table over v (a map or a list).
func (vm *luaVM) proxy(v any) *lua.LTable {
	t := vm.L.CreateTable(0, 0)
	t.Metatable = vm.roMeta
	vm.run.backing[t] = v
	return t
}

// isProxy reports whether t is a read-only context table.
func (vm *luaVM) isProxy(t *lua.LTable) bool {
	_, ok := vm.run.backing[t]
	return ok
}

// goIndex returns the Go value of the proxy over v at k (ok false when
// absent).
func goIndex(v any, k lua.LValue) (any, bool) {
	if name, ok := k.(lua.LString); ok {
		if x, ok, isStruct := structField(v, string(name)); isStruct {
			return x, ok
		}
	}
	switch m := v.(type) {
	case map[string]any:
		s, ok := k.(lua.LString)
		if !ok {
			return nil, false
		}
		x, ok := m[string(s)]
		return x, ok
	case []any:
		i, ok := listIndex(k, len(m))
		if !ok {
			return nil, false
		}
		return m[i], true
	case map[string]int64:
		s, ok := k.(lua.LString)
		if !ok {
			return nil, false
		}
		x, ok := m[string(s)]
		return x, ok
	case []Message:
		i, ok := listIndex(k, len(m))
		if !ok {
			return nil, false
		}
		return &m[i], true
	case []ToolCall:
		i, ok := listIndex(k, len(m))
		if !ok {
			return nil, false
		}
		return &m[i], true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map:
		s, ok := k.(lua.LString)
		if !ok || rv.Type().Key().Kind() != reflect.String {
			return nil, false
		}
		x := rv.MapIndex(reflect.ValueOf(string(s)).Convert(rv.Type().Key()))
		if !x.IsValid() {
			return nil, false
		}
		return x.Interface(), true
	case reflect.Slice, reflect.Array:
		i, ok := listIndex(k, rv.Len())
		if !ok {
			return nil, false
		}
		return rv.Index(i).Interface(), true
	}
	return nil, false
}

// structFields are the Lua names of the context's structs, by pointer
// type: their fields' cel tags (the names CEL and Context.Map() use),
// sorted (the order pairs gives). structField reads them
// (TestLuaContextMatchesMap checks both agree with Map()).
var structFields = func() map[reflect.Type][]string {
	m := map[reflect.Type][]string{}
	for _, v := range []any{&Context{}, &Turn{}, &History{}, &Message{}, &ToolCall{}, &User{}, &Project{}, &ToolResult{}} {
		t := reflect.TypeOf(v)
		var names []string
		for i := range t.Elem().NumField() {
			if name := t.Elem().Field(i).Tag.Get("cel"); name != "" {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		m[t] = names
	}
	return m
}()

// structField is the field called name of one of the context's structs
// (isStruct false when v is none of them). Pointers into the context, so
// nothing is copied. A switch, not reflection over structFields: it runs
// for every field a script reads, and reflection costs it three times as
// much.
func structField(v any, name string) (x any, ok, isStruct bool) {
	switch t := v.(type) {
	case *Context:
		switch name {
		case "turn":
			return &t.Turn, true, true
		case "history":
			return &t.History, true, true
		case "user":
			return &t.User, true, true
		case "project":
			return &t.Project, true, true
		case "state":
			return t.State, true, true
		case "settings":
			return t.Settings, true, true
		case "event":
			return t.Event, true, true
		case "result":
			return &t.Result, true, true
		}
	case *Turn:
		switch name {
		case "number":
			return t.Number, true, true
		case "token_usage":
			return t.TokenUsage, true, true
		case "context_usage":
			return t.ContextUsage, true, true
		case "iteration_count":
			return t.IterationCount, true, true
		}
	case *History:
		switch name {
		case "messages":
			return t.Messages, true, true
		case "tools":
			return t.Tools, true, true
		case "failures":
			return t.Failures, true, true
		}
	case *Message:
		switch name {
		case "role":
			return t.Role, true, true
		case "content":
			return t.Content, true, true
		}
	case *ToolCall:
		switch name {
		case "name":
			return t.Name, true, true
		case "arguments":
			return t.Arguments, true, true
		case "result":
			return t.Result, true, true
		case "success":
			return t.Success, true, true
		case "timestamp":
			return t.Timestamp, true, true
		}
	case *User:
		switch name {
		case "id":
			return t.ID, true, true
		case "settings":
			return t.Settings, true, true
		}
	case *Project:
		switch name {
		case "id":
			return t.ID, true, true
		case "settings":
			return t.Settings, true, true
		}
	case *ToolResult:
		switch name {
		case "name":
			return t.Name, true, true
		case "arguments":
			return t.Arguments, true, true
		case "result":
			return t.Result, true, true
		case "success":
			return t.Success, true, true
		case "error":
			return t.Error, true, true
		case "duration_ms":
			return t.DurationMs, true, true
		}
	default:
		return nil, false, false
	}
	return nil, false, true
}

// listIndex converts a Lua index (1-based) to a Go one.
func listIndex(k lua.LValue, n int) (int, bool) {
	f, ok := k.(lua.LNumber)
	if !ok || float64(f) != math.Trunc(float64(f)) || f < 1 || float64(f) > float64(n) {
		return 0, false
	}
	return int(f) - 1, true
}

// goLen is the length of a proxy: a list's length, 0 for a map (as # of a
// Lua table with no array part).
func goLen(v any) int {
	switch l := v.(type) {
	case []any:
		return len(l)
	case []Message:
		return len(l)
	case []ToolCall:
		return len(l)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
		return rv.Len()
	}
	return 0
}

// toLua converts the Go value x, found at key k of the proxy parent, to
// Lua.
func (vm *luaVM) toLua(parent *lua.LTable, k lua.LValue, x any) lua.LValue {
	switch v := x.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return lua.LString(string(v))
		}
		return lua.LNumber(f)
	case time.Time:
		return lua.LString(v.UTC().Format(time.RFC3339Nano))
	}
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Pointer:
		if rv.Kind() == reflect.Pointer && structFields[rv.Type()] == nil {
			return lua.LNil
		}
		pk := proxyKey{parent: parent}
		if s, ok := k.(lua.LString); ok {
			pk.key = string(s)
		} else {
			pk.index = int(k.(lua.LNumber))
		}
		if t, ok := vm.run.children[pk]; ok {
			return t
		}
		t := vm.proxy(x)
		vm.run.children[pk] = t
		return t
	case reflect.Bool:
		return lua.LBool(rv.Bool())
	case reflect.String:
		return lua.LString(rv.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return lua.LNumber(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return lua.LNumber(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return lua.LNumber(rv.Float())
	}
	return lua.LNil
}

// roIndex is the proxies' __index.
func (vm *luaVM) roIndex(L *lua.LState) int {
	t := L.CheckTable(1)
	k := L.Get(2)
	v, ok := vm.run.backing[t]
	if !ok {
		return 0
	}
	x, ok := goIndex(v, k)
	if !ok {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(vm.toLua(t, k, x))
	return 1
}

// roNewIndex is the proxies' __newindex.
func roNewIndex(L *lua.LState) int {
	L.RaiseError("context is read-only")
	return 0
}

// roLen is the proxies' __len.
func (vm *luaVM) roLen(L *lua.LState) int {
	t := L.CheckTable(1)
	L.Push(lua.LNumber(goLen(vm.run.backing[t])))
	return 1
}

// length is #t for a plain table or a proxy.
func (vm *luaVM) length(t *lua.LTable) int {
	if v, ok := vm.run.backing[t]; ok {
		return goLen(v)
	}
	return t.Len()
}

// rawIndex is t[k] without metamethods for a plain table, the context
// value for a proxy.
func (vm *luaVM) rawIndex(t *lua.LTable, k lua.LValue) lua.LValue {
	if v, ok := vm.run.backing[t]; ok {
		x, ok := goIndex(v, k)
		if !ok {
			return lua.LNil
		}
		return vm.toLua(t, k, x)
	}
	return t.RawGet(k)
}

// sortedKeys returns the keys of the map behind a proxy, sorted, cached
// for the run.
func (vm *luaVM) sortedKeys(t *lua.LTable, v any) []string {
	if ks, ok := vm.run.keys[t]; ok {
		return ks
	}
	var ks []string
	if fields, ok := structFields[reflect.TypeOf(v)]; ok {
		return fields
	}
	if m, ok := v.(map[string]any); ok {
		ks = make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
	} else if rv := reflect.ValueOf(v); rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String {
		ks = make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			ks = append(ks, k.String())
		}
	}
	sort.Strings(ks)
	vm.run.keys[t] = ks
	return ks
}

// next is the sandbox's next(t, k): the table's own for a plain table; for
// a proxy, list elements in order, map entries in key order.
func (vm *luaVM) next(L *lua.LState) int {
	t := L.CheckTable(1)
	k := L.Get(2)
	v, ok := vm.run.backing[t]
	if !ok {
		nk, nv := t.Next(k)
		if nk == lua.LNil {
			L.Push(lua.LNil)
			return 1
		}
		L.Push(nk)
		L.Push(nv)
		return 2
	}
	if n := goLen(v); n > 0 || isList(v) {
		i := 0
		if k != lua.LNil {
			j, ok := listIndex(k, n)
			if !ok {
				L.RaiseError("invalid key to 'next'")
			}
			i = j + 1
		}
		if i >= n {
			L.Push(lua.LNil)
			return 1
		}
		key := lua.LNumber(i + 1)
		L.Push(key)
		L.Push(vm.rawIndex(t, key))
		return 2
	}
	ks := vm.sortedKeys(t, v)
	i := 0
	if k != lua.LNil {
		s, ok := k.(lua.LString)
		if !ok {
			L.RaiseError("invalid key to 'next'")
		}
		i = sort.SearchStrings(ks, string(s))
		if i == len(ks) || ks[i] != string(s) {
			L.RaiseError("invalid key to 'next'")
		}
		i++
	}
	if i >= len(ks) {
		L.Push(lua.LNil)
		return 1
	}
	key := lua.LString(ks[i])
	L.Push(key)
	L.Push(vm.rawIndex(t, key))
	return 2
}

func isList(v any) bool {
	if _, ok := v.([]any); ok {
		return true
	}
	k := reflect.ValueOf(v).Kind()
	return k == reflect.Slice || k == reflect.Array
}

// pairs is pairs(t): next, t, nil.
func (vm *luaVM) pairs(L *lua.LState) int {
	t := L.CheckTable(1)
	L.Push(vm.nextFn)
	L.Push(t)
	L.Push(lua.LNil)
	return 3
}

// ipairs is ipairs(t), over a plain table (raw, as Lua 5.1) or a proxy.
func (vm *luaVM) ipairs(L *lua.LState) int {
	t := L.CheckTable(1)
	L.Push(vm.ipairsIter)
	L.Push(t)
	L.Push(lua.LNumber(0))
	return 3
}

func (vm *luaVM) ipairsStep(L *lua.LState) int {
	t := L.CheckTable(1)
	i := L.CheckInt(2) + 1
	v := vm.rawIndex(t, lua.LNumber(i))
	if v == lua.LNil {
		return 0
	}
	L.Push(lua.LNumber(i))
	L.Push(v)
	return 2
}

// unpack is unpack(t, i, j) over a plain table or a proxy. Its results go
// on the VM's registry, whose bounded size (RegistryMaxSize) stops an
// unpack(t, 1, 1e9).
func (vm *luaVM) unpack(L *lua.LState) int {
	t := L.CheckTable(1)
	i := L.OptInt(2, 1)
	j := L.OptInt(3, vm.length(t))
	if i > j {
		return 0
	}
	n := luaSpan(i, j)
	if n > luaRegistryMax {
		L.RaiseError("too many results to unpack")
	}
	for k := range n {
		L.Push(vm.rawIndex(t, lua.LNumber(i+k)))
	}
	return n
}

// luaSpan is how many indices i..j (i <= j, both from a script) hold,
// saturated at math.MaxInt: j-i+1 overflows for i = -2^62, j = 2^62, and
// a script's -1e300 converts to the smallest int.
func luaSpan(i, j int) int {
	n := j - i + 1
	if n <= 0 {
		return math.MaxInt
	}
	return n
}

// mutating wraps a table library function that changes its first
// argument: it refuses a proxy.
func (vm *luaVM) mutating(fn lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		if vm.isProxy(L.CheckTable(1)) {
			L.RaiseError("context is read-only")
		}
		return fn(L)
	}
}

// measuring wraps table.getn and table.maxn: a proxy's length is its
// list's.
func (vm *luaVM) measuring(fn lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		if t := L.CheckTable(1); vm.isProxy(t) {
			L.Push(lua.LNumber(vm.length(t)))
			return 1
		}
		return fn(L)
	}
}
