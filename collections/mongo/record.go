package mongo

import (
	"fmt"

	"github.com/loomdb/loom/collections"
)

// docRecord is a document as stored in the docs collection.
type docRecord struct {
	Key       string            `bson:"_id"` // db + "/" + path
	DB        string            `bson:"db"`
	Path      string            `bson:"path"`
	Coll      string            `bson:"coll"`
	Shape     string            `bson:"shape"`
	Depth     int32             `bson:"depth"`
	Sys       bool              `bson:"sys"`
	ID        string            `bson:"id"`
	Data      string            `bson:"data"` // canonical JSON of the user data
	Version   int64             `bson:"version"`
	CreatedAt int64             `bson:"createdAt"`
	UpdatedAt int64             `bson:"updatedAt"`
	Deleted   bool              `bson:"deleted"`
	Seq       int64             `bson:"seq"`
	Keys      map[string]string `bson:"k,omitempty"`
	NoKeys    bool              `bson:"nokeys,omitempty"`
}

// changeRecord is one change-log entry; its _id is the seq.
type changeRecord struct {
	Seq    int64     `bson:"_id"`
	DB     string    `bson:"db"`
	Op     string    `bson:"op"`
	Path   string    `bson:"path"`
	Time   int64     `bson:"time"`
	Before *snapshot `bson:"before,omitempty"`
	After  snapshot  `bson:"after"`

	// The committer's view, not stored: the document after the change
	// and the one before it, whose seqs are set when the batch takes its
	// range of the counter.
	doc, prev *collections.Document
}

type snapshot struct {
	Version   int64  `bson:"version"`
	CreatedAt int64  `bson:"createdAt"`
	UpdatedAt int64  `bson:"updatedAt"`
	Deleted   bool   `bson:"deleted"`
	Seq       int64  `bson:"seq"`
	Data      string `bson:"data"`
}

func docKey(db, path string) string { return db + "/" + path }

// decode turns a record into a Document.
func (r *docRecord) decode() (*collections.Document, error) {
	m, err := collections.DecodeObject([]byte(r.Data))
	if err != nil {
		return nil, fmt.Errorf("mongo: corrupt document %s: %w", r.Path, err)
	}
	return &collections.Document{Path: r.Path, Collection: r.Coll, ID: r.ID, Version: r.Version,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Deleted: r.Deleted, Seq: r.Seq, Data: m}, nil
}

// record builds the stored form of d, its data already encoded.
func record(db string, d *collections.Document, data []byte) (*docRecord, error) {
	// Keys are computed from the data as it reads back (numbers become
	// json.Number), so they are the keys of the document queries see.
	m, err := collections.DecodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", collections.ErrInvalidDocument, err)
	}
	back := *d
	back.Data = m
	r := &docRecord{Key: docKey(db, d.Path), DB: db, Path: d.Path, Coll: d.Collection, Shape: collections.Shape(d.Collection),
		Depth: int32(segments(d.Collection)), Sys: collections.IsSystemPath(d.Path), ID: d.ID, Data: string(data),
		Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, Deleted: d.Deleted, Seq: d.Seq}
	if keys, ok := docKeys(&back); ok {
		r.Keys = keys
	} else {
		r.NoKeys = true
	}
	return r, nil
}

func segments(p string) int {
	n := 1
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			n++
		}
	}
	return n
}
