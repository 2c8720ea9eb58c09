package plugins

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// Lua conditions run in a sandbox (see newLuaVM for what a script can
// reach) within budgets (LuaLimits): instructions, wall time and memory.
//
// Instructions: gopher-lua's VM, once a context is set on the state, calls
// its Done() before every instruction (vm.go, mainLoopWithContext). The
// run is that context: Done() counts, and past the budget returns a closed
// channel, on which the VM raises the run's error. The count is exact and
// costs an increment; the wall clock, the caller's context and the memory
// gauge are checked every luaCheckEvery instructions. Work done inside one
// instruction by a library function is bounded separately: the pattern
// matcher and table.sort charge their steps to the same budget
// (luapattern.go, luasort.go), string producers charge their output to
// the memory budget (luastring.go), and everything else is linear in data
// the budgets already bound.
//
// Memory: gopher-lua has no allocator hook, so the bound is built from
// two parts. (1) Strings, the values one instruction can make arbitrarily
// large: `..` is compiled into a call that charges the result before
// building it (rewriteConcat), and so are string.rep, format, gsub,
// lower/upper/reverse and table.concat; one string may not exceed
// maxLuaString and a run may produce at most MemoryBytes of string data
// in total (a cumulative count, not live bytes: conditions are short, and
// it never undercounts). (2) Everything else (tables, closures, boxed
// numbers) grows by a bounded amount per instruction: at most the VM's
// registry (luaRegistryMax values, e.g. a {...} of that many varargs).
// The run reads the Go heap's cumulative allocation counter
// (runtime/metrics "/gc/heap/allocs:bytes", ~200ns, allocation-free:
// BenchmarkLuaMemGauge) when it starts and every luaMemCheckEvery
// instructions, and fails once it has grown by more than MemoryBytes; a
// run can overshoot by what luaMemCheckEvery instructions allocate (a
// few MiB at worst). The counter is process-wide: allocations of
// concurrent goroutines count too, so a run that lasts long (tens of
// milliseconds on a busy server) can fail spuriously; a typical
// condition, done in a few microseconds, never does.
//
// The VM's registry (value stack) and call stack are bounded by
// lua.Options, so deep recursion and unpack(t, 1, 1e9) fail with "stack
// overflow" / "registry overflow".

// Sandbox bounds.
const (
	// luaDefaultInstructions, luaDefaultTimeout and luaDefaultMemory are
	// LuaLimits' defaults.
	luaDefaultInstructions = 100_000
	luaDefaultTimeout      = 50 * time.Millisecond
	luaDefaultMemory       = 16 << 20
	// maxLuaSourceBytes bounds a script's source.
	maxLuaSourceBytes = 64 << 10
	// luaCallStack bounds nested calls (Lua functions and metamethods).
	luaCallStack = 200
	// luaRegistrySize and luaRegistryMax bound the value stack (in
	// values): locals, temporaries, arguments and results of all active
	// calls.
	luaRegistrySize = 1024
	luaRegistryMax  = 8 * 1024
	// luaCheckEvery is how many instructions run between checks of the
	// clock and the caller's context; luaMemCheckEvery between readings
	// of the allocation counter.
	luaCheckEvery    = 64
	luaMemCheckEvery = 256
	// maxLuaString bounds one string a script builds. Besides memory, it
	// bounds the work of one instruction on strings (==, <, hashing a
	// table key are linear in their size), hence how far past its
	// timeout a run can go between two checks of the clock.
	maxLuaString = 4 << 20
	// maxLuaErrorBytes bounds the error message a run returns (a script
	// may raise error(string.rep('x', 1e6))).
	maxLuaErrorBytes = 512
	// concatName is the hidden local (not a valid Lua name, so no script
	// can name it) through which `..` is compiled.
	concatName = "@concat"
)

// errLuaBudget is wrapped by every budget error (instructions, time,
// memory).
var errLuaBudget = errors.New("lua budget exceeded")

// luaScript is a compiled Lua condition.
type luaScript struct {
	name   string
	proto  *lua.FunctionProto
	limits LuaLimits
}

