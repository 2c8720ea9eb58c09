package triggers_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

const msgPath = "users/u1/chats/c1/messages/m1"

// doc builds a stored document at path from JSON data, the way the store
// decodes it (numbers as json.Number).
func doc(t testing.TB, path string, version int64, data string) *collections.Document {
	t.Helper()
	m, err := collections.DecodeObject([]byte(data))
	if err != nil {
		t.Fatalf("DecodeObject(%s): %v", data, err)
	}
	coll, id := collections.SplitDocPath(path)
	return &collections.Document{Path: path, Collection: coll, ID: id, Version: version,
		CreatedAt: 1000, UpdatedAt: 1000 + version, Seq: version, Data: m}
}

func createCh(t testing.TB, data string) *collections.Change {
	return &collections.Change{Seq: 1, DB: "default", Op: collections.OpCreate, Path: msgPath,
		After: doc(t, msgPath, 1, data), Time: 1700000000000}
}

func updateCh(t testing.TB, before, after string) *collections.Change {
	return &collections.Change{Seq: 2, DB: "default", Op: collections.OpUpdate, Path: msgPath,
		Before: doc(t, msgPath, 1, before), After: doc(t, msgPath, 2, after), Time: 1700000000001}
}

func deleteCh(t testing.TB, before string) *collections.Change {
	tomb := doc(t, msgPath, 2, `{}`)
	tomb.Deleted, tomb.Data = true, nil
	return &collections.Change{Seq: 3, DB: "default", Op: collections.OpDelete, Path: msgPath,
		Before: doc(t, msgPath, 1, before), After: tomb, Time: 1700000000002}
}

