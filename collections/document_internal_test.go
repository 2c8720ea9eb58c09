package collections

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzWriteJSONString: the envelope's strings are written exactly as
// json.Marshal writes them.
func FuzzWriteJSONString(f *testing.F) {
	for _, s := range []string{"", "m1", "rooms/r1/messages", `a"b`, `a\b`, "<&>", "a<b", "a>b", "a&b", "tab\there", "\x00", "\x7f", "é", "\u2028", "\xff", "a b~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		writeJSONString(&buf, s)
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("writeJSONString(%q)=%s, json.Marshal=%s", s, buf.Bytes(), want)
		}
	})
}