// compileLua compiles a Lua script (name is its file, for errors) into a
// condition that runs it in a sandbox within limits. The script sees
// `context` as read-only tables and its result is the condition: it must
// return a boolean (return true / return false); anything else is an
// error.
func compileLua(name, source string, limits LuaLimits) (Condition, error) {
	if len(source) > maxLuaSourceBytes {
		return nil, fmt.Errorf("%s: script is %d bytes, over the limit of %d", name, len(source), maxLuaSourceBytes)
	}
	// gopher-lua only compiles source, but a binary chunk must not even
	// reach its parser.
	if strings.HasPrefix(source, "\x1bLua") {
		return nil, fmt.Errorf("%s: binary chunks are not accepted", name)
	}
	proto, err := compileLuaProto(name, source)
	if err != nil {
		return nil, err
	}
	if limits.Instructions <= 0 {
		limits.Instructions = luaDefaultInstructions
	}
	if limits.Timeout <= 0 {
		limits.Timeout = luaDefaultTimeout
	}
	if limits.MemoryBytes <= 0 {
		limits.MemoryBytes = luaDefaultMemory
	}
	return &luaScript{name: name, proto: proto, limits: limits}, nil
}

// Match runs the script once in a pooled VM. A script error, a budget
// spent or a result that is not a boolean is an error (no match).
func (s *luaScript) Match(ctx context.Context, c *Context) (bool, error) {
	if c == nil {
		return false, errors.New("lua: no context")
	}
	vm := luaPool.Get().(*luaVM)
	ret, err, reusable := s.run(vm, ctx, c)
	if reusable {
		luaPool.Put(vm)
	} else {
		vm.L.Close()
	}
	if err != nil {
		return false, luaError(s.name, err)
	}
	if b, ok := ret.(lua.LBool); ok {
		return bool(b), nil
	}
	return false, fmt.Errorf("lua %s: script returned %s, want a boolean", s.name, ret.Type().String())
}

// run runs the script in vm: its result, or its error (the budget's when
// one was spent, whatever the script made of it with pcall). reusable
// says whether vm may serve another run: after a normal end or a Lua
// error (error(), a type error, a budget spent) PCall has unwound the
// VM's stacks, and what the run made is unreachable from the next run;
// after a Go panic inside the VM it may be inconsistent.
func (s *luaScript) run(vm *luaVM, ctx context.Context, c *Context) (ret lua.LValue, err error, reusable bool) {
	run := vm.run
	run.start(ctx, s.name, s.limits)
	L := vm.L

	env := L.CreateTable(0, 4)
	env.Metatable = vm.envMeta
	env.RawSetString("_G", env)
	env.RawSetString("context", vm.proxy(c))
	fn := L.NewFunctionFromProto(s.proto)
	fn.Env = env

	L.SetContext(run)
	L.Push(fn)
	err = L.PCall(0, 1, nil)
	L.RemoveContext()
	ret = lua.LNil
	if err == nil {
		ret = L.Get(-1)
	}
	var apiErr *lua.ApiError
	reusable = err == nil || run.err != nil || (errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun)
	if run.err != nil {
		err = run.err
	}
	L.SetTop(0)
	run.reset()
	return ret, err, reusable
}

// compileLuaProto parses and compiles a script for the sandbox: every
// a .. b becomes a call of the charged concatenation.
func compileLuaProto(name, source string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(source), name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rewriteConcatStmts(chunk)
	chunk = append([]ast.Stmt{&ast.LocalAssignStmt{
		Names: []string{concatName},
		Exprs: []ast.Expr{&ast.IdentExpr{Value: concatName}},
	}}, chunk...)
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// The chunk is compiled as a vararg function that wants Lua 5.0's
	// `arg` table, which the VM would allocate on every run; a script
	// gets no arguments (... is empty either way).
	proto.IsVarArg &^= lua.VarArgNeedsArg
	return proto, nil
}

// luaError is err as Match returns it: bounded, naming the script.
func luaError(name string, err error) error {
	if errors.Is(err, errLuaBudget) {
		return fmt.Errorf("lua %s: %w", name, err)
	}
	msg := err.Error()
	var apiErr *lua.ApiError
	if errors.As(err, &apiErr) && apiErr.Object != nil {
		msg = apiErr.Object.String()
	}
	if len(msg) > maxLuaErrorBytes {
		msg = msg[:maxLuaErrorBytes] + "..."
	}
	return fmt.Errorf("lua %s: %s", name, msg)
}

// rewriteConcat* replace every a .. b by @concat(a, b) (see concat).
func rewriteConcatStmts(stmts []ast.Stmt) {
	for _, s := range stmts {
		rewriteConcatStmt(s)
	}
}

func rewriteConcatExprs(exprs []ast.Expr) {
	for i := range exprs {
		exprs[i] = rewriteConcat(exprs[i])
	}
}

func rewriteConcatStmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		rewriteConcatExprs(s.Lhs)
		rewriteConcatExprs(s.Rhs)
	case *ast.LocalAssignStmt:
		rewriteConcatExprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = rewriteConcat(s.Expr)
	case *ast.DoBlockStmt:
		rewriteConcatStmts(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = rewriteConcat(s.Condition)
		rewriteConcatStmts(s.Stmts)
	case *ast.RepeatStmt:
		s.Condition = rewriteConcat(s.Condition)
		rewriteConcatStmts(s.Stmts)
	case *ast.IfStmt:
		s.Condition = rewriteConcat(s.Condition)
		rewriteConcatStmts(s.Then)
		rewriteConcatStmts(s.Else)
	case *ast.NumberForStmt:
		s.Init = rewriteConcat(s.Init)
		s.Limit = rewriteConcat(s.Limit)
		s.Step = rewriteConcat(s.Step)
		rewriteConcatStmts(s.Stmts)
	case *ast.GenericForStmt:
		rewriteConcatExprs(s.Exprs)
		rewriteConcatStmts(s.Stmts)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			s.Name.Func = rewriteConcat(s.Name.Func)
			s.Name.Receiver = rewriteConcat(s.Name.Receiver)
		}
		rewriteConcat(s.Func)
	case *ast.ReturnStmt:
		rewriteConcatExprs(s.Exprs)
	}
}

func rewriteConcat(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case nil:
		return nil
	case *ast.StringConcatOpExpr:
		call := &ast.FuncCallExpr{
			Func:      &ast.IdentExpr{Value: concatName},
			Args:      []ast.Expr{rewriteConcat(e.Lhs), rewriteConcat(e.Rhs)},
			AdjustRet: true,
		}
		call.SetLine(e.Line())
		call.SetLastLine(e.LastLine())
		call.Func.SetLine(e.Line())
		call.Func.SetLastLine(e.LastLine())
		return call
	case *ast.AttrGetExpr:
		e.Object = rewriteConcat(e.Object)
		e.Key = rewriteConcat(e.Key)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			f.Key = rewriteConcat(f.Key)
			f.Value = rewriteConcat(f.Value)
		}
	case *ast.FuncCallExpr:
		e.Func = rewriteConcat(e.Func)
		e.Receiver = rewriteConcat(e.Receiver)
		rewriteConcatExprs(e.Args)
	case *ast.LogicalOpExpr:
		e.Lhs = rewriteConcat(e.Lhs)
		e.Rhs = rewriteConcat(e.Rhs)
	case *ast.RelationalOpExpr:
		e.Lhs = rewriteConcat(e.Lhs)
		e.Rhs = rewriteConcat(e.Rhs)
	case *ast.ArithmeticOpExpr:
		e.Lhs = rewriteConcat(e.Lhs)
		e.Rhs = rewriteConcat(e.Rhs)
	case *ast.UnaryMinusOpExpr:
		e.Expr = rewriteConcat(e.Expr)
	case *ast.UnaryNotOpExpr:
		e.Expr = rewriteConcat(e.Expr)
	case *ast.UnaryLenOpExpr:
		e.Expr = rewriteConcat(e.Expr)
	case *ast.FunctionExpr:
		rewriteConcatStmts(e.Stmts)
	}
	return e
}

// luaRun is one run's budgets and state. It is the context the VM checks
// before every instruction; unlike most contexts it is not safe for
// concurrent use: only the VM running the script calls it.
type luaRun struct {
	parent    context.Context
	name      string
	limits    LuaLimits
	n         int64 // instructions and matcher steps
	nextCheck int64
	checks    int
	deadline  time.Time
	strBytes  int64
	allocBase uint64 // the allocation counter when the run started
	gauge     []metrics.Sample
	err       error

	backing  map[*lua.LTable]any // proxy → its Go value
	children map[proxyKey]*lua.LTable
	keys     map[*lua.LTable][]string
}

var _ context.Context = (*luaRun)(nil)

func newLuaRun() *luaRun {
	return &luaRun{
		backing:  map[*lua.LTable]any{},
		children: map[proxyKey]*lua.LTable{},
		keys:     map[*lua.LTable][]string{},
		gauge:    []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}},
	}
}