// compileT compiles a trigger on the messages collection for all events.
func compileT(t testing.TB, cond, key string) *triggers.Compiled {
	t.Helper()
	def := valid()
	def.Events = []string{"create", "update", "delete"}
	def.Condition, def.OrderingKey = cond, key
	c, err := triggers.Compile(def, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// event runs ch through c.Match and NewEvent, as the evaluator does.
func event(t testing.TB, c *triggers.Compiled, ch *collections.Change) *triggers.Event {
	t.Helper()
	coll, _ := collections.SplitDocPath(ch.Path)
	params, ok := c.Match(ch.DB, ch.Op, coll)
	if !ok {
		t.Fatalf("%s %s does not match %s", ch.Op, ch.Path, c.Def.Collection)
	}
	return triggers.NewEvent(ch, params)
}

func TestEval(t *testing.T) {
	const transition = "event.document.data.status == 'success' && event.before.data.status != 'success'"
	tests := []struct {
		name    string
		cond    string
		ch      func(testing.TB) *collections.Change
		want    bool
		wantErr bool
	}{
		{"empty condition", "", func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, true, false},
		{"role user", "event.document.data.role == 'user'",
			func(t testing.TB) *collections.Change { return createCh(t, `{"role":"user"}`) }, true, false},
		{"role assistant", "event.document.data.role == 'user'",
			func(t testing.TB) *collections.Change { return createCh(t, `{"role":"assistant"}`) }, false, false},
		{"role missing", "event.document.data.role == 'user'",
			func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, false, true},
		{"transition fires", transition,
			func(t testing.TB) *collections.Change {
				return updateCh(t, `{"status":"running"}`, `{"status":"success"}`)
			}, true, false},
		{"transition later update", transition,
			func(t testing.TB) *collections.Change {
				return updateCh(t, `{"status":"success","n":1}`, `{"status":"success","n":2}`)
			}, false, false},
		{"transition not yet", transition,
			func(t testing.TB) *collections.Change {
				return updateCh(t, `{"status":"queued"}`, `{"status":"running"}`)
			}, false, false},
		// On create before is null: selecting from it is an evaluation
		// error, which the caller counts as no match.
		{"transition on create", transition,
			func(t testing.TB) *collections.Change { return createCh(t, `{"status":"success"}`) }, false, true},
		{"transition on create guarded", "event.before != null && " + transition,
			func(t testing.TB) *collections.Change { return createCh(t, `{"status":"success"}`) }, false, false},
		{"changed content", "'content' in event.changedFields",
			func(t testing.TB) *collections.Change {
				return updateCh(t, `{"content":"a","n":1}`, `{"content":"b","n":1}`)
			}, true, false},
		{"unchanged content", "'content' in event.changedFields",
			func(t testing.TB) *collections.Change {
				return updateCh(t, `{"content":"a","n":1}`, `{"content":"a","n":2}`)
			}, false, false},
		{"params", "event.params.chatId == 'c1' && event.params.userId == 'u1'",
			func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, true, false},
		{"params other", "event.params.chatId == 'c2'",
			func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, false, false},
		{"int gt", "event.document.data.n > 3",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":4}`) }, true, false},
		{"int not gt", "event.document.data.n > 3",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":3}`) }, false, false},
		{"float gt", "event.document.data.n > 3",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":3.5}`) }, true, false},
		{"float literal", "event.document.data.n < 3.25",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":3.2}`) }, true, false},
		{"integral float equals int", "event.document.data.n == 3",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":3.0}`) }, true, false},
		{"has present", "has(event.document.data.x)",
			func(t testing.TB) *collections.Change { return createCh(t, `{"x":null}`) }, true, false},
		{"has absent", "has(event.document.data.x)",
			func(t testing.TB) *collections.Change { return createCh(t, `{"y":1}`) }, false, false},
		{"type and ids", "event.type == 'create' && event.id == 'm1' && event.path == '" + msgPath +
			"' && event.collection == 'users/u1/chats/c1/messages' && event.database == 'default'",
			func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, true, false},
		{"envelope", "event.document.version == 2 && event.before.version == 1 && event.timestamp > 0",
			func(t testing.TB) *collections.Change { return updateCh(t, `{}`, `{}`) }, true, false},
		{"delete sees last state", "event.type == 'delete' && event.document.data.role == 'user' && event.before.data.role == 'user'",
			func(t testing.TB) *collections.Change { return deleteCh(t, `{"role":"user"}`) }, true, false},
		{"nested data", "event.document.data.meta.tags.exists(t, t == 'x') && event.document.data.meta.size >= 10",
			func(t testing.TB) *collections.Change {
				return createCh(t, `{"meta":{"tags":["a","x"],"size":10}}`)
			}, true, false},
		{"dyn not bool", "event.document.data.n",
			func(t testing.TB) *collections.Change { return createCh(t, `{"n":1}`) }, false, true},
		{"cost limit", "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a+b+c+d > 0))))",
			func(t testing.TB) *collections.Change { return createCh(t, `{}`) }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compileT(t, tt.cond, "")
			got, key, err := eval(c, event(t, c, tt.ch(t)))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err=%v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), `trigger "t1"`) {
				t.Errorf("err=%v does not name the trigger", err)
			}
			if got != tt.want || key != "" {
				t.Fatalf("Eval=%v, %q; want %v", got, key, tt.want)
			}
		})
	}
}

func TestEval_OrderingKey(t *testing.T) {
	tests := []struct {
		cond, key, data string
		matched         bool
		want            string
		wantErr         bool
	}{
		{"", "event.params.chatId", `{}`, true, "c1", false},
		{"", "event.document.data.userId", `{"userId":"alice"}`, true, "alice", false},
		{"", "event.document.data.userId", `{"userId":42}`, true, "42", false},
		{"", "string(event.document.data.n)", `{"n":1.5}`, true, "1.5", false},
		{"", "event.params.userId + '/' + event.params.chatId", `{}`, true, "u1/c1", false},
		{"", "event.document.data.userId", `{}`, false, "", true},                                                // missing: error
		{"", "event.document.data.userId", `{"userId":[1]}`, false, "", true},                                    // not a string
		{"event.document.data.role == 'user'", "event.document.data.userId", `{"role":"bot"}`, false, "", false}, // key not needed
	}
	for _, tt := range tests {
		t.Run(tt.key+tt.data, func(t *testing.T) {
			c := compileT(t, tt.cond, tt.key)
			matched, key, err := eval(c, event(t, c, createCh(t, tt.data)))
			if (err != nil) != tt.wantErr || matched != tt.matched || key != tt.want {
				t.Fatalf("Eval=%v, %q, %v; want %v, %q, error %v", matched, key, err, tt.matched, tt.want, tt.wantErr)
			}
		})
	}
}

func TestNewEvent(t *testing.T) {
	c := compileT(t, "", "")
	tests := []struct {
		name    string
		ch      *collections.Change
		changed []string
		before  bool
		docVer  int64
		docData map[string]any
	}{
		{"create", createCh(t, `{"role":"user","content":"hi"}`), []string{"content", "role"}, false, 1,
			map[string]any{"role": "user", "content": "hi"}},
		{"create empty", createCh(t, `{}`), []string{}, false, 1, map[string]any{}},
		{"update", updateCh(t,
			`{"same":1,"num":1,"gone":true,"obj":{"a":[1,2]},"eqobj":{"a":[1,2.0]},"s":"x"}`,
			`{"same":1.0,"num":2,"new":null,"obj":{"a":[1,3]},"eqobj":{"a":[1.0,2]},"s":"x"}`),
			[]string{"gone", "new", "num", "obj"}, true, 2, nil},
		{"update nothing", updateCh(t, `{"a":1}`, `{"a":1}`), []string{}, true, 2, map[string]any{"a": json.Number("1")}},
		{"delete", deleteCh(t, `{"b":1,"a":2}`), []string{"a", "b"}, true, 1,
			map[string]any{"b": json.Number("1"), "a": json.Number("2")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := event(t, c, tt.ch)
			if !reflect.DeepEqual(e.ChangedFields, tt.changed) {
				t.Errorf("ChangedFields=%v, want %v", e.ChangedFields, tt.changed)
			}
			if e.Type != string(tt.ch.Op) || e.Database != "default" || e.Path != msgPath || e.ID != "m1" ||
				e.Collection != "users/u1/chats/c1/messages" || e.Timestamp != tt.ch.Time {
				t.Errorf("event header: %+v", e)
			}
			if want := map[string]string{"userId": "u1", "chatId": "c1"}; !reflect.DeepEqual(e.Params, want) {
				t.Errorf("Params=%v", e.Params)
			}
			if (e.Before != nil) != tt.before {
				t.Errorf("Before=%v, want present %v", e.Before, tt.before)
			}
			if e.Document["version"] != tt.docVer {
				t.Errorf("document version=%v, want %d", e.Document["version"], tt.docVer)
			}
			if tt.docData != nil {
				data := e.Document["data"].(map[string]any)
				for k, v := range tt.docData {
					if s, ok := v.(string); ok && data[k] != s {
						t.Errorf("data[%s]=%v, want %v", k, data[k], v)
					}
					if n, ok := v.(json.Number); ok && data[k] != n {
						t.Errorf("data[%s]=%v, want %v", k, data[k], v)
					}
				}
				if len(data) != len(tt.docData) {
					t.Errorf("data=%v, want %v", data, tt.docData)
				}
			}
		})
	}
}

func TestEvent_Map(t *testing.T) {
	c := compileT(t, "", "")
	e := event(t, c, createCh(t, `{"role":"user","n":1.5}`))
	b, err := json.Marshal(e.Map())
	if err != nil {
		t.Fatal(err)
	}
	got, err := collections.DecodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := collections.DecodeObject([]byte(`{
		"type": "create", "database": "default", "collection": "users/u1/chats/c1/messages",
		"path": "` + msgPath + `", "id": "m1", "params": {"userId": "u1", "chatId": "c1"},
		"document": {"id": "m1", "collection": "users/u1/chats/c1/messages", "path": "` + msgPath + `",
			"version": 1, "createdAt": 1000, "updatedAt": 1001, "data": {"role": "user", "n": 1.5}},
		"before": null, "changedFields": ["n", "role"], "timestamp": 1700000000000}`))
	if !collections.Equal(got, want) {
		t.Fatalf("Map JSON=%s", b)
	}
	// Values are JSON-compatible for storage in a document: no
	// map[string]string or []string.
	var check func(v any)
	check = func(v any) {
		switch x := v.(type) {
		case nil, string, bool, int64, json.Number:
		case map[string]any:
			for _, y := range x {
				check(y)
			}
		case []any:
			for _, y := range x {
				check(y)
			}
		default:
			t.Errorf("Map holds a %T (%v)", v, v)
		}
	}
	check(e.Map())

	// No params: an empty object, not null.
	def := valid()
	def.Collection = "users/*/chats/*/messages"
	c2, err := triggers.Compile(def, nil)
	if err != nil {
		t.Fatal(err)
	}
	e = event(t, c2, createCh(t, `{}`))
	if p, ok := e.Map()["params"].(map[string]any); !ok || len(p) != 0 {
		t.Errorf("params=%#v, want an empty map", e.Map()["params"])
	}
}

func BenchmarkEval(b *testing.B) {
	c := compileT(b, "event.document.data.role == 'user' && 'content' in event.changedFields", "event.params.chatId")
	ch := createCh(b, `{"role":"user","content":"hello","n":3}`)
	coll, _ := collections.SplitDocPath(ch.Path)
	b.ReportAllocs()
	for b.Loop() {
		params, ok := c.Match(ch.DB, ch.Op, coll)
		if !ok {
			b.Fatal("no match")
		}
		if m, _, err := eval(c, triggers.NewEvent(ch, params)); !m || err != nil {
			b.Fatal(m, err)
		}
	}
}

// eval evaluates c's condition and ordering key for ev now.
func eval(c *triggers.Compiled, ev *triggers.Event) (matched bool, orderingKey string, err error) {
	r, err := c.Evaluate(ev, time.Now())
	return r.Matched, r.OrderingKey, err
}
