package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
	"github.com/loomdb/loom/server"
)

// Syntrix's replication client types, as its Go clients marshal them
// (internal/gateway/rest/types.go @ 68836243 in syntrixbase/syntrix).
type replicaChange struct {
	Action string         `json:"action"`
	Doc    map[string]any `json:"document"`
}

type replicaPushRequest struct {
	Collection string          `json:"collection"`
	Changes    []replicaChange `json:"changes"`
}

// replicaPull is what tests/integration/replication_test.go decodes a pull
// into.
type replicaPull struct {
	Documents  []map[string]interface{} `json:"documents"`
	Checkpoint string                   `json:"checkpoint"`
}

// Syntrix's realtime envelope as that test decodes SSE data lines
// (internal/gateway/realtime: BaseMessage, EventPayload).
type syntrixBaseMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type syntrixEventPayload struct {
	SubID string `json:"subId"`
	Delta struct {
		Document map[string]interface{} `json:"document"`
	} `json:"delta"`
}

const replicationTestCol = "replication_test_col"

// replicationRules are the default rules and the owner-only "shared"
// collection of the RxDB tests (rxSharedRules), plus Syntrix's
// integration-test collection, readable and writable by any signed-in user
// (Syntrix's test environment lets its "user" token do that), and "pages".
var replicationRules = rxSharedRules + `
[[rule]]
match = "replication_test_col/{id}"
allow = ["read", "write"]
if    = "request.auth != null"

[[rule]]
match = "pages/{id}"
allow = ["read", "write"]
if    = "request.auth != null"
`

