package webhooks

import "testing"

// FuzzDecodeEvent: any delivery body decodes to an event with a document
// or to an error, never a panic.
func FuzzDecodeEvent(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1","type":"document.create","triggerId":"t","event":{"type":"create","path":"users/u/orch-chats/c/messages/m","id":"m","params":{"userId":"u"},"document":{"id":"m","path":"users/u/orch-chats/c/messages/m","version":1,"data":{"role":"user","n":1.5}},"before":null}}`,
		`{"event":{"path":"a/b","document":{}}}`,
		`{"event":{"path":"a/b","document":null}}`,
		`[]`, `null`, `{"event":{"params":{"a":1}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := decodeEvent(body)
		if err != nil {
			return
		}
		if ev.Doc == nil || ev.Doc.Data == nil || ev.Path == "" {
			t.Fatalf("decoded event without a document: %+v", ev)
		}
		_, _ = chatOf(ev.Path)
		_, _ = subAgentOf(ev.Path)
	})
}
