package storetest

import (
	"bytes"
	"errors"
	"reflect"

	"github.com/loomdb/loom/collections"
)

// An engine that is a collections.RawReader answers every Get and Query of
// the suite a second time through GetRaw and QueryRaw, and the answers must
// be the same: the same error, the same cursor, the same documents with
// the same envelope, and the same bytes from AppendJSON as the decoded
// document gives. So every query operator on random data checks the raw
// path too. Only harnesses with raw set compare (no concurrent writes).

// rawReader is the engine as a RawReader when this harness compares raw
// reads, else nil.
func (h *harness) rawReader() collections.RawReader {
	if rr, ok := h.s.(collections.RawReader); ok && h.raw {
		return rr
	}
	return nil
}

// checkGetRaw compares GetRaw(db, path) with Get's answer d, err.
func (h *harness) checkGetRaw(db, path string, d *collections.Document, err error) {
	h.t.Helper()
	rr := h.rawReader()
	if rr == nil {
		return
	}
	ctx, cancel := ctxT()
	defer cancel()
	rd, rerr := rr.GetRaw(ctx, db, path)
	if (err == nil) != (rerr == nil) || errors.Is(err, collections.ErrNotFound) != errors.Is(rerr, collections.ErrNotFound) {
		h.t.Fatalf("GetRaw(%s, %s) = %v, Get = %v", db, path, rerr, err)
	}
	if err == nil {
		h.sameWire("GetRaw "+path, d, rd)
	}
}

// checkQueryRaw compares QueryRaw(db, q) with Query's answer res, err.
func (h *harness) checkQueryRaw(db string, q collections.Query, res collections.QueryResult, err error) {
	h.t.Helper()
	rr := h.rawReader()
	if rr == nil {
		return
	}
	ctx, cancel := ctxT()
	defer cancel()
	raw, rerr := rr.QueryRaw(ctx, db, q)
	if (err == nil) != (rerr == nil) {
		h.t.Fatalf("QueryRaw(%s) = %v, Query = %v", queryString(q), rerr, err)
	}
	if err != nil {
		return
	}
	if raw.NextCursor != res.NextCursor || len(raw.Docs) != len(res.Docs) {
		h.t.Fatalf("QueryRaw(%s) = %d docs, cursor %q; Query = %d docs, cursor %q",
			queryString(q), len(raw.Docs), raw.NextCursor, len(res.Docs), res.NextCursor)
	}
	for i := range res.Docs {
		h.sameWire("QueryRaw "+queryString(q), res.Docs[i], raw.Docs[i])
	}
}

// sameWire checks that the raw read's document rd is the decoded read's d:
// the same envelope and the same AppendJSON bytes; a raw document with no
// Data carries Raw.
func (h *harness) sameWire(what string, d, rd *collections.Document) {
	h.t.Helper()
	if rd.Data == nil && rd.Raw == nil {
		h.t.Fatalf("%s: %s has neither Data nor Raw", what, rd.Path)
	}
	a, b := *d, *rd
	a.Data, a.Raw, b.Data, b.Raw = nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) {
		h.t.Fatalf("%s: envelope %+v, want %+v", what, b, a)
	}
	var wd, wr bytes.Buffer
	if err := d.AppendJSON(&wd); err != nil {
		h.t.Fatal(err)
	}
	if err := rd.AppendJSON(&wr); err != nil {
		h.t.Fatal(err)
	}
	if !bytes.Equal(wd.Bytes(), wr.Bytes()) {
		h.t.Fatalf("%s: raw wire form\n%s\nwant\n%s", what, wr.Bytes(), wd.Bytes())
	}
}
