package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/loomdb/loom/server"
)

// cursorQueries are the queries FuzzSealedCursor presents a cursor to; the
// cursor was issued for the first.
var cursorQueries = []string{
	`{"collection":"rooms","orderBy":[{"field":"n"}],"limit":1,"startAfter":%s}`,
	`{"collection":"rooms","orderBy":[{"field":"n","direction":"desc"}],"limit":1,"startAfter":%s}`,
	`{"collection":"rooms","orderBy":[{"field":"n"}],"filters":[{"field":"n","op":">","value":0}],"limit":1,"startAfter":%s}`,
	`{"collection":"rooms","orderBy":[{"field":"n"}],"showDeleted":true,"limit":1,"startAfter":%s}`,
	`{"collection":"*","orderBy":[{"field":"n"}],"limit":1,"startAfter":%s}`,
}

// FuzzSealedCursor: whatever string is presented as startAfter, to whatever
// query, the server never panics or fails with a 5xx; it continues only
// with the exact cursor it issued for that exact query, and refuses
// everything else with 400 INVALID_QUERY.
func FuzzSealedCursor(f *testing.F) {
	st := MustOpenStore(f)
	srv, err := server.New(st, server.Config{AdminKey: testAdminKey, RateLimit: -1})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	do := func(method, url, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, url, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := range 3 {
		if rec := do("PUT", fmt.Sprintf("%s/documents/rooms/r%d", api, i), fmt.Sprintf(`{"doc":{"n":%d}}`, i+1)); rec.Code != http.StatusCreated {
			f.Fatalf("seed: %d %s", rec.Code, rec.Body)
		}
	}
	var first struct {
		NextCursor string `json:"nextCursor"`
	}
	rec := do("POST", api+"/query", `{"collection":"rooms","orderBy":[{"field":"n"}],"limit":1}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &first); err != nil || first.NextCursor == "" {
		f.Fatalf("first page: %s", rec.Body)
	}
	genuine, err := base64.RawURLEncoding.DecodeString(first.NextCursor)
	if err != nil {
		f.Fatalf("cursor %q is not base64url", first.NextCursor)
	}

	f.Add(uint8(0), first.NextCursor)
	f.Add(uint8(1), first.NextCursor)
	f.Add(uint8(4), first.NextCursor)
	f.Add(uint8(0), first.NextCursor[:len(first.NextCursor)-1])
	f.Add(uint8(0), first.NextCursor+"A")
	f.Add(uint8(0), "")
	f.Add(uint8(0), "eyJmIjpbIm4gYXNjIl0sInYiOlt7IngiOjF9XSwicCI6InJvb21zL3IwIn0") // an engine cursor
	for _, i := range []int{0, 1, 30, len(genuine) - 1} {
		b := slices.Clone(genuine)
		b[i] ^= 0x80
		f.Add(uint8(0), base64.RawURLEncoding.EncodeToString(b))
	}

	f.Fuzz(func(t *testing.T, variant uint8, cursor string) {
		v := int(variant) % len(cursorQueries)
		body, err := json.Marshal(cursor)
		if err != nil {
			return
		}
		rec := do("POST", api+"/query", fmt.Sprintf(cursorQueries[v], body))
		if cursor == "" {
			if rec.Code != http.StatusOK {
				t.Fatalf("no cursor: %d %s", rec.Code, rec.Body)
			}
			return
		}
		raw, decErr := base64.RawURLEncoding.DecodeString(cursor)
		authentic := decErr == nil && bytes.Equal(raw, genuine) && v == 0
		switch {
		case rec.Code >= 500:
			t.Fatalf("variant %d cursor %q: %d %s", v, cursor, rec.Code, rec.Body)
		case authentic:
			if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"id":"r1"`)) {
				t.Fatalf("the genuine cursor: %d %s, want the page after r0", rec.Code, rec.Body)
			}
		default:
			var e struct{ Code string }
			if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != "INVALID_QUERY" {
				t.Fatalf("variant %d cursor %q: %d %s, want 400 INVALID_QUERY", v, cursor, rec.Code, rec.Body)
			}
		}
	})
}
