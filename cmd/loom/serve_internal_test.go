package main

import (
	"net"
	"testing"
)

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
