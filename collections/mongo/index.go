package mongo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/loomdb/loom/collections"
)

// indexDef is a declared index as a MongoDB index on (db, shape or
// collection, keys..., path): the prefix the query filter pins, then the
// order keys in the order the query sorts on them.
type indexDef struct {
	decl  collections.Index
	name  string
	model mongo.IndexModel
}

// maxIndexKeys is MongoDB's limit on the fields of a compound index.
const maxIndexKeys = 32

func indexDefs(decls []collections.Index) ([]indexDef, error) {
	var out []indexDef
	seen := map[string]bool{}
	for _, ix := range decls {
		if err := ix.Validate(); err != nil {
			return nil, err
		}
		keys := bson.D{{Key: fieldDB, Value: int32(1)}}
		if !collections.IsPattern(ix.Collection) {
			keys = append(keys, bson.E{Key: fieldColl, Value: int32(1)})
		} else if _, ok := literalShape(ix.Collection); ok {
			keys = append(keys, bson.E{Key: fieldShape, Value: int32(1)})
		} else {
			return nil, fmt.Errorf("index on %q: use * only in place of document ids", ix.Collection)
		}
		for _, f := range ix.Fields {
			keys = append(keys, bson.E{Key: keyPath(f), Value: int32(1)})
		}
		keys = append(keys, bson.E{Key: fieldPath, Value: int32(1)})
		if len(keys) > maxIndexKeys {
			return nil, fmt.Errorf("index on %q: %d fields, MongoDB indexes at most %d (with the database, collection and path)",
				ix.Collection, len(ix.Fields), maxIndexKeys-3)
		}
		// Named by the key pattern (collection-independent for concrete
		// collections: one index serves every collection on those keys).
		var body string
		for _, k := range keys {
			body += k.Key + "\x00"
		}
		sum := sha256.Sum256([]byte(body))
		name := "loomix_" + hex.EncodeToString(sum[:8])
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, indexDef{decl: ix, name: name, model: mongo.IndexModel{Keys: keys, Options: options.Index().SetName(name)}})
	}
	return out, nil
}
