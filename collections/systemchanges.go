package collections

// SystemChanges is implemented by an engine that writes its change log
// alone, so it knows every commit without reading (the embedded SQLite
// engine). An engine shared by several nodes does not implement it; its
// readers read the log.
//
// The logged system writes are those of the trigger states ("_triggers/…",
// IsLogged). Every node follows them, on every commit; this lets a
// follower skip the commits of ordinary documents without a read.
type SystemChanges interface {
	// LastSystemChange returns head, a committed Seq, and last, a Seq at
	// or below it such that no committed change with a Seq in
	// (last, head] is a write of a system path. last may name a change of
	// another document (it errs only towards a read).
	LastSystemChange() (last, head int64)
}
