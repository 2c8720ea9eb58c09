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

// NumberValue reads v as Compare orders numbers: an integer that fits int64
// (json.Number, int, int32, int64, uint32, uint64 up to MaxInt64) is exact in
// i with isInt set and f = float64(i); any other number is f (a json.Number
// out of float64 range is ±Inf by its sign, so ordering stays sane). ok is
// false, and the rest zero, when v is not a number (TypeClass other than 3).
// Code that must order numbers the way Compare does (such as a store's
// order keys) reads them through this one function.
func NumberValue(v any) (i int64, f float64, isInt bool, ok bool) {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i, float64(i), true, true
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			if strings.HasPrefix(string(t), "-") {
				f = math.Inf(-1)
			} else {
				f = math.Inf(1)
			}
		}
		return 0, f, false, true
	case float64:
		return 0, t, false, true
	case float32:
		return 0, float64(t), false, true
	case int:
		return int64(t), float64(t), true, true
	case int64:
		return t, float64(t), true, true
	case int32:
		return int64(t), float64(t), true, true
	case uint32:
		return int64(t), float64(t), true, true
	case uint64:
		if t <= math.MaxInt64 {
			return int64(t), float64(t), true, true
		}
		return 0, float64(t), false, true
	}
	return 0, 0, false, false
}

func compareNumbers(a, b any) int {
	xi, xf, xInt, _ := NumberValue(a)
	yi, yf, yInt, _ := NumberValue(b)
	switch {
	case xInt && yInt:
		return cmpInt64(xi, yi)
	case xInt:
		return cmpIntFloat(xi, yf)
	case yInt:
		return -cmpIntFloat(yi, xf)
	}
	switch {
	case xf < yf:
		return -1
	case xf > yf:
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
