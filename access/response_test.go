package access_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// The ForResponse reads (documents written out from their stored bytes)
// make every decision Get and Query make, on the decoded document: a rule
// that reads resource.data keeps a user from a document exactly as it does
// on the decoded path, and what comes out is byte for byte the same. The
// plain reads always hand out decoded documents.
func TestService_ForResponseSameAsDecoded(t *testing.T) {
	ctx := context.Background()
	set, err := rules.Parse([]byte(`
[[rule]]
match = "posts/{p}"
allow = ["read"]
if    = "request.auth != null && resource.data.public == true"
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	svc, st := newService(t, set)
	for id, public := range map[string]bool{"a": true, "b": false, "c": true, "d": false, "e": true} {
		mustCommit(t, st, collections.Write{Type: collections.WriteCreate, Path: "posts/" + id,
			Data: map[string]any{"public": public, "t": "<" + id + ">", "n": 1.5}})
	}
	wire := func(docs ...*collections.Document) string {
		var b bytes.Buffer
		for _, d := range docs {
			if err := d.AppendJSON(&b); err != nil {
				t.Fatal(err)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	for _, caller := range []*access.Caller{alice, access.AdminKey} {
		servedRaw := 0
		q := collections.Query{Collection: "posts", Limit: 2}
		rq := q
		for page := 0; ; page++ {
			res, err := svc.Query(ctx, caller, "default", q)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := svc.QueryForResponse(ctx, caller, "default", rq)
			if err != nil {
				t.Fatal(err)
			}
			if wire(raw.Docs...) != wire(res.Docs...) || (raw.NextCursor == "") != (res.NextCursor == "") {
				t.Fatalf("%s page %d: QueryForResponse\n%s, Query\n%s", caller.UID, page, wire(raw.Docs...), wire(res.Docs...))
			}
			for _, d := range res.Docs {
				if d.Data == nil {
					t.Fatalf("Query handed out %s without Data", d.Path)
				}
				if !caller.Admin && d.Data["public"] != true {
					t.Fatalf("%s read private %s", caller.UID, d.Path)
				}
			}
			for _, d := range raw.Docs {
				if d.Data == nil {
					servedRaw++
				}
				if !caller.Admin && (d.Data == nil || d.Data["public"] != true) {
					t.Fatalf("%s read %s without the rules seeing it decoded", caller.UID, d.Path)
				}
			}
			if res.NextCursor == "" {
				break
			}
			q.StartAfter, rq.StartAfter = res.NextCursor, raw.NextCursor
		}
		if caller.Admin && servedRaw == 0 {
			t.Errorf("no admin page was written from the stored bytes")
		}
		for _, id := range []string{"a", "b", "missing"} {
			d, err := svc.Get(ctx, caller, "default", "posts/"+id)
			rd, rerr := svc.GetForResponse(ctx, caller, "default", "posts/"+id)
			var de, rde *access.Denied
			if errors.As(err, &de) != errors.As(rerr, &rde) || errors.Is(err, collections.ErrNotFound) != errors.Is(rerr, collections.ErrNotFound) || (err == nil) != (rerr == nil) {
				t.Fatalf("%s get %s: GetForResponse err %v, Get err %v", caller.UID, id, rerr, err)
			}
			if err == nil {
				if d.Data == nil {
					t.Fatalf("Get handed out %s without Data", d.Path)
				}
				if wire(rd) != wire(d) {
					t.Fatalf("%s get %s: GetForResponse %s, Get %s", caller.UID, id, wire(rd), wire(d))
				}
			}
		}
	}
}
