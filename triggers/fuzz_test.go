package triggers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/triggers"
)

// FuzzParseFile feeds arbitrary JSON (and so arbitrary patterns, CEL,
// urls, headers, durations) to ParseFile. Nothing may panic; every
// accepted trigger has its defaults filled in, matches and evaluates
// without panicking, has a sane retry schedule, and schedules its
// deliveries (deliverAt) between now and MaxDeliverAhead from now.
func FuzzParseFile(f *testing.F) {
	seeds := []string{
		goodFile,
		`[]`,
		`null`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com"}]`,
		`[{"triggerId":"a","collection":"a/*/b/{x=**}","events":["update","delete"],"url":"http://h","condition":"'x' in event.changedFields && event.before.data.n > 1.5","orderingKey":"event.params.x"}]`,
		`[{"triggerId":"a","collection":"**","events":["create"],"url":"http://h/${X}","headers":{"A":"$B${X}"},"secret":"${S}","timeout":"1s","retryPolicy":{"maxAttempts":1}}]`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com","condition":"event.documnt == 1"}]`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com","bogus":1}]`,
		`[{"triggerId":"a","collection":"**","events":["create","update"],"url":"https://e.com","deliverAt":"event.document.data.n * 1000.0"}]`,
		`[{"triggerId":"a","collection":"**","events":["update"],"url":"https://e.com","deliverAt":"timestamp('2030-01-01T00:00:00Z') + duration('1h')"}]`,
		`[{"triggerId":"a","collection":"**","events":["create"],"url":"https://e.com","deliverAt":"event.document.data.status"}]`,
		`[{"triggerId":"a","collection":"**","events":["create"],"url":"https://e.com","deliverAt":"event.timestamp","orderingKey":"event.id"}]`,
		`[{"triggerId":"a","collection":"**","events":["create"],"url":"https://e.com","deliverAt":"event.timestamp > 0"}]`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com"},{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com"}]`,
		`[{"triggerId":"a","collection":"users/{u}/chats/{c}/m","events":["create"],"url":"https://e.com","format":"syntrix","tokenScope":["users/{u}/**","audit/{c}","x/*"]}]`,
		`[{"triggerId":"a","collection":"a/{x=**}","events":["create"],"url":"https://e.com","format":"syntrix","tokenScope":["b/{x}/**"]}]`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com","format":"loom","tokenScope":["c/**"]}]`,
		`[{"triggerId":"a","collection":"c","events":["create"],"url":"https://e.com","format":"syntrix","tokenScope":[]}]`,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	expand := func(name string) (string, error) {
		switch name {
		case "X":
			return "x", nil
		case "S":
			return secret24, nil
		}
		return testEnv(name)
	}
	f.Fuzz(func(t *testing.T, src string) {
		cs, err := triggers.ParseFile([]byte(src), expand)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "triggers: ") {
				t.Fatalf("error without the triggers: prefix: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, c := range cs {
			if c.Def.Database == "" || c.Def.Enabled == nil || seen[c.Def.ID] {
				t.Fatalf("accepted %+v", c.Def)
			}
			seen[c.Def.ID] = true
			if c.Def.DeliverAt != "" && c.Def.OrderingKey != "" {
				t.Fatalf("accepted deliverAt with orderingKey: %+v", c.Def)
			}
			switch c.Def.Format {
			case "", triggers.FormatLoom, triggers.FormatSyntrix:
			default:
				t.Fatalf("accepted format %q", c.Def.Format)
			}
			if c.Def.TokenScope != nil && (c.Def.Format != triggers.FormatSyntrix || len(c.Def.TokenScope) == 0 || len(c.Def.TokenScope) > triggers.MaxTokenScope) {
				t.Fatalf("accepted tokenScope %v with format %q", c.Def.TokenScope, c.Def.Format)
			}
			if c.MaxAttempts() < 1 || c.MaxAttempts() > 100 {
				t.Fatalf("MaxAttempts=%d", c.MaxAttempts())
			}
			for n := 1; n <= c.MaxAttempts(); n++ {
				if d := c.Backoff(n, func() float64 { return 0.5 }); d <= 0 {
					t.Fatalf("Backoff(%d)=%v", n, d)
				}
			}
			for _, op := range []collections.ChangeOp{collections.OpCreate, collections.OpUpdate, collections.OpDelete} {
				ch := &collections.Change{DB: c.Def.Database, Op: op, Path: msgPath, Time: 1,
					Before: doc(t, msgPath, 1, `{"status":"running","n":2}`), After: doc(t, msgPath, 2, `{"status":"success","n":3.5}`)}
				if op == collections.OpCreate {
					ch.Before = nil
				}
				params, ok := c.Match(ch.DB, op, "users/u1/chats/c1/messages")
				if !ok {
					params = nil
				}
				now := time.UnixMilli(1_800_000_000_000)
				r, err := c.Evaluate(triggers.NewEvent(ch, params), now)
				if err == nil && r.Matched && c.Def.DeliverAt != "" &&
					(r.DeliverAt < now.UnixMilli() || r.DeliverAt > now.Add(triggers.MaxDeliverAhead).UnixMilli()) {
					t.Fatalf("deliverAt %q evaluated to %d, outside now..now+%s", c.Def.DeliverAt, r.DeliverAt, triggers.MaxDeliverAhead)
				}
				if err == nil && r.Matched && c.Def.DeliverAt == "" && r.DeliverAt != 0 {
					t.Fatalf("no deliverAt, evaluated to %d", r.DeliverAt)
				}
			}
		}
	})
}
