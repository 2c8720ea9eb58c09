package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/loomdb/loom/collections"
)

// Listing limits of ListUsers and ListServiceKeys.
const (
	DefaultListLimit = collections.DefaultLimit // 100
	MaxListLimit     = collections.MaxLimit     // 1000
	// MaxListedServiceKeys caps ListServiceKeys: past it the list is
	// truncated (ServiceKeyList.Truncated).
	MaxListedServiceKeys = collections.MaxLimit
	// roleWriteAttempts bounds how often SetUserRoles re-reads a user whose
	// document changed between its read and its conditional write.
	roleWriteAttempts = 3
)

var (
	// ErrInvalidRoles: a role list SetUserRoles refuses (more than 32
	// roles, or a role that is not 1–64 printable ASCII characters without
	// spaces, as for service keys).
	ErrInvalidRoles = errors.New("auth: invalid roles")
	// ErrConcurrentChange: the user document kept changing while
	// SetUserRoles tried to write it; the caller may retry.
	ErrConcurrentChange = errors.New("auth: the user changed concurrently")
)

// UserInfo is an account as an admin sees it: never the password hash.
type UserInfo struct {
	UID       string   `json:"uid"`
	Username  string   `json:"username"`
	Roles     []string `json:"roles"`
	CreatedAt int64    `json:"createdAt"` // unix ms
}

// UserList is one page of ListUsers. NextCursor is "" on the last page;
// otherwise it is the after of the next page.
type UserList struct {
	Users      []UserInfo
	NextCursor string
}

// ServiceKeyInfo is a service key as an admin sees it: never the key or
// its hash.
type ServiceKeyInfo struct {
	Name      string   `json:"name"`
	Roles     []string `json:"roles"`
	CreatedAt int64    `json:"createdAt"` // unix ms
}

// ServiceKeyList is ListServiceKeys' answer; Truncated means there are more
// than MaxListedServiceKeys keys and only the first (by name) are listed.
type ServiceKeyList struct {
	Keys      []ServiceKeyInfo
	Truncated bool
}

// ListUsers returns one page of accounts ordered by username compared
// case-insensitively (the _usernames key). after is the NextCursor of the
// previous page ("" for the first); prefix (case-insensitive, "" for all)
// keeps the usernames that start with it; limit is 1 to MaxListLimit (0:
// DefaultListLimit; larger: MaxListLimit). A page may hold fewer than limit
// users and still have a NextCursor when a name document has no account
// (a half-written state no code path leaves behind, skipped here).
func (s *Service) ListUsers(ctx context.Context, after, prefix string, limit int) (UserList, error) {
	if limit < 0 {
		return UserList{}, fmt.Errorf("%w: limit must not be negative", collections.ErrInvalidQuery)
	}
	q := collections.Query{
		Collection: colUsernames,
		OrderBy:    []collections.Order{{Field: collections.FieldID}},
		Limit:      min(limit, MaxListLimit),
	}
	if prefix != "" {
		// usernameKey maps character by character with a prefix-free code,
		// so key(prefix) is a prefix of key(name) exactly when prefix is a
		// case-insensitive prefix of name.
		q.Filters = append(q.Filters, collections.Filter{Field: collections.FieldID, Op: collections.OpPrefix, Value: usernameKey(prefix)})
	}
	if after != "" {
		q.Filters = append(q.Filters, collections.Filter{Field: collections.FieldID, Op: collections.OpGt, Value: after})
	}
	if err := q.Normalize(); err != nil {
		return UserList{}, fmt.Errorf("auth: list users: %w", err)
	}
	res, err := s.store.Query(ctx, s.db, q)
	if err != nil {
		return UserList{}, fmt.Errorf("auth: list users: %w", err)
	}
	out := UserList{Users: make([]UserInfo, 0, len(res.Docs))}
	for _, d := range res.Docs {
		uid, _ := d.Data[fieldUID].(string)
		info, err := s.userInfo(ctx, uid)
		if err != nil {
			return UserList{}, fmt.Errorf("auth: list users: %w", err)
		}
		if info != nil {
			out.Users = append(out.Users, *info)
		}
	}
	if res.NextCursor != "" && len(res.Docs) > 0 {
		out.NextCursor = res.Docs[len(res.Docs)-1].ID
	}
	return out, nil
}

// userInfo loads the admin's view of a user; nil, nil when there is none.
func (s *Service) userInfo(ctx context.Context, uid string) (*UserInfo, error) {
	d, err := s.userDoc(ctx, uid)
	if d == nil || err != nil {
		return nil, err
	}
	return userInfoOf(uid, d), nil
}

func userInfoOf(uid string, d *collections.Document) *UserInfo {
	info := &UserInfo{UID: uid, Roles: rolesOf(d)}
	info.Username, _ = d.Data[fieldUsername].(string)
	info.CreatedAt, _ = int64Field(d.Data, fieldCreatedAt)
	return info
}

