package collections_test

import (
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestValidDatabase(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"default", true},
		{"a", true},
		{"Tenant_1-b", true},
		{strings.Repeat("x", collections.MaxDatabaseName), true},
		{"", false},
		{strings.Repeat("x", collections.MaxDatabaseName+1), false},
		{"a.b", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
	} {
		if got := collections.ValidDatabase(tc.name); got != tc.want {
			t.Errorf("ValidDatabase(%q)=%v, want %v", tc.name, got, tc.want)
		}
	}
}
