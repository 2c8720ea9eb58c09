package collections_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// mustObject decodes a JSON object the way the API does (numbers as
// json.Number).
func mustObject(t testing.TB, s string) map[string]any {
	t.Helper()
	m, err := collections.DecodeObject([]byte(s))
	if err != nil {
		t.Fatalf("DecodeObject(%s): %v", s, err)
	}
	return m
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

// nested returns a JSON object nested depth levels deep: nested(1) is
// {"k":0}.
func nested(depth int) string {
	return strings.Repeat(`{"k":`, depth) + "0" + strings.Repeat("}", depth)
}

func TestCleanInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string // "" means a nil map
		id   string
		want string // "" means an ErrInvalidDocument
	}{
		{"Nil", "", "x", `{}`},
		{"Plain", `{"a":1}`, "x", `{"a":1}`},
		{"IDEqual", `{"id":"x","a":1}`, "x", `{"a":1}`},
		{"IDDiffers", `{"id":"y","a":1}`, "x", ""},
		{"IDNotString", `{"id":1}`, "1", ""},
		{"IDNull", `{"id":null}`, "x", ""},
		{"EnvelopeDropped", `{"collection":"c","version":9,"createdAt":1,"updatedAt":2,"deleted":true,"a":1}`, "x", `{"a":1}`},
		{"NestedEnvelopeNamesKept", `{"a":{"version":1,"id":"z"}}`, "x", `{"a":{"id":"z","version":1}}`},
		{"Depth32", nested(collections.MaxDepth), "x", nested(collections.MaxDepth)},
		{"Depth33", nested(collections.MaxDepth + 1), "x", ""},
		{"ArrayDepth33", `{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`, "x", ""},
		{"ArrayDepth32", `{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`, "x", `{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`},
		{"BigNumber", `{"n":9007199254740993}`, "x", `{"n":9007199254740993}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in map[string]any
			if tc.in != "" {
				in = mustObject(t, tc.in)
			}
			got, err := collections.CleanInput(in, tc.id)
			if tc.want == "" {
				if !errors.Is(err, collections.ErrInvalidDocument) {
					t.Fatalf("err=%v, want ErrInvalidDocument", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
			if s := mustJSON(t, got); s != tc.want {
				t.Errorf("CleanInput=%s, want %s", s, tc.want)
			}
		})
	}
}

func TestDepth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`1`, 0},
		{`null`, 0},
		{`{}`, 1},
		{`[]`, 1},
		{`{"a":[1,{"b":2}]}`, 3},
		{nested(5), 5},
	} {
		v, err := collections.DecodeJSON([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got := collections.Depth(v); got != tc.want {
			t.Errorf("Depth(%s)=%d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"a":1}`, true},
		{` {"a":1} `, true},
		{`[1,2]`, true},
		{`1`, true},
		{`{"a":1} x`, false},
		{`{"a":1}}`, false},
		{`{"a":1} {}`, false},
		{`{"a":`, false},
		{``, false},
		{`NaN`, false},
	} {
		_, err := collections.DecodeJSON([]byte(tc.in))
		if got := err == nil; got != tc.ok {
			t.Errorf("DecodeJSON(%q) ok=%v (err %v), want %v", tc.in, got, err, tc.ok)
		}
	}
	v, err := collections.DecodeJSON([]byte(`{"n":9007199254740993,"f":1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if got := m["n"]; got != json.Number("9007199254740993") {
		t.Errorf("n=%#v, want json.Number 9007199254740993", got)
	}
	if got := m["f"]; got != json.Number("1.5") {
		t.Errorf("f=%#v, want json.Number 1.5", got)
	}
}

func TestDecodeObject(t *testing.T) {
	for _, in := range []string{`null`, `[]`, `1`, `"x"`, `{} {}`} {
		if _, err := collections.DecodeObject([]byte(in)); err == nil {
			t.Errorf("DecodeObject(%s) err=nil, want an error", in)
		}
	}
}

func TestEncodeData(t *testing.T) {
	b, err := collections.EncodeData(nil, 0)
	if err != nil || string(b) != "{}" {
		t.Errorf("EncodeData(nil)=%s, %v, want {}, nil", b, err)
	}
	data := mustObject(t, `{"a":"`+strings.Repeat("x", 100)+`"}`)
	if _, err := collections.EncodeData(data, 50); !errors.Is(err, collections.ErrTooLarge) {
		t.Errorf("EncodeData over limit err=%v, want ErrTooLarge", err)
	}
	if _, err := collections.EncodeData(data, 0); err != nil {
		t.Errorf("EncodeData without limit err=%v, want nil", err)
	}
	if _, err := collections.EncodeData(map[string]any{"n": json.Number("nope")}, 0); !errors.Is(err, collections.ErrInvalidDocument) {
		t.Errorf("EncodeData(bad number) err=%v, want ErrInvalidDocument", err)
	}
}

func TestDocument_MarshalJSON(t *testing.T) {
	base := collections.Document{
		Path: "rooms/r1/messages/m1", Collection: "rooms/r1/messages", ID: "m1",
		Version: 3, CreatedAt: 1700000000000, UpdatedAt: 1700000000001, Seq: 42,
	}
	t.Run("Live", func(t *testing.T) {
		d := base
		d.Data = mustObject(t, `{"text":"hi"}`)
		got, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"id":"m1","collection":"rooms/r1/messages","version":3,"createdAt":1700000000000,"updatedAt":1700000000001,"text":"hi"}`
		if string(got) != want {
			t.Errorf("MarshalJSON=%s, want %s", got, want)
		}
	})
	t.Run("Tombstone", func(t *testing.T) {
		d := base
		d.Deleted = true
		got, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"id":"m1","collection":"rooms/r1/messages","version":3,"createdAt":1700000000000,"updatedAt":1700000000001,"deleted":true}`
		if string(got) != want {
			t.Errorf("MarshalJSON=%s, want %s", got, want)
		}
	})
	t.Run("EmptyData", func(t *testing.T) {
		for _, data := range []map[string]any{nil, {}} {
			d := base
			d.Data = data
			got, err := json.Marshal(&d)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(got) || bytes.Contains(got, []byte("deleted")) {
				t.Errorf("MarshalJSON=%s, want a valid envelope without deleted", got)
			}
		}
	})
	t.Run("ExactNumbers", func(t *testing.T) {
		d := base
		d.Data = mustObject(t, `{"big":9007199254740993,"neg":-9223372036854775808,"f":0.1,"e":1e400,"nested":{"n":[12345678901234567890]}}`)
		b, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		back := mustObject(t, string(b))
		for _, tc := range []struct {
			field string
			want  string
		}{
			{"big", "9007199254740993"},
			{"neg", "-9223372036854775808"},
			{"f", "0.1"},
			{"e", "1e400"},
			{"version", "3"},
			{"createdAt", "1700000000000"},
		} {
			if got := back[tc.field]; got != json.Number(tc.want) {
				t.Errorf("%s=%v, want %s", tc.field, got, tc.want)
			}
		}
		if got := mustJSON(t, back["nested"]); got != `{"n":[12345678901234567890]}` {
			t.Errorf("nested=%s, want {\"n\":[12345678901234567890]}", got)
		}
		if _, ok := back["deleted"]; ok {
			t.Errorf("live document has a deleted field: %s", b)
		}
	})
	t.Run("EscapedStrings", func(t *testing.T) {
		d := base
		d.ID = `m"1`
		d.Data = map[string]any{"html": "<a href='x'>&</a>", "nl": "a\nb\u2028"}
		b, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		back := mustObject(t, string(b))
		if back["id"] != `m"1` || back["html"] != "<a href='x'>&</a>" || back["nl"] != "a\nb\u2028" {
			t.Errorf("round trip of %s lost characters: %v", b, back)
		}
	})
	t.Run("BadData", func(t *testing.T) {
		d := base
		d.Data = map[string]any{"n": json.Number("not-a-number")}
		if _, err := json.Marshal(&d); err == nil {
			t.Errorf("MarshalJSON with an invalid number err=nil, want an error")
		}
	})
}

