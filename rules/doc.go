// Package rules compiles and evaluates Loom's security rules: Firestore-like
// allow rules whose conditions are CEL expressions (README, "Users, keys
// and security rules").
//
// # Basics
//
// A rules source is TOML, a list of [[rule]] tables:
//
//	[[rule]]
//	match = "users/{userId}/{rest=**}"   # document path pattern
//	allow = ["read", "write"]            # read = get+list; write = create+update+delete
//	if    = "request.auth != null && request.auth.uid == userId"
//
// Parse or Load compile it into a Set; every problem is reported at that
// point as an *Error naming the rule (1-based) and its match. Default is the
// built-in Set, compiled from security.toml (embedded; see DefaultSource).
//
// Set.Allow decides one Request: it is allowed when any rule whose pattern
// matches the document path and whose allow covers the operation has an if
// expression that evaluates to true. No matching rule denies. Set.MayList
// answers, before any document is read, whether any rule could ever allow
// the caller to list a collection (conditions are partially evaluated with
// the document-dependent parts unknown), so a hopeless query can be refused
// at once; Set.May does the same for a write before its body is read. Their
// answers are cached per Set when no condition reads the time or more of
// the caller than uid, username and roles. Set.AllowsAll answers whether a rule lets the caller read every
// document of a collection from the caller and the path alone (a condition
// that reads nothing a document can change), so that a query, a get or a
// subscription can skip the per-document decisions.
//
// # Patterns
//
// Segments are separated by "/". A literal segment matches itself; {name}
// captures exactly one segment; {name=**}, allowed only as the last segment,
// captures one or more segments joined with "/". A pattern matches a path
// only if it consumes all of it. Capture names are identifiers and become CEL
// string variables. A pattern without {name=**} has an even number of
// segments, since rules apply to documents.
//
// # The CEL environment
//
//   - request.auth: null when anonymous, else {uid, username, roles, claims}
//   - request.op: "get", "list", "create", "update" or "delete"
//   - request.path: the document path; request.time: a timestamp
//   - request.resource.data: the document as it would be after a write
//     (request.resource is null for reads and deletes)
//   - resource.data: the stored document (resource is null when none)
//   - the pattern's captures, by name
//   - get(path) → {data: map} or null, and exists(path) → bool, reading other
//     documents of the same database through the Getter passed to Allow.
//   - changedKeys(a, b) → the sorted top-level keys that differ between
//     maps a and b (null = empty map), costing one unit per KiB of both:
//     "only status changes" is changedKeys(resource.data,
//     request.resource.data) == ['status'] at any document size.
//
// Document numbers (json.Number) are CEL ints when integral and in int64
// range, doubles otherwise, so resource.data.count < 10 works.
//
// # Caveats
//
//   - An if expression is required; write "true" to allow unconditionally.
//     A missing if is an error rather than an implicit true, so that a
//     forgotten condition cannot open a path.
//   - A rule whose evaluation fails (missing field, type error, cost limit,
//     budget) does not allow, and the next rule is tried. Allow returns an
//     error only when no decision could be made: a Getter failure, ctx
//     ending, or an invalid operation or path. Callers must deny on error.
//   - get() and exists() share a budget of MaxDocumentReads calls per Allow
//     call; every call counts, repeated paths included. Each evaluation is
//     bounded by CostLimit and checks ctx inside comprehensions.
//   - Admin bypass is not handled here: the server skips Allow for the admin
//     key and the admin role.
package rules
