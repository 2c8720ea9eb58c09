package rules_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/loomdb/loom/rules"
)

// BenchmarkAllow measures one decision against the default rules.
func BenchmarkAllow(b *testing.B) {
	s := rules.Default()
	ctx := context.Background()
	cases := []struct {
		name string
		req  rules.Request
		want bool
	}{
		{"owner", rules.Request{Auth: alice, Op: rules.OpGet, Path: "users/alice/notes/n1",
			Existing: map[string]any{"title": "t", "n": json.Number("3")}}, true},
		{"other", rules.Request{Auth: bob, Op: rules.OpUpdate, Path: "users/alice/notes/n1",
			Resource: map[string]any{"title": "t"}, Existing: map[string]any{"title": "t"}}, false},
		{"anonymous", rules.Request{Op: rules.OpList, Path: "users/alice/notes/n1"}, false},
		{"nomatch", rules.Request{Auth: alice, Op: rules.OpGet, Path: "posts/p1"}, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ok, err := s.Allow(ctx, c.req, nil)
				if err != nil || ok != c.want {
					b.Fatalf("Allow=%v, %v; want %v", ok, err, c.want)
				}
			}
		})
	}
}
