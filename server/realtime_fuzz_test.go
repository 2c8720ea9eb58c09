package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/loomdb/loom/server"
)

// FuzzWSMessage sends arbitrary client messages over a real WebSocket
// connection: whatever the bytes, the server answers with a well-formed
// envelope (an error for anything it cannot use) or closes the connection
// with a close frame; it never panics, hangs or sends malformed JSON.
func FuzzWSMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"ping","id":"p"}`,
		`{"type":"auth","id":"a","payload":{"token":"x","database":"default"}}`,
		`{"type":"subscribe","id":"s","payload":{"query":{"collection":"rooms"},"sendSnapshot":true}}`,
		`{"type":"subscribe","id":"s","payload":{"query":{"collection":"rooms/*/msgs","filters":[{"field":"a","op":"in","value":[1,"x"]}]},"resumeToken":"12"}}`,
		`{"type":"subscribe","id":"s","payload":{"query":{"collection":"rooms"},"resumeToken":99999999999999999999}}`,
		`{"type":"unsubscribe","id":"s"}`,
		`{"type":"subscribe","payload":{"query":{}}}`,
		`{"type":"nope"}`,
		`[]`, `null`, `{"type":1}`, `{"id":{"x":1},"type":"ping"}`,
		`{"type":"subscribe","id":"s","payload":{"query":{"collection":"rooms"},"unknown":1}}`,
	} {
		f.Add([]byte(seed))
	}
	env := MustStartServer(f, MustOpenStore(f), server.Config{})
	env.MustDo(f, 201, "PUT", api+"/documents/rooms/r1", `{"doc":{"n":1}}`)
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, _, err := env.tryDialWS("", nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			return
		}
		// A ping after the fuzzed message proves the connection still
		// serves (or was closed cleanly).
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","id":"fuzz-done"}`))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			_, m, err := c.ReadMessage()
			if err != nil {
				if _, ok := err.(*websocket.CloseError); ok {
					return
				}
				t.Fatalf("after %q: read: %v", msg, err)
			}
			var env struct {
				ID   string          `json:"id"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(m, &env); err != nil || env.Type == "" {
				t.Fatalf("after %q: malformed server message %q (%v)", msg, m, err)
			}
			if env.Type == "pong" && env.ID == "fuzz-done" {
				return
			}
		}
	})
}
