package mongo

import (
	"math"
	"math/bits"
	"strings"

	"github.com/loomdb/loom/collections"
)

// Order keys. Every field a query can name (a collections.Lookup path: an
// envelope field, or a dotted path through nested objects) is stored per
// document as one string, its order key, such that MongoDB's binary string
// comparison of two keys equals collections.Compare of the two values, and
// equal keys mean equal values for scalars. A missing field has no key, and
// MongoDB sorts a missing field before every string, as Compare sorts
// missing before every class. The first byte is the type class:
//
//	'1' null   '2' boolean ('20' false, '21' true)
//	'3' number (see numberKey)   '4' string (the UTF-8 bytes follow)
//	'5' array  '6' object (a class alone: Compare says they are all equal)
//
// Filters and sorts on these keys are therefore exact by construction; the
// translation still re-checks every document with collections.Query.Matches.
const (
	keyNull   = "1"
	keyBool   = "2"
	keyNumber = "3"
	keyString = "4"
	keyArray  = "5"
	keyObject = "6"
	// keyEnd bounds every class: all keys of class c lie in [c, c+1).
	keyEnd = "7"
)

// maxKeyBytes bounds the order keys of one document as BSON (names, values
// and bsonKeyOverhead per key).
// A document over it is stored without keys and marked (fieldNoKeys); a
// query over a collection holding such a document runs in Go.
const maxKeyBytes = 4 << 20

// bsonKeyOverhead is what one string element costs in BSON beyond its name
// and value: the type byte, the name's terminator, the value's length and
// its terminator. A document of many small fields spends more on it than
// on names and values.
const bsonKeyOverhead = 7

// orderKey returns the order key of a present value, and false for a value
// of no JSON class (never stored).
func orderKey(v any) (string, bool) {
	switch t := v.(type) {
	case nil:
		return keyNull, true
	case bool:
		if t {
			return keyBool + "1", true
		}
		return keyBool + "0", true
	case string:
		return keyString + t, true
	case []any:
		return keyArray, true
	case map[string]any:
		return keyObject, true
	}
	if collections.TypeClass(v, true) == 3 {
		return keyNumber + numberKey(v), true
	}
	return "", false
}

// numberKey encodes a number so that byte order is numeric order, exact for
// int64 and float64 alike (2^53+1 > 2^53 = 2^53.0): the value is written as
// sign, binary exponent and the 64 bits that follow the leading one, which
// is exact for both (an int64 has at most 63 such bits, a float64 52).
//
//	'0' negative: exponent and mantissa digit-complemented, so larger
//	    magnitudes sort first
//	'1' zero (and -0; NaN, which JSON cannot carry, compares equal to all)
//	'2' positive
//
// followed by 4 hex digits of exponent+offset (ffff = infinity) and 16 hex
// digits of mantissa. Hex digits keep byte order and keep NUL out of keys.
func numberKey(v any) string {
	ni, nf, isInt, _ := collections.NumberValue(v)
	var neg bool
	var exp int
	var mant uint64 // bits after the leading one, left-aligned
	inf := false
	if isInt {
		if ni == 0 {
			return "1"
		}
		neg = ni < 0
		mag := uint64(ni)
		if neg {
			mag = -mag // two's complement: exact for MinInt64 too
		}
		l := bits.Len64(mag)
		exp = l - 1
		mant = mag << (64 - l) << 1
	} else {
		f := nf
		switch {
		case f == 0 || math.IsNaN(f):
			return "1"
		case math.IsInf(f, 0):
			neg, inf = f < 0, true
		default:
			neg = f < 0
			fr, e := math.Frexp(math.Abs(f)) // |f| = fr * 2^e, fr in [0.5, 1)
			m := math.Float64bits(fr)&(1<<52-1) | 1<<52
			// m is the 53-bit significand of fr with its leading one at
			// bit 52; fr = m * 2^-53, so |f| = m * 2^(e-53).
			l := bits.Len64(m)
			exp = e - 53 + l - 1
			mant = m << (64 - l) << 1
		}
	}
	var b [21]byte
	b[0] = '2'
	e := uint64(0xffff)
	if !inf {
		e = uint64(exp + expOffset)
	} else {
		mant = 0
	}
	const hexd = "0123456789abcdef"
	for i := 0; i < 4; i++ {
		b[1+i] = hexd[(e>>(12-4*i))&0xf]
	}
	for i := 0; i < 16; i++ {
		b[5+i] = hexd[(mant>>(60-4*i))&0xf]
	}
	if neg {
		b[0] = '0'
		for i := 1; i < len(b); i++ {
			d := strings.IndexByte(hexd, b[i])
			b[i] = hexd[15-d]
		}
	}
	return string(b[:])
}

// expOffset makes every finite binary exponent (float64: -1074..1023)
// positive and below the infinity marker.
const expOffset = 2048

// fieldName is the MongoDB name of a Loom field's order key inside the
// keys subdocument. Loom fields split on "."; MongoDB field names must not
// contain "." or NUL or start with "$", so those and the escape character
// itself are percent-escaped and the whole dotted path is one name.
func fieldName(field string) string {
	if !strings.ContainsAny(field, ".$%\x00") {
		return field
	}
	var b strings.Builder
	for i := 0; i < len(field); i++ {
		switch c := field[i]; c {
		case '.', '$', '%', 0:
			b.WriteByte('%')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// keyPath is the dotted MongoDB path of a field's order key.
func keyPath(field string) string { return fieldKeys + "." + fieldName(field) }

// docKeys returns the order keys of every field collections.Lookup can
// reach in d (keyed by fieldName), or false when they would exceed
// maxKeyBytes.
func docKeys(d *collections.Document) (map[string]string, bool) {
	keys := make(map[string]string, 8+len(d.Data))
	size := 5 // the subdocument's length and terminator
	add := func(field, key string) {
		name := fieldName(field)
		keys[name] = key
		size += len(name) + len(key) + bsonKeyOverhead
	}
	add(collections.FieldID, keyString+d.ID)
	add(collections.FieldCollection, keyString+d.Collection)
	add(collections.FieldVersion, keyNumber+numberKey(d.Version))
	add(collections.FieldCreatedAt, keyNumber+numberKey(d.CreatedAt))
	add(collections.FieldUpdatedAt, keyNumber+numberKey(d.UpdatedAt))
	if d.Deleted {
		add(collections.FieldDeleted, keyBool+"1")
	}
	var walk func(prefix string, m map[string]any, top bool) bool
	walk = func(prefix string, m map[string]any, top bool) bool {
		for k, v := range m {
			// Lookup splits fields on "." and never yields an empty
			// segment.
			if k == "" || strings.Contains(k, ".") {
				continue
			}
			field := k
			if prefix != "" {
				field = prefix + "." + k
			}
			key, ok := orderKey(v)
			if !ok {
				continue
			}
			// An envelope name at the top is the envelope's, but Lookup
			// still reads the data below it ("version.x").
			if !top || !collections.IsEnvelopeField(k) {
				add(field, key)
				if size > maxKeyBytes {
					return false
				}
			}
			if sub, isMap := v.(map[string]any); isMap {
				if !walk(field, sub, false) {
					return false
				}
			}
		}
		return true
	}
	if !walk("", d.Data, true) {
		return nil, false
	}
	return keys, true
}
