package mongo

import (
	"strconv"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestIndexDefs(t *testing.T) {
	fields := func(n int) []string {
		var f []string
		for i := 0; i < n; i++ {
			f = append(f, "f"+strconv.Itoa(i))
		}
		return f
	}
	defs, err := indexDefs([]collections.Index{
		{Collection: "rooms", Fields: []string{"a", "b"}},
		{Collection: "other", Fields: []string{"a", "b"}}, // same key pattern: one index
		{Collection: "users/*/posts", Fields: fields(maxIndexKeys - 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 2 || !strings.HasPrefix(defs[0].name, "loomix_") {
		t.Fatalf("defs=%+v, want 2 loomix_ indexes", defs)
	}
	// MongoDB refuses a compound index of more than 32 fields: Open says so
	// before asking the server.
	_, err = indexDefs([]collections.Index{{Collection: "rooms", Fields: fields(maxIndexKeys - 2)}})
	if err == nil || !strings.Contains(err.Error(), "at most 29") {
		t.Errorf("err=%v, want the field limit", err)
	}
}
