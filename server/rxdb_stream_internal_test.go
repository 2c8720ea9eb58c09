package server

import (
	"testing"

	"github.com/loomdb/loom/collections"
)

// A document changed twice in one pullStream batch is sent once, in its
// later state, at that state's place: RxDB bulk-writes a batch, which must
// not name a document twice, and a pull would return it there.
func TestRxDBStreamBatch_OneStatePerDocument(t *testing.T) {
	doc := func(id string, seq int64) *collections.Document {
		return &collections.Document{ID: id, Seq: seq}
	}
	var b rxdbStreamBatch
	for _, d := range []*collections.Document{doc("a", 1), doc("b", 2), doc("a", 3), doc("c", 4), doc("b", 5)} {
		b.add(d)
	}
	got := b.documents()
	want := []struct {
		id  string
		seq int64
	}{{"a", 3}, {"c", 4}, {"b", 5}}
	if len(got) != len(want) || b.n != len(want) {
		t.Fatalf("documents=%d (n=%d), want %d", len(got), b.n, len(want))
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Seq != w.seq {
			t.Fatalf("documents[%d]=(%s,%d), want (%s,%d)", i, got[i].ID, got[i].Seq, w.id, w.seq)
		}
	}
}

// rxdbCursor moves past hidden documents without naming one.
func TestRxDBCursor_Examine(t *testing.T) {
	c := rxdbCursor{next: collections.Checkpoint{Seq: 1}}
	steps := []struct {
		id       string
		seq      int64
		readable bool
		want     collections.Checkpoint
	}{
		{"a", 2, true, collections.Checkpoint{Seq: 2, ID: "a"}},
		{"b", 2, false, collections.Checkpoint{Seq: 2, ID: "a"}},
		{"c", 3, false, collections.Checkpoint{Seq: 3}},
		{"d", 4, true, collections.Checkpoint{Seq: 4, ID: "d"}},
	}
	for _, s := range steps {
		c.examine(&collections.Document{ID: s.id, Seq: s.seq}, s.readable)
		if c.next != s.want {
			t.Fatalf("after (%s,%d,%v): next=%+v, want %+v", s.id, s.seq, s.readable, c.next, s.want)
		}
	}
}

// A document changed again and again fills a batch like distinct documents
// do: the batch is sent after DefaultRxDBLimit states, not held (and grown)
// for as long as the changes keep coming.
func TestRxDBStreamBatch_FullCountsReplacedStates(t *testing.T) {
	var b rxdbStreamBatch
	for i := range DefaultRxDBLimit {
		if b.full() {
			t.Fatalf("full after %d states", i)
		}
		b.add(&collections.Document{ID: "hot", Seq: int64(i + 1)})
	}
	if !b.full() {
		t.Fatalf("not full after %d states of one document (n=%d, held=%d)", DefaultRxDBLimit, b.n, len(b.docs))
	}
	if got := b.documents(); len(got) != 1 || got[0].Seq != DefaultRxDBLimit {
		t.Fatalf("documents=%d, want the last state only", len(got))
	}
}
