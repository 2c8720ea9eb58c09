package mongo

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/loomdb/loom/collections"
)

// A MongoDB cursor is not isolated: a document updated while an index scan
// runs can come back twice, at its old and at its new sort position (an
// index on k.n, the document's n raised meanwhile). A page must still hold
// each document once, as SQLite's single statement does.
func TestCollectPushed_Duplicates(t *testing.T) {
	doc := func(id string, n int64, version int64) *collections.Document {
		return &collections.Document{Path: "c/" + id, Collection: "c", ID: id, Version: version,
			Data: map[string]any{"n": json.Number(strconv.FormatInt(n, 10))}}
	}
	q := collections.Query{Collection: "c", OrderBy: []collections.Order{{Field: "n", Direction: "asc"}}, Limit: 3}
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		limit int
		in    []*collections.Document
		want  []string
	}{
		{"moved forward", 3, []*collections.Document{doc("a", 1, 1), doc("b", 2, 1), doc("c", 3, 1), doc("a", 9, 2), doc("d", 10, 1)},
			[]string{"c/a", "c/b", "c/c", "c/d"}},
		{"moved within the page", 3, []*collections.Document{doc("a", 1, 1), doc("a", 2, 2), doc("b", 3, 1), doc("c", 4, 1)},
			[]string{"c/a", "c/b", "c/c"}},
		{"no duplicates", 1, []*collections.Document{doc("a", 1, 1), doc("b", 2, 1), doc("c", 3, 1)},
			[]string{"c/a", "c/b"}},
	} {
		i := 0
		next := func() (*collections.Document, bool, error) {
			if i == len(tc.in) {
				return nil, false, nil
			}
			i++
			return tc.in[i-1], true, nil
		}
		got, err := collectPushed(&q, nil, tc.limit, next)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, d := range got {
			paths = append(paths, d.Path)
		}
		if !slices.Equal(paths, tc.want) {
			t.Errorf("%s: page %v, want %v (each document once, limit+1 of them)", tc.name, paths, tc.want)
		}
	}
}

// ChangedSince scans the (seq, id) index, which a concurrent update moves
// a document forward in: the scan may return it at its old and its new
// seq. The batch keeps the newer version only: keeping the older one and
// checkpointing past the newer would hide it from the client for good.
func TestLatest(t *testing.T) {
	d := func(id string, seq int64) *collections.Document {
		return &collections.Document{Path: "c/" + id, Collection: "c", ID: id, Seq: seq}
	}
	for _, tc := range []struct {
		in   []*collections.Document
		want []string
	}{
		{nil, nil},
		{[]*collections.Document{d("a", 1), d("b", 2)}, []string{"a@1", "b@2"}},
		{[]*collections.Document{d("a", 1), d("b", 2), d("a", 3), d("c", 4)}, []string{"b@2", "a@3", "c@4"}},
		{[]*collections.Document{d("a", 1), d("a", 2), d("a", 3)}, []string{"a@3"}},
	} {
		var got []string
		for _, x := range latest(tc.in) {
			got = append(got, x.ID+"@"+strconv.FormatInt(x.Seq, 10))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("latest=%v, want %v", got, tc.want)
		}
	}
}
