// Package celjson converts decoded JSON document values (as produced by
// collections.DecodeJSON: nil, bool, json.Number, string, []any,
// map[string]any) to CEL values.
package celjson

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Adapter converts document values to CEL lazily, as they are accessed:
// json.Number becomes int when it is integral and fits int64, double
// otherwise; map[string]any and []any are wrapped so that their elements go
// through this adapter too. Everything else is CEL's default conversion.
// Use it with cel.CustomTypeAdapter(celjson.Adapter{}).
type Adapter struct{}

// NativeToValue implements types.Adapter.
func (a Adapter) NativeToValue(v any) ref.Val {
	switch t := v.(type) {
	case json.Number:
		return NumberVal(t)
	case map[string]any:
		return types.NewStringInterfaceMap(a, t)
	case []any:
		return types.NewDynamicList(a, t)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// NumberVal converts a JSON number: int when it is integral and in int64
// range (so "3", "3.0" and "3e0" are all int 3), double otherwise.
func NumberVal(n json.Number) ref.Val {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return types.Int(i)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return types.NewErr("invalid number %q", string(n))
	}
	// -2^63 is exact in float64; 2^63 is the first value out of range.
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return types.Int(int64(f))
	}
	return types.Double(f)
}
