package rules

import (
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// request and request.auth are CEL maps with fixed keys. They are built for
// every evaluation, so rather than allocating Go maps and wrapping them, they
// are records that answer field lookups directly; the rare operations that
// need a real map (iteration, equality, conversion) build one.

// record is a value with fixed string keys.
type record interface {
	ref.Val
	keys() []string
	field(name string) (ref.Val, bool)
}

// requestVal is request: {auth, op, path, time, resource}.
type requestVal struct {
	req  *Request
	time types.Timestamp
}

var requestKeys = []string{"auth", "op", "path", "time", "resource"}

func (r *requestVal) keys() []string { return requestKeys }

func (r *requestVal) field(name string) (ref.Val, bool) {
	switch name {
	case "auth":
		if r.req.Auth == nil {
			return types.NullValue, true
		}
		return (*authVal)(r.req.Auth), true
	case "op":
		return types.String(r.req.Op), true
	case "path":
		return types.String(r.req.Path), true
	case "time":
		return r.time, true
	case "resource":
		if r.req.Resource == nil {
			return types.NullValue, true
		}
		return dataVal(r.req.Resource), true
	}
	return nil, false
}

// authVal is request.auth: {uid, username, roles, claims}.
type authVal Auth

var authKeys = []string{"uid", "username", "roles", "claims"}

func (a *authVal) keys() []string { return authKeys }

func (a *authVal) field(name string) (ref.Val, bool) {
	switch name {
	case "uid":
		return types.String(a.UID), true
	case "username":
		return types.String(a.Username), true
	case "roles":
		return types.NewStringList(adapter{}, a.Roles), true
	case "claims":
		return adapter{}.NativeToValue(a.Claims), true // a nil map is an empty map
	}
	return nil, false
}

// dataVal is {data: d}, the shape of resource, request.resource and what
// get() returns.
func dataVal(d map[string]any) ref.Val {
	return types.NewRefValMap(adapter{}, map[ref.Val]ref.Val{types.String("data"): adapter{}.NativeToValue(d)})
}

// The traits.Mapper methods, shared through these helpers.

func recordFind(r record, key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	return r.field(string(k))
}

func recordGet(r record, key ref.Val) ref.Val {
	if v, ok := recordFind(r, key); ok {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

// recordMap builds the equivalent CEL map.
func recordMap(r record) traits.Mapper {
	m := make(map[ref.Val]ref.Val, len(r.keys()))
	for _, k := range r.keys() {
		v, _ := r.field(k)
		m[types.String(k)] = v
	}
	return types.NewRefValMap(adapter{}, m)
}

func recordConvertToType(r record, t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return r
	case types.TypeType:
		return types.MapType
	}
	return recordMap(r).ConvertToType(t)
}

var (
	_ traits.Mapper = (*requestVal)(nil)
	_ traits.Mapper = (*authVal)(nil)
)

func (r *requestVal) Find(k ref.Val) (ref.Val, bool) { return recordFind(r, k) }
func (r *requestVal) Get(k ref.Val) ref.Val          { return recordGet(r, k) }
func (r *requestVal) Contains(k ref.Val) ref.Val     { _, ok := recordFind(r, k); return types.Bool(ok) }
func (r *requestVal) Size() ref.Val                  { return types.Int(len(requestKeys)) }
func (r *requestVal) Iterator() traits.Iterator      { return recordMap(r).Iterator() }
func (r *requestVal) Equal(o ref.Val) ref.Val        { return recordMap(r).Equal(o) }
func (r *requestVal) ConvertToNative(t reflect.Type) (any, error) {
	return recordMap(r).ConvertToNative(t)
}
func (r *requestVal) ConvertToType(t ref.Type) ref.Val { return recordConvertToType(r, t) }
func (r *requestVal) Type() ref.Type                   { return types.MapType }
func (r *requestVal) Value() any                       { return recordMap(r).Value() }
func (a *authVal) Find(k ref.Val) (ref.Val, bool)      { return recordFind(a, k) }
func (a *authVal) Get(k ref.Val) ref.Val               { return recordGet(a, k) }
func (a *authVal) Contains(k ref.Val) ref.Val          { _, ok := recordFind(a, k); return types.Bool(ok) }
func (a *authVal) Size() ref.Val                       { return types.Int(len(authKeys)) }
func (a *authVal) Iterator() traits.Iterator           { return recordMap(a).Iterator() }
func (a *authVal) Equal(o ref.Val) ref.Val             { return recordMap(a).Equal(o) }
func (a *authVal) ConvertToNative(t reflect.Type) (any, error) {
	return recordMap(a).ConvertToNative(t)
}
func (a *authVal) ConvertToType(t ref.Type) ref.Val { return recordConvertToType(a, t) }
func (a *authVal) Type() ref.Type                   { return types.MapType }
func (a *authVal) Value() any                       { return recordMap(a).Value() }
