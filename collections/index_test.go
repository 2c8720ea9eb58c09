package collections_test

import (
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestIndex_Validate(t *testing.T) {
	for _, tc := range []struct {
		ix collections.Index
		ok bool
	}{
		{collections.Index{Collection: "users/*/orch-chats/*/tasks", Fields: []string{"chatId"}}, true},
		{collections.Index{Collection: "rooms", Fields: []string{"a", "b.c", "createdAt"}}, true},
		{collections.Index{Collection: "rooms", Fields: nil}, false},
		{collections.Index{Collection: "rooms", Fields: []string{""}}, false},
		{collections.Index{Collection: "rooms", Fields: []string{"a..b"}}, false},
		{collections.Index{Collection: "rooms/r1", Fields: []string{"a"}}, false},
		{collections.Index{Collection: "", Fields: []string{"a"}}, false},
	} {
		err := tc.ix.Validate()
		if got := err == nil; got != tc.ok {
			t.Errorf("Validate(%+v) ok=%v (err %v), want %v", tc.ix, got, err, tc.ok)
		}
	}
}