func newReplicationEnv(t *testing.T, cfg server.Config) *testEnv {
	t.Helper()
	set, err := rules.Parse([]byte(replicationRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rules, cfg.RateLimit = set, -1
	return newAuthEnv(t, cfg)
}

// syntrixPush pushes changes and decodes {"conflicts": [...]}, failing
// unless the status is 200 and conflicts is an array.
func syntrixPush(t *testing.T, env *testEnv, h map[string]string, collection string, changes ...replicaChange) []map[string]any {
	t.Helper()
	b, _ := json.Marshal(replicaPushRequest{Collection: collection, Changes: changes})
	r := env.Do(t, "POST", "/replication/v1/databases/default/push", string(b), h)
	if r.Status != http.StatusOK {
		t.Fatalf("push %s: status=%d; body %s", b, r.Status, r.Body)
	}
	var out struct {
		Conflicts []map[string]any `json:"conflicts"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil || out.Conflicts == nil {
		t.Fatalf("push: body %s: conflicts must be an array (%v)", r.Body, err)
	}
	return out.Conflicts
}

// syntrixPull fetches one page; the checkpoint must be an integer string.
func syntrixPull(t *testing.T, env *testEnv, h map[string]string, collection, checkpoint string, limit int) replicaPull {
	t.Helper()
	u := fmt.Sprintf("/replication/v1/databases/default/pull?collection=%s&checkpoint=%s&limit=%d", url.QueryEscape(collection), url.QueryEscape(checkpoint), limit)
	r := env.Do(t, "GET", u, "", h)
	if r.Status != http.StatusOK {
		t.Fatalf("pull %s: status=%d; body %s", u, r.Status, r.Body)
	}
	var out replicaPull
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil || out.Documents == nil {
		t.Fatalf("pull: body %s: want {documents: [...], checkpoint} (%v)", r.Body, err)
	}
	if n, err := strconv.ParseInt(out.Checkpoint, 10, 64); err != nil || n < 0 || strconv.FormatInt(n, 10) != out.Checkpoint {
		t.Fatalf("pull: checkpoint %q is not a non-negative integer string", out.Checkpoint)
	}
	return out
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func doc(id string, fields ...any) map[string]any {
	m := map[string]any{"id": id}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i].(string)] = fields[i+1]
	}
	return m
}

// TestSyntrixReplication_FullFlow is TestReplication_FullFlow of
// tests/integration/replication_test.go @ 056b2623 (syntrixbase/syntrix):
// the same requests, headers and decoding, step by step.
func TestSyntrixReplication_FullFlow(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	token := env.signup(t, "user1").Access
	collectionName := replicationTestCol
	client := &http.Client{}

	// 1. Setup Realtime (SSE) Connection
	sseURL := fmt.Sprintf("%s/realtime/sse?database=default&collection=%s", env.URL, collectionName)
	req, err := http.NewRequest("GET", sseURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Origin", env.URL)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE status=%d", resp.StatusCode)
	}
	reader := bufio.NewReader(resp.Body)
	// Read connection message. Loom registers the subscription before it
	// writes this line, so no wait is needed after it.
	line, err := reader.ReadString('\n')
	if err != nil || line != ": connected\n" {
		t.Fatalf("first SSE line %q (%v), want \": connected\\n\"", line, err)
	}

	// 2. Setup event listener BEFORE Push
	done := make(chan bool, 1)
	docID := "doc-1"
	go func() {
		for {
			line, err := reader.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "data: ") {
				dataStr := strings.TrimSpace(strings.TrimPrefix(line, "data: "))
				var msg syntrixBaseMessage
				if err := json.Unmarshal([]byte(dataStr), &msg); err == nil && msg.Type == "event" {
					var eventPayload syntrixEventPayload
					if err := json.Unmarshal(msg.Payload, &eventPayload); err == nil && eventPayload.Delta.Document["id"] == docID {
						done <- true
						return
					}
				}
			}
		}
	}()

	// 3. Push a Document
	docData := map[string]interface{}{
		"id":      docID,
		"msg":     "hello replication",
		"version": float64(0), // New document
	}
	bodyBytes, _ := json.Marshal(replicaPushRequest{Collection: collectionName, Changes: []replicaChange{{Doc: docData}}})
	pushURL := fmt.Sprintf("%s/replication/v1/databases/default/push?collection=%s", env.URL, collectionName)
	pushReq, err := http.NewRequest("POST", pushURL, bytes.NewBuffer(bodyBytes))
	if err != nil {
		t.Fatal(err)
	}
	pushReq.Header.Set("Content-Type", "application/json")
	pushReq.Header.Set("Authorization", "Bearer "+token)
	pushResp, err := client.Do(pushReq)
	if err != nil {
		t.Fatal(err)
	}
	if pushResp.StatusCode != http.StatusOK {
		t.Fatalf("push status=%d", pushResp.StatusCode)
	}
	var pushResult map[string]interface{}
	if err := json.NewDecoder(pushResp.Body).Decode(&pushResult); err != nil {
		t.Fatal(err)
	}
	pushResp.Body.Close()
	// Expect no conflicts (the test type-asserts an array).
	if conflicts, ok := pushResult["conflicts"].([]interface{}); !ok || len(conflicts) != 0 {
		t.Fatalf("push result %v: want conflicts []", pushResult)
	}

	// 4. Wait for Realtime Event (the timeout only bounds a failure).
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Timeout waiting for SSE event")
	}

	// 5. Pull to verify storage
	pullURL := fmt.Sprintf("%s/replication/v1/databases/default/pull?collection=%s&checkpoint=0", env.URL, collectionName)
	pullReq, _ := http.NewRequest("GET", pullURL, nil)
	pullReq.Header.Set("Authorization", "Bearer "+token)
	pullResp, err := client.Do(pullReq)
	if err != nil {
		t.Fatal(err)
	}
	if pullResp.StatusCode != http.StatusOK {
		t.Fatalf("pull status=%d", pullResp.StatusCode)
	}
	var pullResult replicaPull
	err = json.NewDecoder(pullResp.Body).Decode(&pullResult)
	pullResp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range pullResult.Documents {
		if doc["id"] == docID {
			if doc["msg"] != "hello replication" || doc["version"] != float64(1) || doc["collection"] != collectionName {
				t.Fatalf("pulled %v", doc)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("Document should be returned in pull: %+v", pullResult)
	}

	// 5. Scenario: Delete Document (version 1: the created version)
	deleteBytes, _ := json.Marshal(replicaPushRequest{Collection: collectionName, Changes: []replicaChange{{
		Action: "delete",
		Doc:    map[string]interface{}{"id": docID, "version": float64(1)},
	}}})
	deleteReq, _ := http.NewRequest("POST", pushURL, bytes.NewBuffer(deleteBytes))
	deleteReq.Header.Set("Content-Type", "application/json")
	deleteReq.Header.Set("Authorization", "Bearer "+token)
	deleteResp, err := client.Do(deleteReq)
	if err != nil {
		t.Fatal(err)
	}
	var deleteResult map[string]interface{}
	_ = json.NewDecoder(deleteResp.Body).Decode(&deleteResult)
	deleteResp.Body.Close()
	if deleteResp.StatusCode != http.StatusOK {
		t.Fatalf("delete push status=%d", deleteResp.StatusCode)
	}
	if conflicts, ok := deleteResult["conflicts"].([]interface{}); !ok || len(conflicts) != 0 {
		t.Fatalf("delete push result %v: want conflicts []", deleteResult)
	}

	// 6. Pull to verify deletion, from the returned checkpoint
	pullURL = fmt.Sprintf("%s/replication/v1/databases/default/pull?collection=%s&checkpoint=%s", env.URL, collectionName, pullResult.Checkpoint)
	pullReq, _ = http.NewRequest("GET", pullURL, nil)
	pullReq.Header.Set("Authorization", "Bearer "+token)
	pullResp, err = client.Do(pullReq)
	if err != nil {
		t.Fatal(err)
	}
	if pullResp.StatusCode != http.StatusOK {
		t.Fatalf("pull status=%d", pullResp.StatusCode)
	}
	var after replicaPull
	err = json.NewDecoder(pullResp.Body).Decode(&after)
	pullResp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Only what changed after the checkpoint: the tombstone.
	if len(after.Documents) != 1 || after.Documents[0]["id"] != docID {
		t.Fatalf("pull after %s: %+v, want only %s's tombstone", pullResult.Checkpoint, after.Documents, docID)
	}
	if val, ok := after.Documents[0]["deleted"].(bool); !ok || !val {
		t.Fatalf("Document should be marked as deleted: %v", after.Documents[0])
	}
	if mustInt(t, after.Checkpoint) <= mustInt(t, pullResult.Checkpoint) {
		t.Fatalf("checkpoint %s did not move past %s", after.Checkpoint, pullResult.Checkpoint)
	}
	// And nothing after that.
	if end := syntrixPull(t, env, map[string]string{"Authorization": "Bearer " + token}, collectionName, after.Checkpoint, 0); len(end.Documents) != 0 || end.Checkpoint != after.Checkpoint {
		t.Fatalf("pull at the end: %+v, want no documents and checkpoint %s", end, after.Checkpoint)
	}
}

// Paging: more documents than limit, written by several commits with other
// collections' writes in between; pages never repeat a document, the last
// is short, and a pull from the final checkpoint sees exactly the writes
// made after it (an update moves its document to the end).
func TestSyntrixReplication_CheckpointPaging(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	u := env.signup(t, "pager")
	want := map[string]bool{}
	for c := 0; c < 5; c++ {
		var changes []replicaChange
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("p%d-%d", c, i)
			want[id] = true
			changes = append(changes, replicaChange{Doc: doc(id, "n", c*5+i)})
		}
		if cf := syntrixPush(t, env, u.h(), "pages", changes...); len(cf) != 0 {
			t.Fatalf("conflicts %v", cf)
		}
		// A write elsewhere between the commits: seqs of "pages" have gaps.
		env.MustDo(t, http.StatusCreated, "POST", api+"/documents/elsewhere", fmt.Sprintf(`{"id":"e%d"}`, c))
	}

	drain := func(from string, limit int) (map[string]map[string]any, string, int) {
		t.Helper()
		seen := map[string]map[string]any{}
		cp, pages := from, 0
		for {
			pages++
			if pages > 50 {
				t.Fatalf("pulling from %s did not terminate", from)
			}
			p := syntrixPull(t, env, u.h(), "pages", cp, limit)
			if len(p.Documents) > limit {
				t.Fatalf("page of %d documents, limit %d", len(p.Documents), limit)
			}
			for _, d := range p.Documents {
				id := d["id"].(string)
				if seen[id] != nil {
					t.Fatalf("document %s returned twice", id)
				}
				seen[id] = d
			}
			if mustInt(t, p.Checkpoint) < mustInt(t, cp) {
				t.Fatalf("checkpoint went back from %s to %s", cp, p.Checkpoint)
			}
			if len(p.Documents) == 0 {
				if p.Checkpoint != cp {
					t.Fatalf("empty page moved the checkpoint %s → %s", cp, p.Checkpoint)
				}
				return seen, cp, pages
			}
			if p.Checkpoint == cp {
				t.Fatalf("page %v did not move the checkpoint %s", p.Documents, cp)
			}
			cp = p.Checkpoint
		}
	}
	seen, end, pages := drain("0", 7)
	if len(seen) != len(want) || pages != 5 { // 7+7+7+4, then the empty page
		t.Fatalf("pulled %d documents in %d pages, want %d in 5", len(seen), pages, len(want))
	}
	for id := range want {
		if seen[id] == nil {
			t.Fatalf("document %s never pulled", id)
		}
	}

	// Later writes: an update of an early document, a new one, a delete.
	syntrixPush(t, env, u.h(), "pages",
		replicaChange{Action: "update", Doc: doc("p0-0", "n", 100)},
		replicaChange{Doc: doc("late", "n", 101)},
		replicaChange{Action: "delete", Doc: doc("p1-1")},
	)
	later, _, _ := drain(end, 2)
	if len(later) != 3 || later["p0-0"]["n"] != json.Number("100") || later["late"] == nil || later["p1-1"]["deleted"] != true {
		t.Fatalf("pulled after %s: %v, want exactly p0-0 (n=100), late and p1-1's tombstone", end, later)
	}

	// limit 0 is the default page size (100): everything at once.
	if all := syntrixPull(t, env, u.h(), "pages", "0", 0); len(all.Documents) != len(want)+1 {
		t.Fatalf("limit 0: %d documents, want %d", len(all.Documents), len(want)+1)
	}
}

// Documents the rules hide are skipped without stalling: the checkpoint
// moves past them, and (with fewer than MaxSyntrixPullScan hidden) a page
// is short only at the end.
func TestSyntrixReplication_PullSkipsHiddenDocuments(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	for i := 0; i < 6; i++ {
		// Interleave: bob, alice, bob, alice, ... each in its own commit.
		syntrixPush(t, env, bob.h(), "shared", replicaChange{Doc: doc(fmt.Sprintf("b%d", i), "owner", bob.UID)})
		syntrixPush(t, env, alice.h(), "shared", replicaChange{Doc: doc(fmt.Sprintf("a%d", i), "owner", alice.UID)})
	}
	var got []string
	cp := "0"
	for range 10 {
		p := syntrixPull(t, env, alice.h(), "shared", cp, 2)
		for _, d := range p.Documents {
			if d["owner"] != alice.UID {
				t.Fatalf("alice pulled %v", d)
			}
			got = append(got, d["id"].(string))
		}
		if len(p.Documents) < 2 {
			break
		}
		cp = p.Checkpoint
	}
	if strings.Join(got, ",") != "a0,a1,a2,a3,a4,a5" {
		t.Fatalf("alice pulled %v, want a0..a5 in order", got)
	}
}

// One pull examines at most MaxSyntrixPullScan documents: behind that many
// the rules hide, it answers a short (here empty) page with the checkpoint
// moved past them, and the next pull goes on from there; nothing is
// skipped.
func TestSyntrixReplication_PullScanIsBounded(t *testing.T) {
	set, err := rules.Parse([]byte(replicationRules), "test")
	if err != nil {
		t.Fatal(err)
	}
	store := &changedSinceCounter{Store: MustOpenStore(t)}
	env := MustStartServer(t, store, server.Config{Rules: set, RateLimit: -1, Auth: MustAuth(t, store, nil)})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	hidden := server.MaxSyntrixPullScan + 1
	for n := 0; n < hidden; {
		var ws []string
		for ; n < hidden && len(ws) < server.MaxBatchWrites; n++ {
			ws = append(ws, fmt.Sprintf(`{"type":"create","path":"shared/b%d","data":{"owner":%q}}`, n, bob.UID))
		}
		env.MustDo(t, http.StatusOK, "POST", api+"/batch", `{"writes":[`+strings.Join(ws, ",")+`]}`)
	}
	syntrixPush(t, env, alice.h(), "shared", replicaChange{Doc: doc("a0", "owner", alice.UID)})

	p := syntrixPull(t, env, alice.h(), "shared", "0", 10)
	if len(p.Documents) != 0 || mustInt(t, p.Checkpoint) <= 0 {
		t.Fatalf("first pull behind %d hidden documents: %d documents, checkpoint %s; want none and a moved checkpoint", hidden, len(p.Documents), p.Checkpoint)
	}
	p = syntrixPull(t, env, alice.h(), "shared", p.Checkpoint, 10)
	if len(p.Documents) != 1 || p.Documents[0]["id"] != "a0" {
		t.Fatalf("second pull: %v, want alice's a0", p.Documents)
	}

	// limit 1 behind the same hidden documents: the same answer, in a few
	// store reads (growing pages), not one read per examined document.
	before := store.calls.Load()
	p = syntrixPull(t, env, alice.h(), "shared", "0", 1)
	if len(p.Documents) != 0 || mustInt(t, p.Checkpoint) <= 0 {
		t.Fatalf("limit 1 behind %d hidden documents: %d documents, checkpoint %s; want none and a moved checkpoint", hidden, len(p.Documents), p.Checkpoint)
	}
	if n := store.calls.Load() - before; n > 20 {
		t.Fatalf("limit 1 behind %d hidden documents: %d ChangedSince reads, want at most 20", hidden, n)
	}
	p = syntrixPull(t, env, alice.h(), "shared", p.Checkpoint, 1)
	if len(p.Documents) != 1 || p.Documents[0]["id"] != "a0" {
		t.Fatalf("second pull with limit 1: %v, want alice's a0", p.Documents)
	}
}

// changedSinceCounter counts the store's ChangedSince reads.
type changedSinceCounter struct {
	collections.Store
	calls atomic.Int64
}

func (c *changedSinceCounter) ChangedSince(ctx context.Context, db, collection string, cp collections.Checkpoint, limit int) ([]*collections.Document, error) {
	c.calls.Add(1)
	return c.Store.ChangedSince(ctx, db, collection, cp, limit)
}

// A change whose version is not the stored one conflicts: the push answers
// the current document and leaves it as it was, while the push's other
// changes commit.
func TestSyntrixReplication_PushVersionConflicts(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	u := env.signup(t, "writer")
	get := func(id string) map[string]any {
		t.Helper()
		return env.MustDo(t, http.StatusOK, "GET", api+"/documents/pages/"+id, "").JSON(t)
	}

	syntrixPush(t, env, u.h(), "pages", replicaChange{Doc: doc("d", "v", "one", "version", 0)})
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "update", Doc: doc("d", "v", "two", "version", 1)}); len(cf) != 0 {
		t.Fatalf("update at the current version: conflicts %v", cf)
	}

	// A stale version (1, now 2) conflicts; "fresh" in the same push commits.
	cf := syntrixPush(t, env, u.h(), "pages",
		replicaChange{Action: "update", Doc: doc("d", "v", "stale", "version", 1)},
		replicaChange{Doc: doc("fresh", "v", "new")},
	)
	if len(cf) != 1 || cf[0]["id"] != "d" || cf[0]["v"] != "two" || cf[0]["version"] != json.Number("2") || cf[0]["collection"] != "pages" {
		t.Fatalf("conflicts %v, want d at version 2 with v=two", cf)
	}
	if d := get("d"); d["v"] != "two" {
		t.Fatalf("d=%v after a conflicting push, want it unchanged", d)
	}
	if f := get("fresh"); f["v"] != "new" {
		t.Fatalf("fresh=%v, want written", f)
	}

	// Version 0 ("a new document") over a live one, and a create without
	// a version, conflict too.
	for _, ch := range []replicaChange{{Doc: doc("d", "v", "x", "version", 0)}, {Action: "create", Doc: doc("d", "v", "x")}} {
		if cf := syntrixPush(t, env, u.h(), "pages", ch); len(cf) != 1 || cf[0]["v"] != "two" {
			t.Fatalf("push %v: conflicts %v, want the current d", ch, cf)
		}
	}
	// "update" without a version is last-write-wins, as in Syntrix.
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "update", Doc: doc("d", "v", "lww")}); len(cf) != 0 || get("d")["v"] != "lww" {
		t.Fatalf("update without version: conflicts %v, d=%v", cf, get("d"))
	}
	// A stale delete conflicts and deletes nothing; a current one deletes.
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "delete", Doc: doc("d", "version", 1)}); len(cf) != 1 || cf[0]["version"] != json.Number("3") {
		t.Fatalf("stale delete: conflicts %v, want d at version 3", cf)
	}
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "delete", Doc: doc("d", "version", 3)}); len(cf) != 0 {
		t.Fatalf("delete at the current version: conflicts %v", cf)
	}
	env.MustDo(t, http.StatusNotFound, "GET", api+"/documents/pages/d", "")
	// Deleting what is already deleted is nothing to do.
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "delete", Doc: doc("d")}, replicaChange{Action: "delete", Doc: doc("never")}); len(cf) != 0 {
		t.Fatalf("delete of deleted/absent: conflicts %v", cf)
	}
	// A stale version against the tombstone (version 4) answers the
	// tombstone; version 0 creates the document again.
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Action: "update", Doc: doc("d", "v", "back", "version", 3)}); len(cf) != 1 || cf[0]["deleted"] != true {
		t.Fatalf("update of a deleted document: conflicts %v, want its tombstone", cf)
	}
	if cf := syntrixPush(t, env, u.h(), "pages", replicaChange{Doc: doc("d", "v", "again", "version", 0)}); len(cf) != 0 || get("d")["v"] != "again" {
		t.Fatalf("create over a tombstone: conflicts %v", cf)
	}
}

// What the caller may not read never comes back: not in a pull, not as a
// conflict. Under the default rules bob cannot replicate alice's
// collection at all; in a shared collection a push over alice's document
// is refused (403) instead of answering it as a conflict, and nothing is
// written.
func TestSyntrixReplication_RulesFilterDocumentsAndConflicts(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	alice, bob := env.signup(t, "alice"), env.signup(t, "bob")
	own := "users/" + alice.UID + "/notes"
	syntrixPush(t, env, alice.h(), own, replicaChange{Doc: doc("n1", "text", "alice's secret", "version", 0)})
	if p := syntrixPull(t, env, alice.h(), own, "0", 10); len(p.Documents) != 1 {
		t.Fatalf("alice pulls her own: %v", p.Documents)
	}

	r := env.Do(t, "GET", "/replication/v1/databases/default/pull?collection="+url.QueryEscape(own)+"&checkpoint=0", "", bob.h())
	wantStatus(t, "bob pulls alice's collection", r, http.StatusForbidden)
	b, _ := json.Marshal(replicaPushRequest{Collection: own, Changes: []replicaChange{{Doc: doc("n1", "text", "bob's", "version", 0)}}})
	r = env.Do(t, "POST", "/replication/v1/databases/default/push", string(b), bob.h())
	wantStatus(t, "bob pushes into alice's collection", r, http.StatusForbidden)
	if strings.Contains(string(r.Body), "secret") {
		t.Fatalf("403 body leaks the document: %s", r.Body)
	}

	syntrixPush(t, env, alice.h(), "shared", replicaChange{Doc: doc("s1", "owner", alice.UID, "text", "alice's secret")})
	for _, ch := range []replicaChange{
		{Doc: doc("s1", "owner", bob.UID, "version", 0)},                   // would conflict
		{Action: "update", Doc: doc("s1", "owner", bob.UID, "version", 7)}, // would conflict
		{Action: "update", Doc: doc("s1", "owner", bob.UID)},               // would overwrite
		{Action: "delete", Doc: doc("s1")},                                 // would delete
	} {
		b, _ := json.Marshal(replicaPushRequest{Collection: "shared", Changes: []replicaChange{{Doc: doc("b1", "owner", bob.UID)}, ch}})
		r := env.Do(t, "POST", "/replication/v1/databases/default/push", string(b), bob.h())
		wantStatus(t, fmt.Sprintf("bob pushes %v over alice's document", ch), r, http.StatusForbidden)
		if strings.Contains(string(r.Body), "secret") {
			t.Fatalf("403 body leaks the document: %s", r.Body)
		}
	}
	// Nothing of those pushes was written (not even bob's own b1), and
	// bob's pull of the shared collection shows none of alice's.
	if d := env.MustDo(t, http.StatusOK, "GET", api+"/documents/shared/s1", "").JSON(t); d["owner"] != alice.UID || d["version"] != json.Number("1") {
		t.Fatalf("s1=%v, want alice's, untouched", d)
	}
	env.MustDo(t, http.StatusNotFound, "GET", api+"/documents/shared/b1", "")
	syntrixPush(t, env, bob.h(), "shared", replicaChange{Doc: doc("b2", "owner", bob.UID)})
	p := syntrixPull(t, env, bob.h(), "shared", "0", 10)
	if len(p.Documents) != 1 || p.Documents[0]["id"] != "b2" {
		t.Fatalf("bob pulls shared: %v, want only b2", p.Documents)
	}
}

func TestSyntrixReplication_Anonymous(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	r := env.Do(t, "GET", "/replication/v1/databases/default/pull?collection=pages&checkpoint=0", "", anon)
	wantStatus(t, "anonymous pull", r, http.StatusUnauthorized)
	if m := r.JSON(t)["message"].(string); !strings.HasPrefix(m, "Unauthorized: ") {
		t.Fatalf("message %q, want the \"Unauthorized: \" prefix", m)
	}
	b, _ := json.Marshal(replicaPushRequest{Collection: "pages", Changes: []replicaChange{{Doc: doc("x")}}})
	wantStatus(t, "anonymous push", env.Do(t, "POST", "/replication/v1/databases/default/push", string(b), anon), http.StatusUnauthorized)
	env.MustDo(t, http.StatusNotFound, "GET", api+"/documents/pages/x", "")
	wantStatus(t, "bad token", env.Do(t, "GET", "/replication/v1/databases/default/pull?collection=pages&checkpoint=0", "", map[string]string{"Authorization": "Bearer invalid-token"}), http.StatusUnauthorized)
}

// The 400 answers of Syntrix's handler_replication.go @ 0b5828b0, message
// for message, and Loom's bounds.
func TestSyntrixReplication_BadRequests(t *testing.T) {
	env := newReplicationEnv(t, server.Config{MaxRequestBytes: 64 << 10})
	u := env.signup(t, "client")
	many := make([]replicaChange, server.MaxSyntrixPushChanges+1)
	for i := range many {
		many[i] = replicaChange{Doc: doc(fmt.Sprintf("m%d", i))}
	}
	manyBody, _ := json.Marshal(replicaPushRequest{Collection: "pages", Changes: many})
	big, _ := json.Marshal(replicaPushRequest{Collection: "pages", Changes: []replicaChange{{Doc: doc("big", "text", strings.Repeat("x", 70<<10))}}})
	pull := "/replication/v1/databases/default/pull"
	push := "/replication/v1/databases/default/push"
	for _, c := range []struct {
		method, url, body string
		status            int
		message           string
	}{
		{"GET", pull + "?checkpoint=0", "", 400, "Collection is required"},
		{"GET", pull + "?collection=pages", "", 400, "Invalid checkpoint"},
		{"GET", pull + "?collection=pages&checkpoint=abc", "", 400, "Invalid checkpoint"},
		{"GET", pull + "?collection=pages&checkpoint=-1", "", 400, "Invalid checkpoint"},
		{"GET", pull + "?collection=pages&checkpoint=0&limit=x", "", 400, "Invalid query parameters"},
		{"GET", pull + "?collection=pages&checkpoint=0&limit=1001", "", 400, "Invalid replication parameters"},
		{"GET", pull + "?collection=pages&checkpoint=0&limit=-1", "", 400, "Invalid replication parameters"},
		{"GET", pull + "?collection=pages/x&checkpoint=0", "", 400, "Invalid replication parameters"},
		{"GET", pull + "?collection=_triggers&checkpoint=0", "", 403, ""},
		{"POST", push, `{"changes":[{"document":{"id":"a"}}]}`, 400, "Collection is required"},
		{"POST", push, `{"collection":"pages/x","changes":[{"document":{"id":"a"}}]}`, 400, "Invalid collection"},
		{"POST", push + "?collection=other", `{"collection":"pages","changes":[{"document":{"id":"a"}}]}`, 400, "Invalid collection"},
		{"POST", push, `{"collection":"pages","changes":[]}`, 400, "No valid changes to push"},
		{"POST", push, `{"collection":"pages"}`, 400, "No valid changes to push"},
		{"POST", push, `{"collection":"pages","changes":[{"action":"create","document":{"msg":"no id"}}]}`, 400, "Document ID is required in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":""}}]}`, 400, "Invalid document in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":"a/b"}}]}`, 400, "Invalid document in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":"a","version":-1}}]}`, 400, "Invalid document in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":"a","version":"1"}}]}`, 400, "Invalid document in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":1}}]}`, 400, "Invalid document in changes"},
		{"POST", push, `{"collection":"pages","changes":[{"action":"upsert","document":{"id":"a"}}]}`, 400, ""},
		{"POST", push, `{"collection":"pages","changes":[{"document":{"id":"a"}},{"document":{"id":"a"}}]}`, 400, ""},
		{"POST", push, `{"collection":"pages","changes":{}}`, 400, "Invalid request body"},
		{"POST", push, `{"collection":"pages","extra":1,"changes":[{"document":{"id":"a"}}]}`, 400, "Invalid request body"},
		{"POST", push, `not json`, 400, ""},
		{"POST", push, string(manyBody), 400, ""},
		{"POST", push, string(big), 413, ""},
		{"POST", push, `{"collection":"_triggers","changes":[{"document":{"id":"a"}}]}`, 403, ""},
	} {
		r := env.Do(t, c.method, c.url, c.body, u.h())
		what := c.method + " " + c.url + " " + truncateForLog(c.body)
		wantStatus(t, what, r, c.status)
		if c.message != "" {
			if m := r.JSON(t); m["message"] != c.message || m["code"] != "BAD_REQUEST" {
				t.Fatalf("%s: body %s, want code BAD_REQUEST and message %q", what, r.Body, c.message)
			}
		}
	}
	// None of the refused pushes wrote anything.
	if p := syntrixPull(t, env, u.h(), "pages", "0", 0); len(p.Documents) != 0 {
		t.Fatalf("refused pushes wrote %v", p.Documents)
	}
}

