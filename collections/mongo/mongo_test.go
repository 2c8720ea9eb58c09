package mongo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestRedactURI(t *testing.T) {
	for uri, want := range map[string]string{
		"mongodb://localhost:27017":                                      "mongodb://localhost:27017",
		"mongodb://loom:s3cret@db1:27017,db2:27017/?replicaSet=rs0":      "mongodb://loom:xxxxx@db1:27017,db2:27017/?replicaSet=rs0",
		"mongodb+srv://loom:p%40ss@cluster.example.net/loom":             "mongodb+srv://loom:xxxxx@cluster.example.net/loom",
		"mongodb://user@host/":                                           "mongodb://user@host/",
		"mongodb://a:b@h/?authMechanismProperties=AWS_SESSION_TOKEN:tok": "mongodb://a:xxxxx@h/?authMechanismProperties=xxxxx",
		"mongodb://u:pw@h:bad port%zz":                                   "mongodb://xxxxx",
	} {
		if got := RedactURI(uri); got != want {
			t.Errorf("RedactURI(%q)=%q, want %q", uri, got, want)
		}
	}
}

func TestScrub(t *testing.T) {
	err := scrub(errors.New(`bad uri "mongodb://u:hunter2@h"`), "mongodb://u:hunter2@h")
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("scrub kept the password: %v", err)
	}
	plain := errors.New("x")
	if got := scrub(plain, "mongodb://h"); got != plain {
		t.Errorf("scrub changed an error without a password: %v", got)
	}
}

func TestCheckTopology(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply bson.D
		ok    bool
	}{
		{"replica set primary", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "setName", Value: "rs0"}}, true},
		{"replica set secondary", bson.D{{Key: "secondary", Value: true}, {Key: "setName", Value: "rs0"}}, true},
		{"mongos", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "msg", Value: "isdbgrid"}}, true},
		{"standalone", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "maxWireVersion", Value: 21}}, false},
	} {
		b, err := bson.Marshal(tc.reply)
		if err != nil {
			t.Fatal(err)
		}
		var r helloReply
		if err := bson.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		err = checkTopology(r)
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkTopology=%v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "replica set") || !strings.Contains(err.Error(), "transactions and change streams")) {
			t.Errorf("%s: error %q does not say a replica set is needed for transactions and change streams", tc.name, err)
		}
	}
}

// TestOpen_Unreachable: nothing listens on the port, so Open fails within
// the server selection timeout, naming MongoDB and the redacted URI.
func TestOpen_Unreachable(t *testing.T) {
	uri := "mongodb://loom:hunter2@127.0.0.1:1/?connectTimeoutMS=200"
	start := time.Now()
	_, err := Open(context.Background(), Config{URI: uri, ServerSelectionTimeout: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	t.Logf("Open: %v", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %v, want about the 500ms server selection timeout", d)
	}
	msg := err.Error()
	if !strings.Contains(msg, "MongoDB") || !strings.Contains(msg, RedactURI(uri)) || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q should name MongoDB and %s without the password", msg, RedactURI(uri))
	}
}

func TestOpen_Config(t *testing.T) {
	if _, err := Open(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "URI") {
		t.Errorf("Open without a URI err=%v, want one naming the URI", err)
	}
	_, err := Open(context.Background(), Config{URI: "mongodb://127.0.0.1:1", MaxDocumentBytes: MaxDocumentBytesLimit + 1})
	if err == nil || !strings.Contains(err.Error(), "16 MiB") {
		t.Errorf("Open with MaxDocumentBytes above the limit err=%v, want one naming MongoDB's 16 MiB limit", err)
	}
}

func TestHistoryLost(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("network"), false},
		{mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost"}, true},
		{fmt.Errorf("wrapped: %w", mongo.CommandError{Code: 280}), true},
		{mongo.CommandError{Code: 260}, true},
		{mongo.CommandError{Code: 11601, Name: "Interrupted"}, false},
	} {
		if got := historyLost(c.err); got != c.want {
			t.Errorf("historyLost(%v)=%v, want %v", c.err, got, c.want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		wire int32
		ok   bool
	}{{0, true}, {12, false}, {13, true}, {21, true}} {
		b, err := bson.Marshal(bson.D{{Key: "setName", Value: "rs0"}, {Key: "maxWireVersion", Value: tc.wire}})
		if err != nil {
			t.Fatal(err)
		}
		var r helloReply
		if err := bson.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if err := checkVersion(r); (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "MongoDB 5.0") {
			t.Errorf("wire %d: checkVersion=%v, want ok=%v", tc.wire, err, tc.ok)
		}
	}
}
