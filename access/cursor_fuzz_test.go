package access_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
)

// cursorQueries are the queries FuzzSealedCursor presents a cursor to; the
// cursor was issued for the first.
var cursorQueries = []collections.Query{
	{Collection: "rooms", OrderBy: []collections.Order{{Field: "n"}}, Limit: 1},
	{Collection: "rooms", OrderBy: []collections.Order{{Field: "n", Direction: "desc"}}, Limit: 1},
	{Collection: "rooms", OrderBy: []collections.Order{{Field: "n"}}, Filters: []collections.Filter{{Field: "n", Op: collections.OpGt, Value: json.Number("0")}}, Limit: 1},
	{Collection: "rooms", OrderBy: []collections.Order{{Field: "n"}}, ShowDeleted: true, Limit: 1},
	{Collection: "*", OrderBy: []collections.Order{{Field: "n"}}, Limit: 1},
}

// FuzzSealedCursor: whatever string is presented as startAfter, to whatever
// query, Query never panics or fails with anything but ErrBadCursor (the
// server's 400 INVALID_QUERY); it continues only with the exact cursor it
// issued for that exact query.
func FuzzSealedCursor(f *testing.F) {
	ctx := context.Background()
	st := mustOpenStore(f)
	svc, err := access.New(access.Config{Store: st})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		mustCommit(f, st, collections.Write{Type: collections.WriteCreate, Path: fmt.Sprintf("rooms/r%d", i), Data: map[string]any{"n": i + 1}})
	}
	first, err := svc.Query(ctx, access.AdminKey, "default", cloneQuery(cursorQueries[0]))
	if err != nil || first.NextCursor == "" {
		f.Fatalf("first page: %+v %v", first, err)
	}
	genuine, err := base64.RawURLEncoding.DecodeString(first.NextCursor)
	if err != nil {
		f.Fatalf("cursor %q is not base64url", first.NextCursor)
	}

	f.Add(uint8(0), first.NextCursor)
	f.Add(uint8(1), first.NextCursor)
	f.Add(uint8(4), first.NextCursor)
	f.Add(uint8(0), first.NextCursor[:len(first.NextCursor)-1])
	f.Add(uint8(0), first.NextCursor+"A")
	f.Add(uint8(0), "")
	f.Add(uint8(0), "eyJmIjpbIm4gYXNjIl0sInYiOlt7IngiOjF9XSwicCI6InJvb21zL3IwIn0") // an engine cursor
	for _, i := range []int{0, 1, 30, len(genuine) - 1} {
		b := slices.Clone(genuine)
		b[i] ^= 0x80
		f.Add(uint8(0), base64.RawURLEncoding.EncodeToString(b))
	}

	f.Fuzz(func(t *testing.T, variant uint8, cursor string) {
		v := int(variant) % len(cursorQueries)
		q := cloneQuery(cursorQueries[v])
		q.StartAfter = cursor
		res, err := svc.Query(ctx, access.AdminKey, "default", q)
		if cursor == "" {
			if err != nil {
				t.Fatalf("no cursor: %v", err)
			}
			return
		}
		raw, decErr := base64.RawURLEncoding.DecodeString(cursor)
		authentic := decErr == nil && bytes.Equal(raw, genuine) && v == 0
		switch {
		case authentic:
			if err != nil || len(res.Docs) != 1 || res.Docs[0].ID != "r1" {
				t.Fatalf("the genuine cursor: %+v %v, want the page after r0", res.Docs, err)
			}
		case !errors.Is(err, access.ErrBadCursor):
			t.Fatalf("variant %d cursor %q: err=%v, want ErrBadCursor", v, cursor, err)
		}
	})
}

// cloneQuery copies q's slices: Query normalizes its argument in place.
func cloneQuery(q collections.Query) collections.Query {
	q.OrderBy = slices.Clone(q.OrderBy)
	q.Filters = slices.Clone(q.Filters)
	return q
}
