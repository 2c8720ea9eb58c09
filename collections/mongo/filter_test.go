package mongo

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/loomdb/loom/collections"
)

// rejectedChange needs no server: it decodes a stored change's header and
// asks want, and a change it rejects carries the header only.
func TestRejectedChange(t *testing.T) {
	rec := changeRecord{Seq: 42, DB: "app", Op: "update", Path: "posts/p1", Time: 1700,
		Before: &snapshot{Version: 1, CreatedAt: 10, UpdatedAt: 11, Seq: 41, Data: `{"a":1}`},
		After:  snapshot{Version: 2, CreatedAt: 10, Data: `{"a":2}`}}
	raw, err := bson.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	reject := func(db string, op collections.ChangeOp, path string) bool {
		asked = append(asked, db+" "+string(op)+" "+path)
		return false
	}
	c, rejected, err := rejectedChange(raw, reject)
	if err != nil || !rejected {
		t.Fatalf("rejectedChange(reject) = %v, %v", rejected, err)
	}
	want := collections.Change{Seq: 42, DB: "app", Op: collections.OpUpdate, Path: "posts/p1", Time: 1700}
	if c != want {
		t.Errorf("rejected change = %+v, want %+v", c, want)
	}
	if len(asked) != 1 || asked[0] != "app update posts/p1" {
		t.Errorf("want asked %q, want once about app update posts/p1", asked)
	}
	accept := func(string, collections.ChangeOp, string) bool { return true }
	for name, w := range map[string]collections.ChangeWant{"accept": accept, "nil": nil} {
		if _, rejected, err := rejectedChange(raw, w); err != nil || rejected {
			t.Errorf("rejectedChange(%s) = %v, %v; want the whole record decoded", name, rejected, err)
		}
	}
	if _, _, err := rejectedChange(bson.Raw{1, 2, 3}, reject); err == nil {
		t.Error("rejectedChange of a corrupt record: no error")
	}
}
