package collections_test

import (
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
)

// patchCases also seed FuzzApplyPatch. want "" means ErrInvalidDocument
// (and doc left untouched).
var patchCases = []struct {
	name, doc, patch, want string
}{
	{"DeepMerge", `{"a":{"x":1,"y":2},"b":1}`, `{"a":{"y":3,"z":4}}`, `{"a":{"x":1,"y":3,"z":4},"b":1}`},
	{"DeepMergeThreeLevels", `{"a":{"b":{"c":1,"d":2}}}`, `{"a":{"b":{"d":3}}}`, `{"a":{"b":{"c":1,"d":3}}}`},
	{"NewField", `{"a":1}`, `{"b":"x"}`, `{"a":1,"b":"x"}`},
	{"NullRemoves", `{"a":1,"b":2}`, `{"a":null}`, `{"b":2}`},
	{"NestedNullRemoves", `{"a":{"x":1,"y":2}}`, `{"a":{"x":null}}`, `{"a":{"y":2}}`},
	{"NullOnMissing", `{}`, `{"a":null}`, `{}`},
	{"NestedNullOnMissing", `{}`, `{"a":{"x":null}}`, `{"a":{}}`},
	{"DottedCreates", `{}`, `{"a.b.c":1}`, `{"a":{"b":{"c":1}}}`},
	{"DottedIntoExisting", `{"a":{"x":1}}`, `{"a.y":2}`, `{"a":{"x":1,"y":2}}`},
	{"DottedReplacesScalar", `{"a":5}`, `{"a.b":1}`, `{"a":{"b":1}}`},
	{"DottedReplacesArray", `{"a":[1]}`, `{"a.b":1}`, `{"a":{"b":1}}`},
	{"DottedNullRemoves", `{"a":{"b":1,"c":2}}`, `{"a.b":null}`, `{"a":{"c":2}}`},
	{"DottedNullBelowMissing", `{}`, `{"a.b":null}`, `{}`},
	{"DottedNullBelowScalar", `{"a":1}`, `{"a.b":null}`, `{"a":1}`},
	{"DottedObjectMerges", `{"a":{"b":{"x":1}}}`, `{"a.b":{"y":2}}`, `{"a":{"b":{"x":1,"y":2}}}`},
	{"EnvelopeIgnored", `{"a":1}`, `{"id":"x","collection":"c","version":9,"createdAt":1,"updatedAt":1,"deleted":true}`, `{"a":1}`},
	{"DottedEnvelopeIgnored", `{"a":1}`, `{"version.x":1,"id.y":2}`, `{"a":1}`},
	{"NestedEnvelopeNamesKept", `{}`, `{"meta":{"id":1,"version":2}}`, `{"meta":{"id":1,"version":2}}`},
	{"DottedNestedEnvelopeNameKept", `{}`, `{"meta.version":2}`, `{"meta":{"version":2}}`},
	{"ArrayReplaced", `{"a":[1,2]}`, `{"a":[3]}`, `{"a":[3]}`},
	{"ObjectReplacesArray", `{"a":[1]}`, `{"a":{"x":1}}`, `{"a":{"x":1}}`},
	{"ScalarReplacesObject", `{"a":{"x":1}}`, `{"a":2}`, `{"a":2}`},
	{"NullValueInArrayKept", `{}`, `{"a":[null,1]}`, `{"a":[null,1]}`},
	{"EmptyPatch", `{"a":1}`, `{}`, `{"a":1}`},
	{"ExactNumbers", `{}`, `{"n":9007199254740993,"f":0.1}`, `{"f":0.1,"n":9007199254740993}`},
	{"KeyBeforeDottedKey", `{}`, `{"a":1,"a.b":2}`, `{"a":{"b":2}}`},
	{"NullBeforeDottedKey", `{"a":{"b":1}}`, `{"a":null,"a.c":2}`, `{"a":{"c":2}}`},
	{"ObjectBeforeDottedKey", `{}`, `{"a":{"b":1},"a.b":2}`, `{"a":{"b":2}}`},
	{"ShorterDottedFirst", `{}`, `{"a.b":1,"a.b.c":2}`, `{"a":{"b":{"c":2}}}`},
	{"EmptySegment", `{"a":1}`, `{"a..b":1}`, ""},
	{"LeadingDot", `{"a":1}`, `{".a":1}`, ""},
	{"TrailingDot", `{"a":1}`, `{"a.":1}`, ""},
	{"Depth32", `{}`, `{"k":` + nested(collections.MaxDepth-1) + `}`, `{"k":` + nested(collections.MaxDepth-1) + `}`},
	{"Depth33", `{"a":1}`, `{"k":` + nested(collections.MaxDepth) + `}`, ""},
	{"DottedDepth33", `{"a":1}`, `{"a.b":` + nested(collections.MaxDepth-1) + `}`, ""},
	{"DeepRemovedIsFine", `{"k":` + nested(collections.MaxDepth-1) + `}`, `{"k":null,"j":` + nested(3) + `}`, `{"j":` + nested(3) + `}`},
}

