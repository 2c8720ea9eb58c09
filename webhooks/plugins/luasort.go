package plugins

import (
	"sort"

	lua "github.com/yuin/gopher-lua"
)

// luaCompareBytes is how many bytes of a string comparison in table.sort
// cost one instruction: a memcmp of that size takes about as long as one
// VM instruction.
const luaCompareBytes = 1024

// tableSort is table.sort, budgeted. The library's sort makes all its
// comparisons inside the one CALL instruction, so neither the instruction
// count nor the clock saw them: sorting 4000 copies of a 4 MiB string ran
// for 11s past a 50ms timeout. Here every comparison is charged to the
// run's instruction budget (one, plus one per luaCompareBytes of a string
// comparison), which also brings the clock check along (luaRun.spend).
// Strings compare with Go's (memcmp) comparison, the same byte order as
// the VM's.
func (vm *luaVM) tableSort(L *lua.LState) int {
	t := L.CheckTable(1)
	if vm.isProxy(t) {
		L.RaiseError("context is read-only")
	}
	var less *lua.LFunction
	if L.GetTop() >= 2 && L.Get(2) != lua.LNil {
		less = L.CheckFunction(2)
	}
	s := &luaSorter{vm: vm, L: L, less: less, vals: make([]lua.LValue, t.Len())}
	for i := range s.vals {
		s.vals[i] = t.RawGetInt(i + 1)
	}
	// A comparison that raises (budget, comparator error, incomparable
	// values) unwinds through sort.Sort; t is then left as it was.
	sort.Sort(s)
	for i, v := range s.vals {
		t.RawSetInt(i+1, v)
	}
	return 0
}

type luaSorter struct {
	vm   *luaVM
	L    *lua.LState
	less *lua.LFunction // nil: the < operator
	vals []lua.LValue
}

func (s *luaSorter) Len() int      { return len(s.vals) }
func (s *luaSorter) Swap(i, j int) { s.vals[i], s.vals[j] = s.vals[j], s.vals[i] }

func (s *luaSorter) Less(i, j int) bool {
	a, b := s.vals[i], s.vals[j]
	if s.less != nil {
		s.spend(1)
		s.L.Push(s.less)
		s.L.Push(a)
		s.L.Push(b)
		s.L.Call(2, 1)
		r := s.L.Get(-1)
		s.L.Pop(1)
		return lua.LVAsBool(r)
	}
	if sa, ok := a.(lua.LString); ok {
		if sb, ok := b.(lua.LString); ok {
			s.spend(1 + int64(min(len(sa), len(sb))/luaCompareBytes))
			return sa < sb
		}
	}
	s.spend(1)
	return s.L.LessThan(a, b)
}

// spend charges k instructions or raises the budget's error.
func (s *luaSorter) spend(k int64) {
	if !s.vm.run.spend(k) {
		s.L.RaiseError("%s", s.vm.run.err.Error())
	}
}
