package sqlite

import (
	"bytes"
	"context"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestRawReadsNonWireData: data a process stored as it is (a struct value
// encodes its fields out of key order) is not its own wire form; GetRaw and
// QueryRaw decode it, and every document is written out exactly as Get and
// Query write it. Wire-form data is served from the stored bytes.
func TestRawReadsNonWireData(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	ctx := context.Background()
	type unsorted struct{ B, A int }
	mustCommit(t, s,
		create("things/odd", map[string]any{"v": unsorted{B: 1, A: 2}, "s": "x"}),
		create("things/plain", map[string]any{"v": "<ok>", "n": 3}),
	)
	wire := func(d *collections.Document) string {
		var b bytes.Buffer
		if err := d.AppendJSON(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, p := range []string{"things/odd", "things/plain"} {
		d, err := s.Get(ctx, testDB, p)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := s.GetRaw(ctx, testDB, p)
		if err != nil {
			t.Fatal(err)
		}
		if wire(rd) != wire(d) {
			t.Errorf("GetRaw(%s) writes %s, Get %s", p, wire(rd), wire(d))
		}
		if raw := rd.Data == nil; raw != (p == "things/plain") {
			t.Errorf("GetRaw(%s): served from the stored bytes %v", p, raw)
		}
	}
	q := collections.Query{Collection: "things", Limit: 1}
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	for q.Limit > 0 {
		res, err := s.Query(ctx, testDB, q)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := s.QueryRaw(ctx, testDB, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw.Docs) != len(res.Docs) || raw.NextCursor != res.NextCursor {
			t.Fatalf("QueryRaw = %d docs, cursor %q; Query = %d, %q", len(raw.Docs), raw.NextCursor, len(res.Docs), res.NextCursor)
		}
		for i := range res.Docs {
			if wire(raw.Docs[i]) != wire(res.Docs[i]) {
				t.Errorf("QueryRaw writes %s, Query %s", wire(raw.Docs[i]), wire(res.Docs[i]))
			}
		}
		if res.NextCursor == "" {
			break
		}
		q.StartAfter = res.NextCursor
	}
}

// TestWriteResultsCarryStoredBytes: a create's, replace's and update's
// result carries the data bytes just stored as Raw, and writes out exactly
// as its Data encodes; a delete's result is encoded from Data.
func TestWriteResultsCarryStoredBytes(t *testing.T) {
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1})
	type unsorted struct{ B, A int }
	wire := func(d *collections.Document) string {
		var b bytes.Buffer
		if err := d.AppendJSON(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	steps := []struct {
		w   collections.Write
		raw bool
	}{
		{create("things/a", map[string]any{"v": unsorted{B: 1, A: 2}, "s": "<x>"}), true},
		{create("things/b", map[string]any{}), true}, // a fresh create with an empty body
		{collections.Write{Type: collections.WriteReplace, Path: "things/a", Data: map[string]any{"n": 1}}, true},
		{collections.Write{Type: collections.WriteUpdate, Path: "things/a", Data: map[string]any{"m": "y"}}, true},
		{collections.Write{Type: collections.WriteDelete, Path: "things/a"}, false},
	}
	for _, st := range steps {
		res := mustCommit(t, s, st.w)
		d := res[0].Doc
		if (d.Raw != nil) != st.raw {
			t.Errorf("%s %s: Raw %q, want set %v", st.w.Type, st.w.Path, d.Raw, st.raw)
		}
		if got, want := wire(d), wire(d.Clone()); got != want {
			t.Errorf("%s %s: result writes %s, its Data %s", st.w.Type, st.w.Path, got, want)
		}
	}
}
