package access

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/loomdb/loom/collections"
)

// A sealed cursor's length tells only a size bucket, not the length of the
// values it carries.
func TestCursorSealer_LengthRevealsOnlyABucket(t *testing.T) {
	cs, err := newCursorSealer(nil)
	if err != nil {
		t.Fatal(err)
	}
	ad := []byte("binding")
	lengths := map[int]bool{}
	for n := 1; n <= 100; n++ {
		c := strings.Repeat("x", n)
		s := cs.seal(c, ad)
		lengths[len(s)] = true
		if got, err := cs.open(s, ad); err != nil || got != c {
			t.Fatalf("open(seal(%d bytes))=%q, %v", n, got, err)
		}
	}
	if len(lengths) != 1 {
		t.Fatalf("cursors of 1..100 bytes have %d different lengths, want one", len(lengths))
	}
	// 127, 254, 4094, 8189: the length prefix and the cursor fill their
	// bucket exactly.
	for _, n := range []int{127, 254, 1000, 4094, 5000, 8189, 100000} {
		c := strings.Repeat("y", n)
		if got, err := cs.open(cs.seal(c, ad), ad); err != nil || got != c {
			t.Fatalf("round trip of %d bytes: %v", n, err)
		}
	}
}

// The binding separates every part of the query and the caller: no two of
// these share a binding.
func TestCursorBinding_Distinct(t *testing.T) {
	base := collections.Query{Collection: "a", OrderBy: []collections.Order{{Field: "n", Direction: "asc"}}}
	user := &Caller{Kind: "user", UID: "u1"}
	type variant struct {
		db     string
		caller *Caller
		q      collections.Query
	}
	with := func(f func(*collections.Query)) collections.Query {
		q := base
		q.OrderBy = append([]collections.Order(nil), base.OrderBy...)
		f(&q)
		return q
	}
	vs := []variant{
		{"default", user, base},
		{"other", user, base},
		{"default", &Caller{Kind: "user", UID: "u2"}, base},
		{"default", &Caller{Kind: "service-key", UID: "u1"}, base},
		{"default", AdminKey, base},
		{"default", Anonymous, base},
		{"default", user, with(func(q *collections.Query) { q.Collection = "b" })},
		{"default", user, with(func(q *collections.Query) { q.ShowDeleted = true })},
		{"default", user, with(func(q *collections.Query) { q.OrderBy[0].Direction = "desc" })},
		{"default", user, with(func(q *collections.Query) { q.OrderBy = nil })},
		{"default", user, with(func(q *collections.Query) {
			q.Filters = []collections.Filter{{Field: "n", Op: collections.OpEq, Value: "x"}}
		})},
		// As many filters, another value: a cursor of one filtered query
		// must not continue another.
		{"default", user, with(func(q *collections.Query) {
			q.Filters = []collections.Filter{{Field: "n", Op: collections.OpEq, Value: "y"}}
		})},
		// Length prefixes: moving a byte between parts changes the binding.
		{"defaul", &Caller{Kind: "tuser", UID: "u1"}, base},
	}
	seen := map[string]int{}
	for i, v := range vs {
		ad, err := cursorBinding(nil, v.db, v.caller, &v.q)
		if err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[string(ad)]; ok {
			t.Errorf("variants %d and %d share a binding", j, i)
		}
		seen[string(ad)] = i
	}
	// The limit and the cursor itself are not part of it.
	q := base
	q.Limit, q.StartAfter = 7, "x"
	a, _ := cursorBinding(nil, "default", user, &base)
	b, _ := cursorBinding(nil, "default", user, &q)
	if string(a) != string(b) {
		t.Error("the limit changes the binding")
	}
}

// A sealed plaintext whose length prefix claims more than it holds is
// ErrBadCursor, not a panic: only this node seals cursors, but open never
// trusts a length.
func TestCursorSealer_OpenRejectsBadLength(t *testing.T) {
	cs, err := newCursorSealer(nil)
	if err != nil {
		t.Fatal(err)
	}
	ad := []byte("binding")
	sealRaw := func(plain []byte) string {
		b := make([]byte, 1+chacha20poly1305.NonceSizeX, 1+chacha20poly1305.NonceSizeX+len(plain)+chacha20poly1305.Overhead)
		b[0] = cursorVersion
		rand.Read(b[1:])
		b = cs.aead.Seal(b, b[1:], plain, ad)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tt := range []struct {
		name  string
		plain []byte
	}{
		{"length one past the plaintext", append(binary.AppendUvarint(nil, 128), make([]byte, 126)...)},
		{"length far past the plaintext", append(binary.AppendUvarint(nil, 1<<40), make([]byte, 120)...)},
		{"truncated length prefix", []byte{0x80}},
		{"empty plaintext", nil},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: open panics: %v", tt.name, r)
				}
			}()
			if got, err := cs.open(sealRaw(tt.plain), ad); !errors.Is(err, ErrBadCursor) {
				t.Errorf("%s: open returned %d bytes, %v; want ErrBadCursor", tt.name, len(got), err)
			}
		}()
	}
	// The same framing with an honest length opens.
	if got, err := cs.open(sealRaw(append(binary.AppendUvarint(nil, 3), "abc\x00\x00"...)), ad); err != nil || got != "abc" {
		t.Fatalf("honest length: open=%q, %v; want abc", got, err)
	}
}

// padLen's buckets: powers of two from minCursorPad up to cursorPadStep,
// then whole multiples of cursorPadStep, each the smallest that holds n.
func TestPadLen(t *testing.T) {
	for _, tt := range []struct{ n, want int }{
		{0, 128}, {1, 128}, {128, 128}, {129, 256}, {256, 256}, {257, 512},
		{2049, 4096}, {4095, 4096}, {4096, 4096}, {4097, 8192}, {8192, 8192}, {8193, 12288},
	} {
		if got := padLen(tt.n); got != tt.want {
			t.Errorf("padLen(%d)=%d, want %d", tt.n, got, tt.want)
		}
	}
}

// BenchmarkQueryCursor is what a paged query pays for its cursor: the
// binding, sealing the next cursor and opening the one it was given.
func BenchmarkQueryCursor(b *testing.B) {
	s := &Service{}
	var err error
	if s.cursors, err = newCursorSealer(nil); err != nil {
		b.Fatal(err)
	}
	caller := &Caller{Kind: "user", UID: "01a20ca1-cb2c-7213-9f68-5ae51c7a46d8"}
	q := collections.Query{
		Collection: "users/*/notes",
		Filters:    []collections.Filter{{Field: "status", Op: collections.OpEq, Value: "open"}},
		OrderBy:    []collections.Order{{Field: "createdAt", Direction: "desc"}},
		Limit:      50,
	}
	d := &collections.Document{Path: "users/" + caller.UID + "/notes/n1", Collection: "users/" + caller.UID + "/notes", ID: "n1", CreatedAt: 1795508259632}
	engine := collections.MakeCursor(q.OrderBy, d)
	b.ReportAllocs()
	for b.Loop() {
		sealed, err := s.sealQueryCursor("default", caller, &q, engine)
		if err != nil {
			b.Fatal(err)
		}
		next := q
		next.StartAfter = sealed
		if err := s.openQueryCursor("default", caller, &next); err != nil || next.StartAfter != engine {
			b.Fatal(err)
		}
	}
}
