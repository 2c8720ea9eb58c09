// Package collections is Loom's document model and the engine contract.
//
// It holds the pieces every surface shares: document paths and collection
// patterns, the document envelope, deep-merge patches, the query AST with its
// reference evaluator (Match, Compare), opaque query cursors, the change-log
// record, and the Store interface that every engine implements. Engines live in
// subpackages (collections/sqlite; a MongoDB engine is planned) and are picked
// by package app (the composition root); nothing else imports them.
//
// # Basics
//
// A path is a "/"-separated list of segments; an odd number of segments names a
// collection ("rooms/r1/messages"), an even number names a document
// ("rooms/r1/messages/m1"). Documents carry user fields plus a server-owned
// envelope (id, collection, version, createdAt, updatedAt, deleted).
//
// Every committed write that IsLogged names (every non-system collection, and
// _triggers) appends exactly one Change to a single, commit-ordered change log.
// Its Seq is strictly increasing and never reused; realtime resume tokens, RxDB
// checkpoints and trigger cursors are all positions in it.
//
// # Caveats
//
// Collections whose first segment starts with "_" are system collections. They
// are written by Loom itself (outbox rows, cursors, users), are not part of the
// change log (but _triggers, the trigger state every node follows), and are
// never exposed for writing through the document API.
//
// Query results are defined by Match and Compare in this package; an engine may
// use indexes to narrow candidates but must return exactly what the reference
// evaluator would.
package collections
