package apptest

import (
	"context"
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// EvaluatorOwner is the node holding the trigger evaluator lease in st
// ("" before any node took it), for tests of several nodes on one store.
func EvaluatorOwner(t testing.TB, st collections.Store) string {
	t.Helper()
	doc, err := st.Get(context.Background(), triggers.SystemDB, "_trigger_meta/evaluator-lease")
	if errors.Is(err, collections.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	v, _ := collections.Lookup(doc, collections.FieldLeaseOwner)
	s, _ := v.(string)
	return s
}