func TestApplyPatch(t *testing.T) {
	for _, tc := range patchCases {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustObject(t, tc.doc)
			got, err := collections.ApplyPatch(doc, mustObject(t, tc.patch))
			if tc.want == "" {
				if !errors.Is(err, collections.ErrInvalidDocument) {
					t.Fatalf("err=%v, want ErrInvalidDocument", err)
				}
				if s := mustJSON(t, doc); s != mustJSON(t, mustObject(t, tc.doc)) {
					t.Errorf("doc after a failed patch=%s, want %s (untouched)", s, tc.doc)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
			if s := mustJSON(t, got); s != tc.want {
				t.Errorf("ApplyPatch=%s, want %s", s, tc.want)
			}
			if s := mustJSON(t, doc); s != tc.want {
				t.Errorf("doc (modified in place)=%s, want %s", s, tc.want)
			}
		})
	}
}

func TestApplyPatch_NilDoc(t *testing.T) {
	got, err := collections.ApplyPatch(nil, map[string]any{"a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if s := mustJSON(t, got); s != `{"a":"x"}` {
		t.Errorf("ApplyPatch(nil)=%s, want {\"a\":\"x\"}", s)
	}
}

// TestApplyPatch_NoAliasing changes the patch after applying it: the document
// must not change with it.
func TestApplyPatch_NoAliasing(t *testing.T) {
	patch := mustObject(t, `{"a":{"b":[1,{"c":2}]},"l":[1,2],"x.y":{"z":[3]}}`)
	doc, err := collections.ApplyPatch(map[string]any{}, patch)
	if err != nil {
		t.Fatal(err)
	}
	want := mustJSON(t, doc)
	patch["a"].(map[string]any)["b"].([]any)[1].(map[string]any)["c"] = "changed"
	patch["a"].(map[string]any)["new"] = 1
	patch["l"].([]any)[0] = "changed"
	patch["x.y"].(map[string]any)["z"].([]any)[0] = "changed"
	if got := mustJSON(t, doc); got != want {
		t.Errorf("doc after mutating the patch=%s, want %s", got, want)
	}
}

// TestApplyPatch_Deterministic applies a patch with conflicting keys many
// times: map iteration order must not leak into the result.
func TestApplyPatch_Deterministic(t *testing.T) {
	const patch = `{"a":5,"a.b":1,"a.b.c":2,"a.d":null,"e":{"f":1},"e.f":null,"e.g":3}`
	var first string
	for i := 0; i < 200; i++ {
		got, err := collections.ApplyPatch(mustObject(t, `{"a":{"d":1,"x":1}}`), mustObject(t, patch))
		if err != nil {
			t.Fatal(err)
		}
		s := mustJSON(t, got)
		if i == 0 {
			first = s
			continue
		}
		if s != first {
			t.Fatalf("run %d gave %s, want %s as in run 0", i, s, first)
		}
	}
}

// FuzzApplyPatch: arbitrary JSON objects never panic the merge, the result
// never nests deeper than MaxDepth, a failed patch leaves the document as it
// was, the patch itself is never modified, and applying a patch twice gives
// the same document as applying it once.
func FuzzApplyPatch(f *testing.F) {
	for _, tc := range patchCases {
		f.Add([]byte(tc.doc), []byte(tc.patch))
	}
	f.Fuzz(func(t *testing.T, docJSON, patchJSON []byte) {
		doc, err := collections.DecodeObject(docJSON)
		if err != nil || collections.Depth(doc) > collections.MaxDepth {
			return // stored documents are objects within the depth limit
		}
		patch, err := collections.DecodeObject(patchJSON)
		if err != nil {
			return
		}
		docBefore := collections.CloneValue(doc)
		patchBefore := collections.CloneValue(patch)
		got, err := collections.ApplyPatch(doc, patch)
		if !collections.Equal(patch, patchBefore) {
			t.Fatalf("ApplyPatch modified the patch")
		}
		if err != nil {
			if !errors.Is(err, collections.ErrInvalidDocument) {
				t.Fatalf("err=%v, want ErrInvalidDocument", err)
			}
			if !collections.Equal(doc, docBefore) {
				t.Fatalf("failed patch modified the document")
			}
			return
		}
		if d := collections.Depth(got); d > collections.MaxDepth {
			t.Fatalf("Depth(result)=%d, want <= %d", d, collections.MaxDepth)
		}
		for k := range got {
			if collections.IsEnvelopeField(k) && !hasKey(docBefore, k) {
				t.Fatalf("patch introduced envelope field %q", k)
			}
		}
		once := collections.CloneValue(got)
		twice, err := collections.ApplyPatch(got, patch)
		if err != nil {
			t.Fatalf("second application failed: %v", err)
		}
		if !collections.Equal(twice, once) {
			t.Fatalf("patch is not idempotent: once %s, twice %s", mustJSON(t, once), mustJSON(t, twice))
		}
	})
}

func hasKey(v any, k string) bool {
	m, _ := v.(map[string]any)
	_, ok := m[k]
	return ok
}
