package plugins

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Lua patterns (string.find, match, gmatch, gsub) for the sandbox.
//
// gopher-lua's own matcher (package pm) backtracks without any bound:
// string.find(string.rep('a', 5000), '(.-)(.-)(.-)b') runs for hours
// inside one VM instruction, out of reach of the instruction budget and
// the timeout, which are only checked between instructions. This is a
// port of Lua 5.1's lstrlib.c matcher in which every step (each attempt at
// a pattern item, each repetition tried) is charged to the run's
// instruction budget, so a backtracking bomb stops like an endless loop.

const (
	luaMaxCaptures = 32
	capUnfinished  = -1
	capPosition    = -2
	// maxMatchDepth bounds the matcher's recursion (Lua 5.2's MAXCCALLS):
	// every capture and every optional or repeated item recurses.
	maxMatchDepth = 200
	// maxPatternBytes bounds a pattern's source.
	maxPatternBytes = 4 << 10
	luaEsc          = '%'
	luaSpecials     = "^$*+?.([%-"
)

type luaCapture struct{ init, len int }

type matchState struct {
	L       *lua.LState
	run     *luaRun
	src     string
	pat     string
	level   int
	depth   int
	capture [luaMaxCaptures]luaCapture
}

func newMatchState(L *lua.LState, run *luaRun, src, pat string) *matchState {
	if len(pat) > maxPatternBytes {
		L.RaiseError("pattern too long (%d bytes, the limit is %d)", len(pat), maxPatternBytes)
	}
	return &matchState{L: L, run: run, src: src, pat: pat}
}

// step charges one matcher step to the run's budget.
func (ms *matchState) step() {
	if !ms.run.spend(1) {
		ms.L.RaiseError("%s", ms.run.err.Error())
	}
}

// pc is the pattern byte at i, 0 past its end (where C reads the NUL).
func (ms *matchState) pc(i int) byte {
	if i < len(ms.pat) {
		return ms.pat[i]
	}
	return 0
}

// sc is the subject byte at i, 0 past its end.
func (ms *matchState) sc(i int) byte {
	if i < len(ms.src) {
		return ms.src[i]
	}
	return 0
}

func (ms *matchState) checkCapture(l byte) int {
	i := int(l) - '1'
	if i < 0 || i >= ms.level || ms.capture[i].len == capUnfinished {
		ms.L.RaiseError("invalid capture index")
	}
	return i
}

func (ms *matchState) captureToClose() int {
	for level := ms.level - 1; level >= 0; level-- {
		if ms.capture[level].len == capUnfinished {
			return level
		}
	}
	ms.L.RaiseError("invalid pattern capture")
	return 0
}

// classEnd returns the index just after the single-char class at p.
func (ms *matchState) classEnd(p int) int {
	c := ms.pc(p)
	p++
	switch c {
	case luaEsc:
		if p >= len(ms.pat) {
			ms.L.RaiseError("malformed pattern (ends with '%%')")
		}
		return p + 1
	case '[':
		if ms.pc(p) == '^' {
			p++
		}
		for {
			if p >= len(ms.pat) {
				ms.L.RaiseError("malformed pattern (missing ']')")
			}
			c := ms.pat[p]
			p++
			if c == luaEsc && p < len(ms.pat) {
				p++
			}
			if ms.pc(p) == ']' {
				break
			}
		}
		return p + 1
	}
	return p
}

