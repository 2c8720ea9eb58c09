package docwrite

import (
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestApply(t *testing.T) {
	cur := &collections.Document{Path: "c/1", Collection: "c", ID: "1", Version: 2, CreatedAt: 5, UpdatedAt: 6,
		Data: map[string]any{"n": map[string]any{"a": "x"}}}
	up := &collections.Write{Type: collections.WriteUpdate, Path: "c/1", Data: map[string]any{"n": map[string]any{"b": "y"}}}
	o, err := Apply(up, cur, []byte(`{"n":{"a":"x"}}`), 9, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Op != collections.OpUpdate || !o.Live || o.Next.Version != 3 || o.Next.CreatedAt != 5 || o.Next.UpdatedAt != 9 {
		t.Errorf("update: %+v %+v", o, o.Next)
	}
	if n := cur.Data["n"].(map[string]any); len(n) != 1 {
		t.Errorf("clone: the current document changed to %v", cur.Data)
	}
	if r := o.Result(up); r.Created || r.Doc != o.Next {
		t.Errorf("result %+v", r)
	}
	create := &collections.Write{Type: collections.WriteCreate, Path: "c/1"}
	if _, err := Apply(create, cur, nil, 9, 1<<20, false); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("create over a live document: %v", err)
	}
	o, err = Apply(create, nil, nil, 9, 1<<20, false)
	if err != nil || o.Op != collections.OpCreate || o.Next.Version != 1 || string(o.Data) != "{}" || !o.Result(create).Created {
		t.Errorf("create: %+v, %v", o, err)
	}
	del := &collections.Write{Type: collections.WriteDelete, Path: "c/2"}
	if _, err := Apply(del, nil, nil, 9, 1<<20, false); !errors.Is(err, collections.ErrNotFound) {
		t.Errorf("delete of nothing: %v", err)
	}
}