func TestDocument_Clone(t *testing.T) {
	var nilDoc *collections.Document
	if nilDoc.Clone() != nil {
		t.Errorf("Clone(nil) != nil")
	}
	d := &collections.Document{Path: "r/x", Data: mustObject(t, `{"a":{"b":[1,{"c":2}]}}`)}
	c := d.Clone()
	c.Data["a"].(map[string]any)["b"].([]any)[1].(map[string]any)["c"] = "changed"
	c.Data["z"] = 1
	if got := mustJSON(t, d.Data); got != `{"a":{"b":[1,{"c":2}]}}` {
		t.Errorf("original after mutating the clone=%s, want unchanged", got)
	}
}

func TestIsEnvelopeField(t *testing.T) {
	for _, f := range []string{"id", "collection", "version", "createdAt", "updatedAt", "deleted"} {
		if !collections.IsEnvelopeField(f) {
			t.Errorf("IsEnvelopeField(%q)=false, want true", f)
		}
	}
	for _, f := range []string{"ID", "created_at", "data", "", "leaseOwner"} {
		if collections.IsEnvelopeField(f) {
			t.Errorf("IsEnvelopeField(%q)=true, want false", f)
		}
	}
}

func TestInt64(t *testing.T) {
	for _, tt := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{json.Number("42"), 42, true},
		{json.Number("3.0"), 3, true},
		{json.Number("1e3"), 1000, true},
		{json.Number("1.5"), 0, false},
		{int64(-7), -7, true},
		{9, 9, true},
		{2.0, 2, true},
		{2.5, 2, false},
		{"3", 0, false},
		{nil, 0, false},
	} {
		got, ok := collections.Int64(tt.v)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("Int64(%#v) = %d, %v; want %d, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}
