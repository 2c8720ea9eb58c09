// Package access is Loom's rules-pinned read and write protocol: who the
// caller is (Caller), the coarse path-level decision (Authorize), and the
// security rules applied per document on every read and write.
//
// Every surface that reads or writes documents for a caller goes through a
// Service: the REST documents, query and batch routes, realtime WS/SSE,
// RxDB replication and the agent runtime's in-process path (Docs). The
// small API is Get, Query and Commit; the streaming surfaces, which read
// the change log themselves, use the lower-level checks Readable,
// CheckList and CheckMay.
//
// Basics:
//
//   - Admin callers (the admin key or the "admin" role) bypass the rules,
//     but not the system-collection policy of Authorize.
//   - A read never tells a missing document from a forbidden one to a
//     caller without read access.
//   - Commit pins every write to the document versions the rules saw, so a
//     concurrent change fails the commit and the rules run again instead
//     of a write slipping past a condition.
//   - Query cursors handed to clients are sealed (cursor.go): they continue
//     exactly one query for one caller.
//
// Caveats: errors carry no HTTP. A denial is a *Denied, a write to a system
// collection ErrSystemWrite, a cursor this service did not issue for this
// query ErrBadCursor, a failed precondition on a document the caller may
// not read a *HiddenPrecondition; the server maps them to statuses in its
// one error mapping.
package access