func isAlpha(c byte) bool  { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLower(c byte) bool  { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool  { return c >= 'A' && c <= 'Z' }
func isSpace(c byte) bool  { return c == ' ' || (c >= '\t' && c <= '\r') }
func isCntrl(c byte) bool  { return c < 0x20 || c == 0x7f }
func isPunct(c byte) bool  { return c > 0x20 && c < 0x7f && !isAlpha(c) && !isDigit(c) }
func isXDigit(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }

func matchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 {
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = isCntrl(c)
	case 'd':
		res = isDigit(c)
	case 'l':
		res = isLower(c)
	case 'p':
		res = isPunct(c)
	case 's':
		res = isSpace(c)
	case 'u':
		res = isUpper(c)
	case 'w':
		res = isAlpha(c) || isDigit(c)
	case 'x':
		res = isXDigit(c)
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if isUpper(cl) {
		return !res
	}
	return res
}

// matchBracketClass tests c against the set [ ... ] from p (at '[') to ec
// (at ']').
func (ms *matchState) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if ms.pc(p+1) == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case ms.pat[p] == luaEsc:
			p++
			if matchClass(c, ms.pc(p)) {
				return sig
			}
		case ms.pc(p+1) == '-' && p+2 < ec:
			p += 2
			if ms.pat[p-2] <= c && c <= ms.pat[p] {
				return sig
			}
		case ms.pat[p] == c:
			return sig
		}
	}
	return !sig
}

func (ms *matchState) singleMatch(s, p, ep int) bool {
	if s >= len(ms.src) {
		return false
	}
	c := ms.src[s]
	switch ms.pat[p] {
	case '.':
		return true
	case luaEsc:
		return matchClass(c, ms.pc(p+1))
	case '[':
		return ms.matchBracketClass(c, p, ep-1)
	}
	return ms.pat[p] == c
}

