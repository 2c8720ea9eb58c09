package mongotest

import "testing"

func TestRedact(t *testing.T) {
	uri := "mongodb://loom:s3cret@db1:27017/?replicaSet=rs0"
	got := redact("connect to mongodb://loom:s3cret@db1:27017/?replicaSet=rs0: refused", uri)
	if want := "connect to mongodb://loom:xxxxx@db1:27017/?replicaSet=rs0: refused"; got != want {
		t.Errorf("redact=%q, want %q", got, want)
	}
	if got := redact("no uri here", "mongodb://db1/"); got != "no uri here" {
		t.Errorf("redact without credentials=%q", got)
	}
}