// rolesOf is the roles of a _users or _api_keys document as listed: [] (not
// null) when there are none.
func rolesOf(d *collections.Document) []string {
	if r := stringList(d.Data[fieldRoles]); r != nil {
		return r
	}
	return []string{}
}

// checkRoles validates roles as CreateServiceKey does (at most maxRoles,
// each validRole); an empty list is allowed.
func checkRoles(roles []string) error {
	if len(roles) > maxRoles {
		return fmt.Errorf("%w: at most %d roles", ErrInvalidRoles, maxRoles)
	}
	for _, r := range roles {
		if !validRole(r) {
			return fmt.Errorf("%w: role %q: use 1 to %d printable ASCII characters without spaces", ErrInvalidRoles, r, maxRoleLength)
		}
	}
	return nil
}

// SetUserRoles replaces a user's roles (an empty list: no roles) and returns
// the account. The write is conditional on the version just read, so a
// concurrent change is never overwritten blindly (after roleWriteAttempts
// tries: ErrConcurrentChange). Then every refresh token of the user is
// revoked, so a session cannot outlive the change by refreshing; access
// tokens already issued keep their old roles until they expire (at most
// Config.AccessTTL). An unknown uid is an error wrapping
// collections.ErrNotFound.
func (s *Service) SetUserRoles(ctx context.Context, uid string, roles []string) (*UserInfo, error) {
	if err := checkRoles(roles); err != nil {
		return nil, err
	}
	if roles == nil {
		roles = []string{}
	}
	path := docPath(colUsers, uid)
	var info *UserInfo
	for attempt := 0; ; attempt++ {
		d, err := s.userDoc(ctx, uid)
		if err != nil {
			return nil, fmt.Errorf("auth: set roles: %w", err)
		}
		if d == nil {
			return nil, fmt.Errorf("auth: user %q: %w", uid, collections.ErrNotFound)
		}
		w := collections.Write{
			Type:    collections.WriteUpdate,
			Path:    path,
			Data:    map[string]any{fieldRoles: toAnySlice(roles)},
			IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: json.Number(strconv.FormatInt(d.Version, 10))}},
		}
		res, err := s.store.Commit(ctx, s.db, []collections.Write{w}, collections.CommitOptions{})
		if err == nil {
			info = userInfoOf(uid, res[0].Doc)
			break
		}
		if !isGone(err) {
			return nil, fmt.Errorf("auth: set roles: %w", err)
		}
		// Never pass the store's precondition error on: it carries the
		// current document, password hash included.
		if attempt+1 == roleWriteAttempts {
			return nil, fmt.Errorf("%w: %q", ErrConcurrentChange, uid)
		}
	}
	if _, err := s.RevokeSessions(ctx, uid); err != nil {
		return nil, fmt.Errorf("auth: set roles: the roles changed but the sessions were not all revoked: %w", err)
	}
	if _, err := s.RevokeConsoleSessions(ctx, uid); err != nil {
		return nil, fmt.Errorf("auth: set roles: the roles changed but the console sessions were not all revoked: %w", err)
	}
	return info, nil
}

// RevokeSessions deletes every refresh token of the user and returns how
// many it deleted. Access tokens already issued stay valid until they
// expire.
func (s *Service) RevokeSessions(ctx context.Context, uid string) (int, error) {
	n, err := s.deleteRefreshTokens(ctx, collections.Filter{Field: fieldUID, Op: collections.OpEq, Value: uid})
	if err != nil {
		return n, fmt.Errorf("auth: revoke sessions: %w", err)
	}
	return n, nil
}

// ListServiceKeys lists the service keys by name, at most
// MaxListedServiceKeys of them (Truncated says there are more).
func (s *Service) ListServiceKeys(ctx context.Context) (ServiceKeyList, error) {
	q := collections.Query{
		Collection: colAPIKeys,
		OrderBy:    []collections.Order{{Field: fieldName}},
		Limit:      MaxListedServiceKeys,
	}
	if err := q.Normalize(); err != nil {
		return ServiceKeyList{}, fmt.Errorf("auth: list service keys: %w", err)
	}
	res, err := s.store.Query(ctx, s.db, q)
	if err != nil {
		return ServiceKeyList{}, fmt.Errorf("auth: list service keys: %w", err)
	}
	out := ServiceKeyList{Keys: make([]ServiceKeyInfo, 0, len(res.Docs)), Truncated: res.NextCursor != ""}
	for _, d := range res.Docs {
		k := ServiceKeyInfo{Roles: rolesOf(d)}
		k.Name, _ = d.Data[fieldName].(string)
		k.CreatedAt, _ = int64Field(d.Data, fieldCreatedAt)
		out.Keys = append(out.Keys, k)
	}
	return out, nil
}
