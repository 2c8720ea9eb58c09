package access

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/loomdb/loom/collections"
)

// Query cursors. The engine's cursor (collections.MakeCursor) is its own
// continuation: the order values and path of the last document it examined,
// which under security rules is often a document the caller may not read.
// So a client never sees it. The Service seals it with an AEAD under the
// cursor key; the additional data binds the sealed cursor to the database, the
// normalized query (collection, filters, orderBy, showDeleted — not limit)
// and the caller (credential kind + uid). A client therefore gets an opaque
// string that continues exactly that query for that caller and nothing else:
// a forged, tampered, replayed-by-someone-else or reused-for-another-query
// cursor fails authentication and is ErrBadCursor (400 INVALID_QUERY on the
// wire), which says nothing about why.
//
// XChaCha20-Poly1305 rather than AES-GCM: the key is long-lived and shared by
// every node, and its 192-bit random nonces stay safe for any number of
// cursors (AES-GCM's 96-bit random nonces are good for about 2^32 per key).
// The plaintext is padded to a size bucket so the cursor's length does not
// tell the length of a value it carries.

// MinCursorKeyBytes is the shortest accepted Config.CursorKey.
const MinCursorKeyBytes = 32

const (
	cursorVersion  = 1
	cursorKeyInfo  = "loom query cursor v1"
	cursorOverhead = 1 + chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead
	// minCursorPad and cursorPadStep bound what a sealed cursor's length
	// reveals: powers of two from 128 bytes up to 4 KiB, then whole 4 KiB
	// steps (only huge order values get there).
	minCursorPad  = 128
	cursorPadStep = 4096
)

// cursorSealer seals and opens client cursors.
type cursorSealer struct {
	aead cipher.AEAD
	// bufs holds the buffers a seal or open works in, so that a paged
	// query pays one allocation for its cursor.
	bufs sync.Pool
}

// maxPooledBuf keeps one cursor over huge order values from pinning memory
// in the pool.
const maxPooledBuf = 1 << 20

