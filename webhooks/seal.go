package webhooks

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/loomdb/loom/collections"
)

// sealField is the field where the runtime keeps its seal on a document it
// wrote and will act on later.
const sealField = "runtimeSeal"

// The fields each kind of runtime document is sealed over: what the runtime
// acts on when it reads the document back. Mutable state (status, counters,
// results) is not sealed; the runtime treats it defensively instead.
var (
	chatMessageSeal = []string{"role", "content", "replyTo", "plan", "taskIds", "taskId"}
	taskSeal        = []string{"type", "name", "instruction", "triggerMessageId"}
	subAgentSeal    = []string{"taskId", "role"}
	subMessageSeal  = []string{"role", "content", "seq", "toolCalls", "toolCallId", "name", "inReplyTo"}
	toolCallSeal    = []string{"toolName", "argsJson", "callId", "assistantSeq", "index"}
)

// sealer marks the documents the runtime creates in users' chats so that it
// acts only on its own. The security rules keep users from writing them
// (rules.DefaultSource), but a rules file may be more permissive than the
// runtime can afford: a forged task would start a sub-agent, a forged tool
// call would run any tool. The seal is an HMAC, keyed from the webhook
// secret, over the document's path and the fields the runtime acts on, so a
// user who can write the document still cannot produce one the runtime
// accepts, nor move a sealed one to another path.
type sealer struct{ key []byte }

func newSealer(secret string) sealer {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("loom agent runtime: document seal v1"))
	return sealer{key: m.Sum(nil)}
}

// sign returns the seal of data at path over fields.
func (s sealer) sign(path string, data map[string]any, fields []string) string {
	vals := make([]any, len(fields))
	for i, f := range fields {
		vals[i] = data[f]
	}
	b, err := canonicalJSON(vals)
	if err != nil {
		return "" // never verifies
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(path))
	m.Write([]byte{0})
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// seal adds the seal to data (which it returns) for a create at path.
func (s sealer) seal(path string, data map[string]any, fields []string) map[string]any {
	data[sealField] = s.sign(path, data, fields)
	return data
}

// valid reports whether d carries the runtime's seal over fields.
func (s sealer) valid(d *collections.Document, fields []string) bool {
	if d == nil {
		return false
	}
	got, _ := d.Data[sealField].(string)
	want := s.sign(d.Path, d.Data, fields)
	return got != "" && want != "" && hmac.Equal([]byte(got), []byte(want))
}

// canonicalJSON encodes v so that the data the runtime wrote and the same
// data read back over the API encode alike: json.Marshal sorts map keys
// and writes a json.Number as its text, and one decode-encode round trip
// turns what the store would change (invalid UTF-8 becomes U+FFFD) into
// what it stores.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var back any
	if err := dec.Decode(&back); err != nil {
		return nil, err
	}
	return json.Marshal(back)
}
