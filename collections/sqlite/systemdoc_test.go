package sqlite

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// TestSystemDocumentBound: a system document (Loom's own, such as a
// trigger's outbox row carrying a user document and its previous state)
// may exceed MaxDocumentBytes up to its own bound; beyond that it is
// refused like any other.
func TestSystemDocumentBound(t *testing.T) {
	const limit = 100
	s := mustOpen(t, Config{Path: tempPath(t), PurgeInterval: -1, MaxDocumentBytes: limit})
	str := func(n int) map[string]any { return map[string]any{"s": strings.Repeat("x", n)} }
	mustCommit(t, s, create("_outbox/row", str(3*limit)))
	if _, err := s.Commit(context.Background(), testDB, []collections.Write{create("users/row", str(3*limit))}, collections.CommitOptions{}); !errors.Is(err, collections.ErrTooLarge) {
		t.Fatalf("user document of 3x the limit: %v", err)
	}
	bound := SystemDocumentFactor*limit + SystemDocumentSlack
	if _, err := s.Commit(context.Background(), testDB, []collections.Write{create("_outbox/huge", str(bound))}, collections.CommitOptions{}); !errors.Is(err, collections.ErrTooLarge) {
		t.Fatalf("system document over its bound: %v", err)
	}
}

// TestWildcardSkipsSystemRows: a pattern with a wildcard first segment does
// not read system rows at all (the conformance suite cannot see this:
// q.Matches drops them in Go either way); a pattern naming a system
// collection reads them.
func TestWildcardSkipsSystemRows(t *testing.T) {
	const clause = "substr(collection, 1, 1) <> '_'"
	for coll, want := range map[string]bool{"*": true, "*/*/sessions": true, "*/u1/sessions": true, "_users": false, "_users/*/sessions": false, "users/*/notes": false} {
		sqlText, _ := planSQL(t, collections.Query{Collection: coll, Limit: 10}, nil)
		if got := strings.Contains(sqlText, clause); got != want {
			t.Errorf("Query(%q) SQL has the system-row clause: %v, want %v\n%s", coll, got, want, sqlText)
		}
	}
}