func truncateForLog(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// The admin key replicates any non-system collection; the checkpoint of a
// collection with nothing new stays where it was.
func TestSyntrixReplication_AdminAndEmpty(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	if p := syntrixPull(t, env, nil, "nothing", "0", 5); len(p.Documents) != 0 || p.Checkpoint != "0" {
		t.Fatalf("empty collection: %+v", p)
	}
	syntrixPush(t, env, nil, "admin_col", replicaChange{Doc: doc("a", "k", 1)}, replicaChange{Doc: doc("b", "k", 2)})
	p := syntrixPull(t, env, nil, "admin_col", "0", 5)
	var ids []string
	for _, d := range p.Documents {
		ids = append(ids, d["id"].(string))
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "a,b" || mustInt(t, p.Checkpoint) != env.Head(t) {
		t.Fatalf("admin pull %+v (head %d)", p, env.Head(t))
	}
	if q := syntrixPull(t, env, nil, "admin_col", "9223372036854775807", 5); len(q.Documents) != 0 || q.Checkpoint != "9223372036854775807" {
		t.Fatalf("pull at the largest checkpoint: %+v", q)
	}
}

// Concurrent pushes at the same version: exactly one wins; every other one
// gets the winner's document back as a conflict (never a silent
// overwrite).
func TestSyntrixReplication_ConcurrentPushesAtOneVersion(t *testing.T) {
	env := newReplicationEnv(t, server.Config{})
	u := env.signup(t, "racer")
	syntrixPush(t, env, u.h(), "pages", replicaChange{Doc: doc("race", "v", "start", "version", 0)})
	const n = 8
	// The goroutines only send; every check (and t.Fatal) runs here.
	type pushed struct {
		status int
		body   []byte
		err    error
	}
	results := make(chan pushed, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(replicaPushRequest{Collection: "pages", Changes: []replicaChange{{Action: "update", Doc: doc("race", "v", fmt.Sprint(i), "version", 1)}}})
			req, err := http.NewRequest("POST", env.URL+"/replication/v1/databases/default/push", bytes.NewReader(b))
			if err != nil {
				results <- pushed{err: err}
				return
			}
			for k, v := range u.h() {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := env.Client.Do(req)
			if err != nil {
				results <- pushed{err: err}
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			results <- pushed{status: res.StatusCode, body: body, err: err}
		}()
	}
	wg.Wait()
	close(results)
	winners := 0
	final := env.MustDo(t, http.StatusOK, "GET", api+"/documents/pages/race", "").JSON(t)
	for p := range results {
		if p.err != nil || p.status != http.StatusOK {
			t.Fatalf("push: status=%d err=%v body %s", p.status, p.err, p.body)
		}
		var out struct {
			Conflicts []map[string]any `json:"conflicts"`
		}
		dec := json.NewDecoder(bytes.NewReader(p.body))
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil || out.Conflicts == nil {
			t.Fatalf("push: body %s: conflicts must be an array (%v)", p.body, err)
		}
		cf := out.Conflicts
		switch {
		case len(cf) == 0:
			winners++
		case len(cf) != 1 || cf[0]["version"] != json.Number("2") || cf[0]["v"] != final["v"]:
			t.Fatalf("loser's conflicts %v, want the winner's document %v", cf, final)
		}
	}
	if winners != 1 || final["version"] != json.Number("2") {
		t.Fatalf("winners=%d, final %v: want exactly one winner and version 2", winners, final)
	}
}
