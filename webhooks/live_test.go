package webhooks_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The user watches the chat live over WebSocket, with their own token,
// while the agents work: every step the agents write into the chat
// arrives as an event, ending with the answer.
func TestAgents_ChatIsLiveOverWebSocket(t *testing.T) {
	s := startStack(t, stackOpts{})
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/realtime/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(m map[string]any) {
		if err := c.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"id": "a", "type": "auth", "payload": map[string]any{"token": s.token}})
	send(map[string]any{"id": "chat", "type": "subscribe", "payload": map[string]any{"query": map[string]any{"collection": s.chat("live") + "/messages"}}})
	// Changes after the subscription's ack are delivered: wait for it.
	for {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, raw, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for the subscribe ack: %v", err)
		}
		if strings.Contains(string(raw), `"subscribe_ack"`) {
			break
		}
	}
	s.say("live", "m1", "What is 6*7?")

	var seen []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		_ = c.SetReadDeadline(deadline)
		_, raw, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v (events so far: %v)\n%s", err, seen, s.dump())
		}
		var m struct {
			Type    string `json:"type"`
			Payload struct {
				Delta struct {
					Document map[string]any `json:"document"`
				} `json:"delta"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type == "error" {
			t.Fatalf("server error: %s", raw)
		}
		if m.Type != "event" || m.Payload.Delta.Document == nil {
			continue
		}
		id, _ := m.Payload.Delta.Document["id"].(string)
		seen = append(seen, id)
		if id == "m1-t0-result" {
			if c, _ := m.Payload.Delta.Document["content"].(string); !strings.Contains(c, "42") {
				t.Fatalf("answer %v", m.Payload.Delta.Document)
			}
			break
		}
	}
	if len(seen) < 3 || seen[0] != "m1" {
		t.Fatalf("events %v: want the user message, the agents' messages, then the answer", seen)
	}
}
