package celjson

import (
	"encoding/json"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

func TestNumberVal(t *testing.T) {
	tests := []struct {
		in   string
		want ref.Val
	}{
		{"0", types.Int(0)},
		{"-7", types.Int(-7)},
		{"3.0", types.Int(3)},
		{"3e0", types.Int(3)},
		{"1e3", types.Int(1000)},
		{"1.5", types.Double(1.5)},
		{"-0.25", types.Double(-0.25)},
		{"9223372036854775807", types.Int(9223372036854775807)},
		{"-9223372036854775808", types.Int(-9223372036854775808)},
		{"9223372036854775808", types.Double(9223372036854775808)}, // 2^63: out of int64
		{"1e19", types.Double(1e19)},
		{"12345678901234567890123", types.Double(12345678901234567890123)},
	}
	for _, tt := range tests {
		if got := NumberVal(json.Number(tt.in)); got.Type() != tt.want.Type() || got.Equal(tt.want) != types.True {
			t.Errorf("NumberVal(%s)=%v (%v), want %v (%v)", tt.in, got, got.Type(), tt.want, tt.want.Type())
		}
	}
	if got := NumberVal("1e999"); got.Type() != types.DoubleType {
		t.Errorf("NumberVal(1e999)=%v, want a double (+Inf)", got)
	}
	if got := NumberVal("abc"); !types.IsError(got) {
		t.Errorf("NumberVal(abc)=%v, want an error", got)
	}
}

func TestAdapter(t *testing.T) {
	v := Adapter{}.NativeToValue(map[string]any{"n": json.Number("2"), "l": []any{json.Number("1.5")}})
	m, ok := v.(interface {
		Get(ref.Val) ref.Val
	})
	if !ok {
		t.Fatalf("%T is not a map", v)
	}
	if got := m.Get(types.String("n")); got != types.Int(2) {
		t.Errorf("n=%v", got)
	}
	l, ok := m.Get(types.String("l")).(interface{ Get(ref.Val) ref.Val })
	if !ok || l.Get(types.Int(0)) != types.Double(1.5) {
		t.Errorf("l[0] is not double 1.5")
	}
}
