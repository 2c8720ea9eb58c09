package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/loomdb/loom/server"
)

// fuzzTargets are the routes FuzzDocumentBody sends bodies to.
var fuzzTargets = []struct{ method, url string }{
	{"POST", api + "/documents/rooms"},
	{"PUT", api + "/documents/rooms/f1"},
	{"PATCH", api + "/documents/rooms/r1"},
	{"DELETE", api + "/documents/rooms/r2"},
	{"POST", api + "/batch"},
	{"POST", api + "/query"},
}

// FuzzDocumentBody sends arbitrary bodies to the write routes (and batch and
// query): whatever the bytes, the answer is never a 5xx or a panic, and every
// error is the JSON error shape.
func FuzzDocumentBody(f *testing.F) {
	for _, table := range [][]scenario{createScenarios, replaceScenarios, updateScenarios, deleteScenarios, batchScenarios, queryScenarios} {
		for _, sc := range table {
			if sc.Body == "" || len(sc.Body) > 64<<10 {
				continue
			}
			for i, tg := range fuzzTargets {
				if tg.method == sc.Method {
					f.Add(uint8(i), []byte(sc.Body))
				}
			}
		}
	}
	f.Add(uint8(0), []byte(`{"a":`+string(bytes.Repeat([]byte("["), 40))))
	f.Add(uint8(1), []byte("{\"doc\":{\"\\u0000\":\"\\ud800\"}}"))
	f.Add(uint8(2), []byte(`{"doc":{"a.b.":1}}`))
	f.Add(uint8(4), []byte(`{"writes":[{"type":"create","path":"x/y","data":{"id":"z"}}]}`))

	st := MustOpenStore(f)
	srv, err := server.New(st, server.Config{AdminKey: testAdminKey, MaxRequestBytes: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	for _, seed := range []string{`{"doc":{"name":"general","n":1}}`} {
		req := httptest.NewRequest("PUT", api+"/documents/rooms/r1", bytes.NewReader([]byte(seed)))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	f.Fuzz(func(t *testing.T, target uint8, body []byte) {
		tg := fuzzTargets[int(target)%len(fuzzTargets)]
		req := httptest.NewRequest(tg.method, tg.url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: status %d %s", tg.method, tg.url, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("%s %s %q: error body %s is not the error shape", tg.method, tg.url, body, rec.Body.Bytes())
			}
		} else if rec.Code != http.StatusNoContent && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s %q: success body %s is not JSON", tg.method, tg.url, body, rec.Body.Bytes())
		}
	})
}
