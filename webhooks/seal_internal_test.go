package webhooks

import (
	"encoding/json"
	"testing"

	"github.com/loomdb/loom/collections"
)

// A document the runtime sealed verifies after a JSON round trip (what the
// API does to it), and not at another path or with a sealed field changed.
func TestSealer_RoundTrip(t *testing.T) {
	s := newSealer("whsec_test")
	fields := []string{"content", "seq", "toolCalls"}
	data := s.seal("a/b/c/d", map[string]any{
		"content": "bad \xff utf-8 <&>", "seq": int64(7), "other": "x",
		"toolCalls": []any{map[string]any{"id": "c1", "function": map[string]any{"name": "f", "arguments": "{}"}}},
	}, fields)
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	back, err := collections.DecodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	d := &collections.Document{Path: "a/b/c/d", Data: back}
	if !s.valid(d, fields) {
		t.Fatal("valid=false after a round trip, want true")
	}
	d.Data["other"] = "changed" // not sealed
	if !s.valid(d, fields) {
		t.Fatal("valid=false after an unsealed field changed, want true")
	}
	if moved := (&collections.Document{Path: "a/b/c/e", Data: back}); s.valid(moved, fields) {
		t.Fatal("valid=true at another path, want false")
	}
	d.Data["seq"] = json.Number("8")
	if s.valid(d, fields) {
		t.Fatal("valid=true after a sealed field changed, want false")
	}
	if other := newSealer("whsec_other"); other.valid(&collections.Document{Path: "a/b/c/d", Data: data}, fields) {
		t.Fatal("valid=true under another secret, want false")
	}
}
