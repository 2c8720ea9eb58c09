package server

import (
	"bytes"
	"strings"
	"testing"
)

// repeatSince copies a region of the buffer into the same buffer: right
// whether or not the write grows it.
func TestRepeatSince(t *testing.T) {
	for _, n := range []int{0, 1, 7, 64, 5000} {
		arr := strings.Repeat("x", n)
		for _, capacity := range []int{0, 16, 2*n + 64} {
			buf := bytes.NewBuffer(make([]byte, 0, capacity))
			buf.WriteString(`{"a":[`)
			start := buf.Len()
			buf.WriteString(arr)
			repeatSince(buf, start, `],"b":[`)
			buf.WriteString(`]}`)
			if want := `{"a":[` + arr + `],"b":[` + arr + `]}`; buf.String() != want {
				t.Fatalf("n=%d cap=%d: %q", n, capacity, buf.String())
			}
		}
	}
}
