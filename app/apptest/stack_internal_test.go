package apptest

import (
	"testing"

	"github.com/loomdb/loom/internal/config"
)

// A node on MongoDB gets what loom serve --engine mongo requires: the
// engine, the database, and every setting the nodes must share.
func TestTestConfig_Mongo(t *testing.T) {
	o := Options{Mongo: &Mongo{URI: "mongodb://127.0.0.1:27017/?replicaSet=rs0", Database: "loomtest_1"}}
	cfg, _ := testConfig(t, t.TempDir(), o)
	if cfg.Engine != "mongo" || cfg.Mongo.URI != o.Mongo.URI || cfg.Mongo.Database != o.Mongo.Database {
		t.Fatalf("engine=%q uri=%q database=%q, want the Mongo option's", cfg.Engine, cfg.Mongo.URI, cfg.Mongo.Database)
	}
	if missing := cfg.MissingSharedSettings(); len(missing) != 0 {
		t.Fatalf("shared settings missing: %v", missing)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Two nodes of one deployment share the settings, not the data directory.
	other, _ := testConfig(t, t.TempDir(), o)
	if other.Auth != cfg.Auth || other.Security.CursorKey != cfg.Security.CursorKey || other.WebhookSecret != cfg.WebhookSecret || other.Data == cfg.Data {
		t.Fatal("two nodes on one database must share the keys and have their own data directories")
	}
	if sq, _ := testConfig(t, t.TempDir(), Options{}); sq.Engine != config.Default().Engine {
		t.Fatalf("without Mongo engine=%q, want the default", sq.Engine)
	}
}
