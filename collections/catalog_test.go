package collections_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// sortedSeek answers a seek from a sorted list of values, as an index would.
func sortedSeek(values []string) collections.CatalogSeek {
	slices.Sort(values)
	return func(_ context.Context, from, to string) (string, bool, error) {
		i, _ := slices.BinarySearch(values, from)
		if i == len(values) || (to != "" && values[i] >= to) {
			return "", false, nil
		}
		return values[i], true, nil
	}
}

func TestListCollectionsOverASortedIndex(t *testing.T) {
	seek := sortedSeek([]string{"_users", "_users/u/sessions", "a", "a-b", "a/1/x", "a/1/x/2/y", "a/1/x-", "a/2/z", "b/1/c", "Z"})
	for _, tc := range []struct {
		parent, after string
		want          []string
	}{
		{"", "", []string{"Z", "a", "a-b"}},
		{"", "a", []string{"a-b"}},
		{"a/1", "", []string{"a/1/x", "a/1/x-"}},
		{"a/1/x/2", "", []string{"a/1/x/2/y"}},
		{"a/2", "", []string{"a/2/z"}},
		{"b/1", "", []string{"b/1/c"}},
		{"b/2", "", nil},
		{"_users/u", "", nil},
	} {
		got, err := collections.ListCollections(context.Background(), seek, tc.parent, tc.after, 100)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ListCollections(%q, after %q) = %q, %v; want %q", tc.parent, tc.after, got, err, tc.want)
		}
	}
	shapes, err := collections.ListShapes(context.Background(), sortedSeek([]string{"_users/*/sessions", "a", "a/*/b", "c/*/d/*/e"}), "", 100)
	if err != nil || !slices.Equal(shapes, []string{"a/*/b", "c/*/d/*/e"}) {
		t.Errorf("ListShapes = %q, %v", shapes, err)
	}
}

// An engine seek that returns a value outside the range asked for is an
// error, never an endless scan.
func TestCatalogSeekOutOfRange(t *testing.T) {
	stuck := func(context.Context, string, string) (string, bool, error) { return "_x", true, nil }
	for name, f := range map[string]func() ([]string, error){
		"collections": func() ([]string, error) { return collections.ListCollections(context.Background(), stuck, "", "", 10) },
		"shapes":      func() ([]string, error) { return collections.ListShapes(context.Background(), stuck, "", 10) },
		"databases": func() ([]string, error) {
			return collections.ListDatabases(context.Background(), stuck, func(string) collections.CatalogSeek { return stuck }, "", 10)
		},
	} {
		if _, err := f(); err == nil || !strings.Contains(err.Error(), "returned") {
			t.Errorf("%s: error %v, want an out-of-range error", name, err)
		}
	}
}