func (r *luaRun) start(ctx context.Context, name string, limits LuaLimits) {
	r.parent, r.name, r.limits = ctx, name, limits
	r.n, r.nextCheck, r.checks, r.strBytes, r.err = 0, luaCheckEvery, 0, 0, nil
	r.allocBase = r.allocs()
	r.deadline = time.Now().Add(limits.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(r.deadline) {
		r.deadline = d
	}
}

// reset drops the run's references (the context's values) so that a
// pooled VM does not keep them alive.
func (r *luaRun) reset() {
	r.parent = nil
	clear(r.backing)
	clear(r.children)
	clear(r.keys)
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done is called by the VM before every instruction.
func (r *luaRun) Done() <-chan struct{} {
	if r.err != nil || !r.spend(1) {
		return closedChan
	}
	return nil
}

// spend charges k instructions; false (and r.err set) once a budget is
// spent.
func (r *luaRun) spend(k int64) bool {
	if r.err != nil {
		return false
	}
	r.n += k
	if r.n > r.limits.Instructions {
		r.err = fmt.Errorf("%w: more than %d instructions", errLuaBudget, r.limits.Instructions)
		return false
	}
	if r.n >= r.nextCheck {
		r.nextCheck = r.n + luaCheckEvery
		return r.check()
	}
	return true
}

func (r *luaRun) check() bool {
	if time.Now().After(r.deadline) {
		r.err = fmt.Errorf("%w: ran longer than %v", errLuaBudget, r.limits.Timeout)
		return false
	}
	if err := r.parent.Err(); err != nil {
		r.err = fmt.Errorf("%w: %w", errLuaBudget, err)
		return false
	}
	r.checks++
	if r.checks%(luaMemCheckEvery/luaCheckEvery) == 0 {
		if r.allocs()-r.allocBase > uint64(r.limits.MemoryBytes) {
			r.err = fmt.Errorf("%w: allocated more than %d bytes", errLuaBudget, r.limits.MemoryBytes)
			return false
		}
	}
	return true
}

// allocs reads the process's cumulative heap allocations.
func (r *luaRun) allocs() uint64 {
	metrics.Read(r.gauge)
	return r.gauge[0].Value.Uint64()
}

// charge counts a string of n bytes the script is about to build against
// the memory budget.
func (r *luaRun) charge(n int) bool {
	if r.err != nil {
		return false
	}
	if n > maxLuaString {
		r.err = fmt.Errorf("%w: a string of more than %d bytes", errLuaBudget, maxLuaString)
		return false
	}
	if n < 0 || int64(n) > r.limits.MemoryBytes-r.strBytes {
		r.err = fmt.Errorf("%w: more than %d bytes of strings", errLuaBudget, r.limits.MemoryBytes)
		return false
	}
	r.strBytes += int64(n)
	return true
}

func (r *luaRun) Deadline() (time.Time, bool) { return r.deadline, true }

func (r *luaRun) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.parent.Err()
}

func (r *luaRun) Value(key any) any { return r.parent.Value(key) }

// luaPool holds idle VMs. Creating one (libraries, tables) costs far more
// than a short condition's run.
var luaPool = sync.Pool{New: func() any { return newLuaVM() }}

// luaVM is a Lua state set up as the sandbox, reused across runs (one at a
// time). What a run can change does not outlive it: its globals live in a
// fresh environment table; the shared tables (libraries, the base
// functions) are reachable only through read-only proxies or not at all;
// metatables of non-table types cannot be set.
type luaVM struct {
	L          *lua.LState
	run        *luaRun
	roMeta     *lua.LTable // the context proxies' metatable
	envMeta    *lua.LTable // a run environment's metatable
	nextFn     *lua.LFunction
	ipairsIter *lua.LFunction
}

// newLuaVM builds a sandbox: of the base library assert, error,
// getmetatable, ipairs, next, pairs, pcall, print (discarded, or logged at
// debug), rawequal, select, setmetatable (tables only), tonumber,
// tostring, type, unpack, xpcall and _VERSION; string (without dump;
// find, match, gmatch, gsub budgeted; rep, format, ... charged), table
// (sort budgeted) and math (without randomseed; random checks its
// interval), read-only. Not there: dofile, load, loadfile, loadstring,
// require, module, package, getfenv, setfenv, rawget, rawset,
// collectgarbage, newproxy, os, io, debug, channel, coroutine.
func newLuaVM() *luaVM {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:     true,
		CallStackSize:    luaCallStack,
		RegistrySize:     luaRegistrySize,
		RegistryMaxSize:  luaRegistryMax,
		RegistryGrowStep: luaRegistrySize,
	})
	vm := &luaVM{L: L, run: newLuaRun()}
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.StringLibName, lua.OpenString},
		{lua.TabLibName, lua.OpenTable}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	gfn := func(t *lua.LTable, name string) lua.LGFunction {
		return t.RawGetString(name).(*lua.LFunction).GFunction
	}
	readOnly := func(t *lua.LTable) *lua.LTable {
		p := L.CreateTable(0, 0)
		p.Metatable = vm.table(map[string]lua.LValue{
			"__index": t, "__newindex": L.NewFunction(roNewIndex), "__metatable": lua.LFalse,
		})
		return p
	}

	origString := g.RawGetString("string").(*lua.LTable)
	str := vm.funcs(map[string]lua.LGFunction{
		"byte": gfn(origString, "byte"), "char": gfn(origString, "char"),
		"len": gfn(origString, "len"), "sub": gfn(origString, "sub"),
		"find":    func(L *lua.LState) int { return vm.strFindAux(L, true) },
		"match":   func(L *lua.LState) int { return vm.strFindAux(L, false) },
		"gmatch":  vm.strGmatch,
		"gsub":    vm.strGsub,
		"rep":     vm.strRep,
		"format":  vm.strFormat(gfn(origString, "format")),
		"lower":   vm.copying(gfn(origString, "lower")),
		"upper":   vm.copying(gfn(origString, "upper")),
		"reverse": vm.copying(gfn(origString, "reverse")),
	})
	origTable := g.RawGetString("table").(*lua.LTable)
	tbl := vm.funcs(map[string]lua.LGFunction{
		"concat": vm.tableConcat,
		"insert": vm.mutating(gfn(origTable, "insert")),
		"remove": vm.mutating(gfn(origTable, "remove")),
		"sort":   vm.tableSort,
		"getn":   vm.measuring(gfn(origTable, "getn")),
		"maxn":   vm.measuring(gfn(origTable, "maxn")),
	})
	math := L.CreateTable(0, 32)
	g.RawGetString("math").(*lua.LTable).ForEach(func(k, v lua.LValue) {
		if k.String() != "randomseed" {
			math.RawSet(k, v)
		}
	})
	math.RawSetString("random", L.NewFunction(mathRandom))

	vm.nextFn = L.NewFunction(vm.next)
	vm.ipairsIter = L.NewFunction(vm.ipairsStep)
	origSetMetatable := gfn(g, "setmetatable")
	base := vm.funcs(map[string]lua.LGFunction{
		"pairs": vm.pairs, "ipairs": vm.ipairs, "unpack": vm.unpack,
		"print": vm.print, concatName: vm.concat,
		"pcall": vm.pcall, "xpcall": vm.xpcall,
		// Lua 5.1 sets metatables of tables only; gopher-lua would set
		// the one shared by all numbers (or booleans, functions), which
		// would outlive the run.
		"setmetatable": func(L *lua.LState) int {
			L.CheckTable(1)
			return origSetMetatable(L)
		},
	})
	for _, name := range []string{"assert", "error", "getmetatable", "rawequal", "select",
		"tonumber", "tostring", "type", "_VERSION"} {
		base.RawSetString(name, g.RawGetString(name))
	}
	base.RawSetString("next", vm.nextFn)
	base.RawSetString("string", readOnly(str))
	base.RawSetString("table", readOnly(tbl))
	base.RawSetString("math", readOnly(math))

	// Strings index the string library through their shared metatable
	// ("x"):rep(3); protected, getmetatable('') gives false and
	// setmetatable cannot replace it.
	L.SetMetatable(lua.LString(""), vm.table(map[string]lua.LValue{"__index": str, "__metatable": lua.LFalse}))

	vm.roMeta = vm.table(map[string]lua.LValue{
		"__index": L.NewFunction(vm.roIndex), "__newindex": L.NewFunction(roNewIndex),
		"__len": L.NewFunction(vm.roLen), "__metatable": lua.LFalse,
	})
	vm.envMeta = vm.table(map[string]lua.LValue{"__index": base, "__metatable": lua.LFalse})

	// Nothing of the full globals remains (load, require, ...), should
	// anything ever reach them.
	var keys []lua.LValue
	g.ForEach(func(k, _ lua.LValue) { keys = append(keys, k) })
	for _, k := range keys {
		g.RawSet(k, lua.LNil)
	}
	return vm
}

func (vm *luaVM) funcs(fns map[string]lua.LGFunction) *lua.LTable {
	t := vm.L.CreateTable(0, len(fns))
	for name, fn := range fns {
		t.RawSetString(name, vm.L.NewFunction(fn))
	}
	return t
}

func (vm *luaVM) table(fields map[string]lua.LValue) *lua.LTable {
	t := vm.L.CreateTable(0, len(fields))
	for k, v := range fields {
		t.RawSetString(k, v)
	}
	return t
}
