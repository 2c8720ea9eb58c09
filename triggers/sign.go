package triggers

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// secretPrefix starts a Standard Webhooks symmetric secret.
const secretPrefix = "whsec_"

// NewSecret returns a fresh Standard Webhooks secret (32 random bytes).
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// secretKey decodes a whsec_ secret to its HMAC key.
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || !strings.HasPrefix(secret, secretPrefix) {
		return nil, fmt.Errorf("secret is not whsec_<base64>")
	}
	return key, nil
}

// sign returns the webhook-signature header value: one "v1,<base64>"
// signature per key, space-separated (several during a secret rotation).
// The signed content is "<id>.<timestamp>.<body>" (Standard Webhooks).
func sign(keys [][]byte, id string, ts int64, body []byte) string {
	var sb strings.Builder
	for i, k := range keys {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(id))
		m.Write([]byte{'.'})
		m.Write(strconv.AppendInt(nil, ts, 10))
		m.Write([]byte{'.'})
		m.Write(body)
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("v1,")
		sb.WriteString(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return sb.String()
}
