package app

import (
	"net"
	"reflect"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
)

// The engine gets the agent runtime's indexes, the configured ones and the
// trigger outbox's, each once.
func TestStoreIndexes(t *testing.T) {
	own := collections.Index{Collection: "rooms/*/messages", Fields: []string{"sender"}}
	cfg := config.Default()
	cfg.Indexes = []collections.Index{webhooks.Indexes[0], own}
	got := StoreIndexes(cfg)
	want := append(append(append([]collections.Index{}, webhooks.Indexes...), own), triggers.Indexes...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("indexes=%v, want %v", got, want)
	}
}

func TestSelfURL(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, "http://127.0.0.1:80"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1}, "http://[::1]:1"},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9}, "http://10.1.2.3:9"},
	} {
		if got := selfURL(tt.addr); got != tt.want {
			t.Errorf("selfURL(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