func (cs *cursorSealer) getBuf() *bytes.Buffer {
	if b, ok := cs.bufs.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

func (cs *cursorSealer) putBuf(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuf {
		return
	}
	b.Reset()
	cs.bufs.Put(b)
}

// newCursorSealer derives the sealing key from secret (at least
// MinCursorKeyBytes; nil: a random key, so cursors last as long as the
// process and work on this node only).
func newCursorSealer(secret []byte) (*cursorSealer, error) {
	if secret == nil {
		secret = make([]byte, MinCursorKeyBytes)
		rand.Read(secret) // never fails (crypto/rand crashes the program instead)
	}
	if len(secret) < MinCursorKeyBytes {
		return nil, fmt.Errorf("cursor key holds %d bytes, need at least %d", len(secret), MinCursorKeyBytes)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, cursorKeyInfo, chacha20poly1305.KeySize)
	if err != nil {
		return nil, fmt.Errorf("derive cursor key: %w", err)
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("cursor cipher: %w", err)
	}
	return &cursorSealer{aead: aead}, nil
}

// padLen is the padded plaintext size for n bytes.
func padLen(n int) int {
	if n > cursorPadStep {
		return (n + cursorPadStep - 1) / cursorPadStep * cursorPadStep
	}
	p := minCursorPad
	for p < n {
		p *= 2
	}
	return p
}

// seal returns the client form of the engine cursor c under binding ad:
// base64url(version, nonce, sealed padded plaintext). It encrypts in place
// in a pooled buffer: one allocation, the returned string.
func (cs *cursorSealer) seal(c string, ad []byte) string {
	const pre = 1 + chacha20poly1305.NonceSizeX
	var head [binary.MaxVarintLen64]byte
	h := binary.PutUvarint(head[:], uint64(len(c)))
	n := padLen(h + len(c))
	buf := cs.getBuf()
	defer cs.putBuf(buf)
	buf.Grow(pre + n + chacha20poly1305.Overhead + base64.RawURLEncoding.EncodedLen(pre+n+chacha20poly1305.Overhead))
	b := buf.AvailableBuffer()[:pre+n]
	b[0] = cursorVersion
	rand.Read(b[1:pre]) // never fails
	plain := b[pre:]
	m := copy(plain, head[:h])
	m += copy(plain[m:], c)
	clear(plain[m:]) // the pooled buffer's old bytes must not be sealed in
	b = cs.aead.Seal(b[:pre], b[1:pre], plain, ad)
	return string(base64.RawURLEncoding.AppendEncode(b[len(b):], b))
}

// open returns the engine cursor sealed in s under binding ad, or
// ErrBadCursor.
func (cs *cursorSealer) open(s string, ad []byte) (string, error) {
	const pre = 1 + chacha20poly1305.NonceSizeX
	buf := cs.getBuf()
	defer cs.putBuf(buf)
	buf.Grow(base64.RawURLEncoding.DecodedLen(len(s)))
	raw, err := base64.RawURLEncoding.AppendDecode(buf.AvailableBuffer(), []byte(s))
	if err != nil || len(raw) < cursorOverhead || raw[0] != cursorVersion {
		return "", ErrBadCursor
	}
	sealed := raw[pre:]
	plain, err := cs.aead.Open(sealed[:0], raw[1:pre], sealed, ad)
	if err != nil {
		return "", ErrBadCursor
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > uint64(len(plain)-k) {
		return "", ErrBadCursor // sealed by us, so never; but never trust a length
	}
	return string(plain[k : k+int(n)]), nil
}

// cursorBinding appends the additional data of a cursor for caller's query
// q on db to buf: every part length-prefixed, so no two bindings share an
// encoding.
func cursorBinding(buf []byte, db string, caller *Caller, q *collections.Query) ([]byte, error) {
	str := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	buf = append(buf, cursorVersion)
	str(db)
	str(caller.Kind)
	str(caller.UID)
	str(q.Collection)
	if q.ShowDeleted {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(q.OrderBy)))
	for _, o := range q.OrderBy {
		str(o.Field)
		str(o.Direction)
	}
	buf = binary.AppendUvarint(buf, uint64(len(q.Filters)))
	if len(q.Filters) > 0 {
		// Normalized filters re-encode deterministically (object keys
		// sorted, numbers as sent).
		b, err := json.Marshal(q.Filters)
		if err != nil {
			return nil, fmt.Errorf("cursor binding: %w", err)
		}
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		buf = append(buf, b...)
	}
	return buf, nil
}

// openQueryCursor normalizes a decoded client query q and replaces
// q.StartAfter, a sealed client cursor, by the engine cursor it holds. The
// binding is computed from the normalized query, so "contains" and
// "array-contains" or a missing and an "asc" direction are the same query.
func (s *Service) openQueryCursor(db string, caller *Caller, q *collections.Query) error {
	sealed := q.StartAfter
	q.StartAfter = ""
	if err := q.Normalize(); err != nil {
		return err
	}
	if sealed == "" {
		return nil
	}
	buf := s.cursors.getBuf()
	defer s.cursors.putBuf(buf)
	ad, err := cursorBinding(buf.AvailableBuffer(), db, caller, q)
	if err != nil {
		return err
	}
	c, err := s.cursors.open(sealed, ad)
	if err != nil {
		return err
	}
	q.StartAfter = c
	return nil
}

// sealQueryCursor returns the client form of the engine cursor next for
// caller's normalized query q on db ("" stays "").
func (s *Service) sealQueryCursor(db string, caller *Caller, q *collections.Query, next string) (string, error) {
	if next == "" {
		return "", nil
	}
	buf := s.cursors.getBuf()
	defer s.cursors.putBuf(buf)
	ad, err := cursorBinding(buf.AvailableBuffer(), db, caller, q)
	if err != nil {
		return "", err
	}
	return s.cursors.seal(next, ad), nil
}
