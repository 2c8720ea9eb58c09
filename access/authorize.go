package access

import (
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/rules"
)

// Action is what a request does to a path; it is what security rules will
// match on ("read" = get+list, "write" = create+update+delete).
type Action int

// Actions checked by Authorize.
const (
	ActionGet  Action = iota
	ActionList        // list a collection, or run a query on a collection/pattern
	ActionCreate
	ActionUpdate // replace or update
	ActionDelete
)

func (a Action) write() bool { return a == ActionCreate || a == ActionUpdate || a == ActionDelete }

// actionOf is the Action of a write.
func actionOf(t collections.WriteType) Action {
	switch t {
	case collections.WriteCreate:
		return ActionCreate
	case collections.WriteDelete:
		return ActionDelete
	default:
		return ActionUpdate
	}
}

// Authorize is the coarse, path-level access decision every surface makes
// before touching the store: system collections (first segment starts with
// "_") are readable only by admins and writable by nobody through the
// document API (ErrSystemWrite). Everything else is decided per document by
// the security rules. One rule set serves every database, so the database
// plays no part.
func Authorize(caller *Caller, action Action, path string) error {
	if action.write() && collections.IsSystemPath(path) {
		return ErrSystemWrite
	}
	if collections.IsSystemPath(path) && !caller.Admin {
		return denied(caller, "read system collections")
	}
	return nil
}

// WriteOps are the operations of a request that may create, change or
// delete documents of any kind (a batch, an RxDB push), for CheckMay.
var WriteOps = []rules.Op{rules.OpCreate, rules.OpUpdate, rules.OpDelete}

// CheckList refuses at once a list or query on a collection (or pattern) in
// which no rule could ever let the caller read a document.
func (s *Service) CheckList(caller *Caller, collection string) error {
	if caller.Admin || s.rules.Load().MayList(caller.ruleAuth(), collection) {
		return nil
	}
	return denied(caller, "list "+collection)
}

// CheckMay refuses at once a request for ops on path (with "*" segments
// standing for any segment; "" for anywhere) that no rule could ever allow
// the caller; what completes the denial ("write rooms/r1"). The server
// calls it before reading a request body, so a caller who may not write
// gets its 401/403 without the server spending a byte of memory or a
// second of waiting on the body.
func (s *Service) CheckMay(caller *Caller, path, what string, ops ...rules.Op) error {
	if caller.Admin || s.rules.Load().May(caller.ruleAuth(), path, ops...) {
		return nil
	}
	return denied(caller, what)
}