func (ms *matchState) matchBalance(s, p int) int {
	if p+1 >= len(ms.pat) {
		ms.L.RaiseError("unbalanced pattern")
	}
	if s >= len(ms.src) || ms.src[s] != ms.pat[p] {
		return -1
	}
	b, e := ms.pat[p], ms.pat[p+1]
	cont := 1
	for s++; s < len(ms.src); s++ {
		ms.step()
		switch ms.src[s] {
		case e:
			if cont--; cont == 0 {
				return s + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

func (ms *matchState) maxExpand(s, p, ep int) int {
	i := 0
	for ms.singleMatch(s+i, p, ep) {
		ms.step()
		i++
	}
	for ; i >= 0; i-- {
		if res := ms.match(s+i, ep+1); res != -1 {
			return res
		}
	}
	return -1
}

func (ms *matchState) minExpand(s, p, ep int) int {
	for {
		if res := ms.match(s, ep+1); res != -1 {
			return res
		}
		if !ms.singleMatch(s, p, ep) {
			return -1
		}
		s++
	}
}

func (ms *matchState) startCapture(s, p, what int) int {
	level := ms.level
	if level >= luaMaxCaptures {
		ms.L.RaiseError("too many captures")
	}
	ms.capture[level] = luaCapture{s, what}
	ms.level = level + 1
	res := ms.match(s, p)
	if res == -1 {
		ms.level--
	}
	return res
}

func (ms *matchState) endCapture(s, p int) int {
	l := ms.captureToClose()
	ms.capture[l].len = s - ms.capture[l].init
	res := ms.match(s, p)
	if res == -1 {
		ms.capture[l].len = capUnfinished
	}
	return res
}

func (ms *matchState) matchCapture(s int, l byte) int {
	i := ms.checkCapture(l)
	c := ms.capture[i]
	// A position capture has no text: Lua 5.1 reads its length as a
	// huge size_t, so a back-reference to it never matches.
	if c.len < 0 {
		return -1
	}
	if len(ms.src)-s >= c.len && ms.src[c.init:c.init+c.len] == ms.src[s:s+c.len] {
		return s + c.len
	}
	return -1
}

// match matches the pattern from p against the subject from s: the end of
// the match, or -1.
func (ms *matchState) match(s, p int) int {
	ms.depth++
	if ms.depth > maxMatchDepth {
		ms.L.RaiseError("pattern too complex")
	}
	defer func() { ms.depth-- }()
	for {
		ms.step()
		if p >= len(ms.pat) {
			return s
		}
		switch ms.pat[p] {
		case '(':
			if ms.pc(p+1) == ')' {
				return ms.startCapture(s, p+2, capPosition)
			}
			return ms.startCapture(s, p+1, capUnfinished)
		case ')':
			return ms.endCapture(s, p+1)
		case '$':
			if p+1 == len(ms.pat) {
				if s == len(ms.src) {
					return s
				}
				return -1
			}
		case luaEsc:
			switch c := ms.pc(p + 1); {
			case c == 'b':
				if s = ms.matchBalance(s, p+2); s == -1 {
					return -1
				}
				p += 4
				continue
			case c == 'f':
				p += 2
				if ms.pc(p) != '[' {
					ms.L.RaiseError("missing '[' after '%%f' in pattern")
				}
				ep := ms.classEnd(p)
				var prev byte
				if s > 0 {
					prev = ms.src[s-1]
				}
				if ms.matchBracketClass(prev, p, ep-1) || !ms.matchBracketClass(ms.sc(s), p, ep-1) {
					return -1
				}
				p = ep
				continue
			case isDigit(c):
				if s = ms.matchCapture(s, c); s == -1 {
					return -1
				}
				p += 2
				continue
			}
		}
		// a single-char class, possibly followed by a repetition
		ep := ms.classEnd(p)
		m := ms.singleMatch(s, p, ep)
		switch ms.pc(ep) {
		case '?':
			if m {
				if res := ms.match(s+1, ep+1); res != -1 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return ms.maxExpand(s, p, ep)
		case '+':
			if !m {
				return -1
			}
			return ms.maxExpand(s+1, p, ep)
		case '-':
			return ms.minExpand(s, p, ep)
		}
		if !m {
			return -1
		}
		s++
		p = ep
	}
}

// captureValue is capture i of a match of [s, e).
func (ms *matchState) captureValue(i, s, e int) lua.LValue {
	if i >= ms.level {
		if i != 0 {
			ms.L.RaiseError("invalid capture index")
		}
		return lua.LString(ms.src[s:e])
	}
	c := ms.capture[i]
	switch c.len {
	case capUnfinished:
		ms.L.RaiseError("unfinished capture")
	case capPosition:
		return lua.LNumber(c.init + 1)
	}
	return lua.LString(ms.src[c.init : c.init+c.len])
}

// pushCaptures pushes the captures of a match of [s, e) (the whole match
// when the pattern has none and wholeMatch).
func (ms *matchState) pushCaptures(s, e int, wholeMatch bool) int {
	n := ms.level
	if n == 0 && wholeMatch {
		n = 1
	}
	for i := 0; i < n; i++ {
		ms.L.Push(ms.captureValue(i, s, e))
	}
	return n
}

// posRelative converts a Lua string position (negative from the end) to a
// 0-based offset clamped to [0, n].
func posRelative(pos, n int) int {
	if pos < 0 {
		pos += n + 1
	}
	pos--
	if pos < 0 {
		return 0
	}
	if pos > n {
		return n
	}
	return pos
}

func hasSpecials(p string) bool {
	for i := 0; i < len(p); i++ {
		for j := 0; j < len(luaSpecials); j++ {
			if p[i] == luaSpecials[j] {
				return true
			}
		}
	}
	return false
}

// strFindAux is string.find (find) and string.match.
func (vm *luaVM) strFindAux(L *lua.LState, find bool) int {
	s := L.CheckString(1)
	p := L.CheckString(2)
	init := posRelative(L.OptInt(3, 1), len(s))
	if find && (lua.LVAsBool(L.Get(4)) || !hasSpecials(p)) {
		// a plain search: linear, nothing to bound
		if i := indexFrom(s, p, init); i >= 0 {
			L.Push(lua.LNumber(i + 1))
			L.Push(lua.LNumber(i + len(p)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	ms := newMatchState(L, vm.run, s, p)
	pstart := 0
	anchor := len(p) > 0 && p[0] == '^'
	if anchor {
		pstart = 1
	}
	for s1 := init; ; s1++ {
		ms.level = 0
		if e := ms.match(s1, pstart); e != -1 {
			if find {
				L.Push(lua.LNumber(s1 + 1))
				L.Push(lua.LNumber(e))
				return ms.pushCaptures(-1, -1, false) + 2
			}
			return ms.pushCaptures(s1, e, true)
		}
		if s1 >= len(s) || anchor {
			break
		}
	}
	L.Push(lua.LNil)
	return 1
}

func indexFrom(s, sub string, from int) int {
	if from > len(s) {
		return -1
	}
	i := strings.Index(s[from:], sub)
	if i < 0 {
		return -1
	}
	return from + i
}

// strGmatch is string.gmatch: an iterator matching lazily, one match per
// call.
func (vm *luaVM) strGmatch(L *lua.LState) int {
	s := L.CheckString(1)
	p := L.CheckString(2)
	if len(p) > maxPatternBytes {
		L.RaiseError("pattern too long (%d bytes, the limit is %d)", len(p), maxPatternBytes)
	}
	pos := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		ms := newMatchState(L, vm.run, s, p)
		for src := pos; src <= len(s); src++ {
			ms.level = 0
			if e := ms.match(src, 0); e != -1 {
				pos = e
				if e == src {
					pos++ // an empty match: go on at least one position
				}
				return ms.pushCaptures(src, e, true)
			}
		}
		pos = len(s) + 1
		return 0
	}))
	return 1
}

// strGsub is string.gsub, its result charged to the run's memory budget as
// it grows.
func (vm *luaVM) strGsub(L *lua.LState) int {
	src := L.CheckString(1)
	p := L.CheckString(2)
	repl := L.Get(3)
	switch repl.Type() {
	case lua.LTNumber, lua.LTString, lua.LTFunction, lua.LTTable:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	maxN := L.OptInt(4, len(src)+1)
	ms := newMatchState(L, vm.run, src, p)
	pstart := 0
	anchor := len(p) > 0 && p[0] == '^'
	if anchor {
		pstart = 1
	}
	b := vm.newBuilder(L)
	s, n := 0, 0
	for n < maxN {
		ms.level = 0
		e := ms.match(s, pstart)
		if e != -1 {
			n++
			vm.addValue(ms, b, repl, s, e)
		}
		switch {
		case e != -1 && e > s:
			s = e
		case s < len(src):
			b.WriteString(src[s : s+1])
			s++
		default:
			goto done
		}
		if anchor {
			break
		}
	}
done:
	b.WriteString(src[s:])
	L.Push(lua.LString(b.String()))
	L.Push(lua.LNumber(n))
	return 2
}

func (vm *luaVM) addValue(ms *matchState, b *luaBuilder, repl lua.LValue, s, e int) {
	L := ms.L
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		news := lua.LVAsString(r)
		for len(news) > 0 {
			i := strings.IndexByte(news, luaEsc)
			if i < 0 {
				b.WriteString(news)
				break
			}
			b.WriteString(news[:i])
			var c byte
			if i+1 < len(news) {
				c = news[i+1]
			}
			news = news[min(i+2, len(news)):]
			ms.step() // a replacement of '%0's on empty matches writes nothing
			switch {
			case !isDigit(c):
				b.addByte(c)
			case c == '0':
				b.WriteString(ms.src[s:e])
			default:
				b.WriteString(lua.LVAsString(ms.captureValue(int(c-'1'), s, e)))
			}
		}
		return
	case *lua.LFunction:
		L.Push(r)
		n := ms.pushCaptures(s, e, true)
		L.Call(n, 1)
		v = L.Get(-1)
		L.Pop(1)
	case *lua.LTable:
		v = L.GetTable(r, ms.captureValue(0, s, e))
	}
	switch v.Type() {
	case lua.LTNil:
		b.WriteString(ms.src[s:e])
	case lua.LTBool:
		if v == lua.LFalse {
			b.WriteString(ms.src[s:e])
		} else {
			L.RaiseError("invalid replacement value (a boolean)")
		}
	case lua.LTString, lua.LTNumber:
		b.WriteString(lua.LVAsString(v))
	default:
		L.RaiseError("invalid replacement value (a %s)", v.Type().String())
	}
}
