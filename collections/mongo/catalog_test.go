package mongo

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The catalog seeks are ranges on the leading fields of an existing index,
// sorted on the same field, one result, the index named; the successor of
// a name is sent as $gt (no NUL byte in a query).
func TestCatalogFind(t *testing.T) {
	for _, tc := range []struct {
		field, db, from, to string
		filter              string
		hint                string
	}{
		{fieldColl, "d", "", "_", `{"db": "d","coll": {"$gte": "","$lt": "_"},"deleted": false}`, "docs_collection"},
		{fieldColl, "d", "notes\x00", "", `{"db": "d","coll": {"$gt": "notes"},"deleted": false}`, "docs_collection"},
		{fieldColl, "d", "notes/n1/", "notes/n10", `{"db": "d","coll": {"$gte": "notes/n1/","$lt": "notes/n10"},"deleted": false}`, "docs_collection"},
		{fieldShape, "d", "`", "", `{"db": "d","shape": {"$gte": "` + "`" + `"},"deleted": false}`, "docs_shape"},
		{fieldDB, "", "alpha\x00", "", `{"db": {"$gt": "alpha"}}`, "docs_collection"},
	} {
		filter, opts := catalogFind(tc.field, tc.db, tc.from, tc.to)
		raw, err := bson.MarshalExtJSON(filter, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := compact(string(raw)); got != compact(tc.filter) {
			t.Errorf("catalogFind(%s, %q, %q) filter %s, want %s", tc.field, tc.from, tc.to, got, compact(tc.filter))
		}
		var o options.FindOneOptions
		for _, set := range opts.List() {
			if err := set(&o); err != nil {
				t.Fatal(err)
			}
		}
		if o.Hint != tc.hint {
			t.Errorf("%s hint %v, want %s", tc.field, o.Hint, tc.hint)
		}
		sort, ok := o.Sort.(bson.D)
		if !ok || len(sort) != 1 || sort[0].Key != tc.field || sort[0].Value != 1 {
			t.Errorf("%s sort %v, want {%s: 1}", tc.field, o.Sort, tc.field)
		}
		proj, ok := o.Projection.(bson.D)
		if !ok || len(proj) != 2 || proj[1].Key != tc.field {
			t.Errorf("%s projection %v", tc.field, o.Projection)
		}
	}
}

func compact(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			out = append(out, s[i])
		}
	}
	return string(out)
}
