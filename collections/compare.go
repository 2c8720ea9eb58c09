package collections

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Type classes in sort order. A missing field sorts before everything.
const (
	classMissing = iota
	classNull
	classBool
	classNumber
	classString
	classArray
	classObject
	classOther
)

// TypeClass returns the sort class of a value (see Compare): 0 missing,
// 1 null, 2 boolean, 3 number, 4 string, 5 array, 6 object.
func TypeClass(v any, present bool) int { return classOf(v, present) }

func classOf(v any, present bool) int {
	if !present {
		return classMissing
	}
	switch v.(type) {
	case nil:
		return classNull
	case bool:
		return classBool
	case json.Number, float64, float32, int, int64, int32, uint32, uint64:
		return classNumber
	case string:
		return classString
	case []any:
		return classArray
	case map[string]any:
		return classObject
	}
	return classOther
}

// number is a JSON number kept exact when it is an integer that fits int64.
type number struct {
	i     int64
	f     float64
	isInt bool
}

func toNumber(v any) number {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return number{i: i, f: float64(i), isInt: true}
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			// Out of float64 range: keep the sign so ordering stays sane.
			if strings.HasPrefix(string(t), "-") {
				f = math.Inf(-1)
			} else {
				f = math.Inf(1)
			}
		}
		return number{f: f}
	case float64:
		return number{f: t}
	case float32:
		return number{f: float64(t)}
	case int:
		return number{i: int64(t), f: float64(t), isInt: true}
	case int64:
		return number{i: t, f: float64(t), isInt: true}
	case int32:
		return number{i: int64(t), f: float64(t), isInt: true}
	case uint32:
		return number{i: int64(t), f: float64(t), isInt: true}
	case uint64:
		if t <= math.MaxInt64 {
			return number{i: int64(t), f: float64(t), isInt: true}
		}
		return number{f: float64(t)}
	}
	return number{}
}

func compareNumbers(a, b any) int {
	x, y := toNumber(a), toNumber(b)
	switch {
	case x.isInt && y.isInt:
		return cmpInt64(x.i, y.i)
	case x.isInt:
		return cmpIntFloat(x.i, y.f)
	case y.isInt:
		return -cmpIntFloat(y.i, x.f)
	}
	switch {
	case x.f < y.f:
		return -1
	case x.f > y.f:
		return 1
	}
	return 0
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpIntFloat compares an integer with a float exactly. Converting the
// integer to float64 would round above 2^53 and break the total order: with
// i=2^53 and j=2^53+1 both "equal" to the float 2^53, yet i < j.
func cmpIntFloat(i int64, f float64) int {
	switch {
	case math.IsNaN(f):
		return 0
	case f < -(1 << 63):
		return 1
	case f >= 1<<63:
		return -1
	}
	t := math.Trunc(f) // in int64 range here, so the conversion is exact
	if c := cmpInt64(i, int64(t)); c != 0 {
		return c
	}
	switch frac := f - t; {
	case frac > 0:
		return -1
	case frac < 0:
		return 1
	}
	return 0
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareSameClass orders two scalars of the same class (bool, number,
// string). ok is false when they are of different classes or not orderable.
func compareSameClass(a, b any) (int, bool) {
	ca, cb := classOf(a, true), classOf(b, true)
	if ca != cb {
		return 0, false
	}
	switch ca {
	case classBool:
		return cmpInt(b2i(a.(bool)), b2i(b.(bool))), true
	case classNumber:
		return compareNumbers(a, b), true
	case classString:
		return strings.Compare(a.(string), b.(string)), true
	}
	return 0, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Compare is the total order used by orderBy: first by type class (missing <
// null < boolean < number < string < array < object), then within the class
// (false < true; numbers numerically; strings by UTF-8 bytes). Arrays and
// objects compare equal to each other within their class, so their order is
// decided by the next orderBy field or the document path.
func Compare(a any, aPresent bool, b any, bPresent bool) int {
	ca, cb := classOf(a, aPresent), classOf(b, bPresent)
	if ca != cb {
		return cmpInt(ca, cb)
	}
	if c, ok := compareSameClass(a, b); ok {
		return c
	}
	return 0
}

// Equal reports JSON equality: same type class and same value; numbers
// compare numerically, arrays element-wise, objects key-wise.
func Equal(a, b any) bool {
	ca, cb := classOf(a, true), classOf(b, true)
	if ca != cb {
		return false
	}
	switch ca {
	case classNull:
		return true
	case classBool, classNumber, classString:
		c, _ := compareSameClass(a, b)
		return c == 0
	case classArray:
		x, y := a.([]any), b.([]any)
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case classObject:
		x, y := a.(map[string]any), b.(map[string]any)
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !Equal(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// CompareDocs orders two documents by the orderBy terms, then by path.
func CompareDocs(order []Order, a, b *Document) int {
	for _, o := range order {
		av, aok := Lookup(a, o.Field)
		bv, bok := Lookup(b, o.Field)
		c := Compare(av, aok, bv, bok)
		if o.Desc() {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return strings.Compare(a.Path, b.Path)
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
