package auth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
)

func TestService_ListUsers(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	// Signed up out of order and in mixed case: listed by lowercased name.
	for _, n := range []string{"carol", "Alice", "bob_1", "alan@x.org", "Bob"} {
		MustSignup(t, s, n)
	}
	names := func(l auth.UserList) []string {
		var out []string
		for _, u := range l.Users {
			out = append(out, u.Username)
		}
		return out
	}

	all, err := s.ListUsers(ctx, "", "", 0)
	if err != nil {
		t.Fatalf("ListUsers: %v", err)
	}
	if want := []string{"alan@x.org", "Alice", "Bob", "bob_1", "carol"}; !slices.Equal(names(all), want) || all.NextCursor != "" {
		t.Fatalf("all=%v next=%q, want %v and no cursor", names(all), all.NextCursor, want)
	}
	for _, u := range all.Users {
		if u.UID == "" || u.CreatedAt <= 0 || !slices.Equal(u.Roles, []string{"user"}) {
			t.Errorf("user %+v: want a uid, a createdAt and roles [user]", u)
		}
		id, err := s.User(ctx, u.UID)
		if err != nil || id.Username != u.Username {
			t.Errorf("User(%s)=%+v, %v; want %s", u.UID, id, err, u.Username)
		}
	}

	// Pages of two follow the cursor to the end, each user once.
	var paged []string
	after := ""
	for i := 0; ; i++ {
		if i > 5 {
			t.Fatal("the cursor never ended")
		}
		p, err := s.ListUsers(ctx, after, "", 2)
		if err != nil {
			t.Fatalf("ListUsers page %d: %v", i, err)
		}
		if len(p.Users) > 2 {
			t.Fatalf("page %d has %d users, want at most 2", i, len(p.Users))
		}
		paged = append(paged, names(p)...)
		if p.NextCursor == "" {
			break
		}
		after = p.NextCursor
	}
	if !slices.Equal(paged, names(all)) {
		t.Errorf("paged=%v, want %v", paged, names(all))
	}

	// The prefix is case-insensitive and "_" / "@" match themselves.
	for prefix, want := range map[string][]string{
		"B":     {"Bob", "bob_1"},
		"bob_":  {"bob_1"},
		"al":    {"alan@x.org", "Alice"},
		"alan@": {"alan@x.org"},
		"zed":   nil,
	} {
		l, err := s.ListUsers(ctx, "", prefix, 0)
		if err != nil {
			t.Fatalf("ListUsers prefix %q: %v", prefix, err)
		}
		if !slices.Equal(names(l), want) {
			t.Errorf("prefix %q: %v, want %v", prefix, names(l), want)
		}
	}
	if _, err := s.ListUsers(ctx, "", "", -1); !errors.Is(err, collections.ErrInvalidQuery) {
		t.Errorf("negative limit: err=%v, want ErrInvalidQuery", err)
	}
}

func TestService_SetUserRoles(t *testing.T) {
	s, st, _ := MustNew(t, nil)
	ctx := context.Background()
	first := MustSignup(t, s, "alice")
	uid := MustAuthenticate(t, s, first.AccessToken).UID
	second, err := s.Login(ctx, "alice", password, "10.0.0.1")
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	bob := MustSignup(t, s, "bob")

	info, err := s.SetUserRoles(ctx, uid, []string{"admin", "editor"})
	if err != nil {
		t.Fatalf("SetUserRoles: %v", err)
	}
	if info.UID != uid || info.Username != "alice" || !slices.Equal(info.Roles, []string{"admin", "editor"}) {
		t.Fatalf("SetUserRoles=%+v", info)
	}
	// Both of alice's sessions are revoked; bob's is not.
	for _, tok := range []auth.Tokens{first, second} {
		if _, err := s.Refresh(ctx, tok.RefreshToken); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("refresh after the role change: err=%v, want ErrInvalidToken", err)
		}
	}
	if _, err := s.Refresh(ctx, bob.RefreshToken); err != nil {
		t.Errorf("bob's refresh: %v", err)
	}
	// The access token already issued keeps its roles until it expires.
	if id := MustAuthenticate(t, s, first.AccessToken); !slices.Equal(id.Roles, []string{"user"}) {
		t.Errorf("old access token roles=%v, want [user]", id.Roles)
	}
	// A new login carries the new roles.
	again, err := s.Login(ctx, "alice", password, "10.0.0.1")
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	if id := MustAuthenticate(t, s, again.AccessToken); !slices.Equal(id.Roles, []string{"admin", "editor"}) {
		t.Errorf("new access token roles=%v", id.Roles)
	}

	// Fewer roles replace the list (not merged); none is allowed.
	if info, err := s.SetUserRoles(ctx, uid, []string{"editor"}); err != nil || !slices.Equal(info.Roles, []string{"editor"}) {
		t.Fatalf("SetUserRoles([editor])=%+v, %v", info, err)
	}
	if info, err := s.SetUserRoles(ctx, uid, nil); err != nil || info.Roles == nil || len(info.Roles) != 0 {
		t.Fatalf("SetUserRoles(nil)=%+v, %v; want an empty list", info, err)
	}
	l, err := s.ListUsers(ctx, "", "alice", 0)
	if err != nil || len(l.Users) != 1 || len(l.Users[0].Roles) != 0 {
		t.Fatalf("listed after clearing the roles: %+v, %v", l, err)
	}

	// Refused: bad roles, unknown or malformed uids; nothing is written.
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tooMany := make([]string, 33)
	for i := range tooMany {
		tooMany[i] = "r"
	}
	for name, roles := range map[string][]string{
		"empty role": {""}, "space": {"a b"}, "non-ASCII": {"é"}, "too long": {strings.Repeat("r", 65)}, "too many": tooMany,
	} {
		if _, err := s.SetUserRoles(ctx, uid, roles); !errors.Is(err, auth.ErrInvalidRoles) {
			t.Errorf("%s: err=%v, want ErrInvalidRoles", name, err)
		}
	}
	for _, bad := range []string{"nobody", "", "a/b", ".."} {
		if _, err := s.SetUserRoles(ctx, bad, []string{"admin"}); !errors.Is(err, collections.ErrNotFound) {
			t.Errorf("uid %q: err=%v, want ErrNotFound", bad, err)
		}
	}
	if after, _ := st.Head(ctx); after != head {
		t.Errorf("refused role changes wrote %d changes", after-head)
	}
}

func TestService_ListServiceKeys(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	empty, err := s.ListServiceKeys(ctx)
	if err != nil || empty.Keys == nil || len(empty.Keys) != 0 || empty.Truncated {
		t.Fatalf("no keys: %+v, %v", empty, err)
	}
	for _, k := range []struct {
		name  string
		roles []string
	}{{"webhooks", nil}, {"agents", []string{"service", "admin"}}, {"metrics", []string{"metrics"}}} {
		if _, err := s.CreateServiceKey(ctx, k.name, k.roles); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RevokeServiceKey(ctx, "metrics"); err != nil {
		t.Fatal(err)
	}
	l, err := s.ListServiceKeys(ctx)
	if err != nil {
		t.Fatalf("ListServiceKeys: %v", err)
	}
	if len(l.Keys) != 2 || l.Truncated ||
		l.Keys[0].Name != "agents" || !slices.Equal(l.Keys[0].Roles, []string{"service", "admin"}) ||
		l.Keys[1].Name != "webhooks" || !slices.Equal(l.Keys[1].Roles, []string{"service"}) {
		t.Fatalf("keys=%+v, want agents and webhooks (metrics revoked)", l)
	}
	for _, k := range l.Keys {
		if k.CreatedAt <= 0 {
			t.Errorf("key %s: createdAt %d", k.Name, k.CreatedAt)
		}
	}
}

// TestService_SetUserRolesConcurrent: concurrent role changes of one user
// each either win or say ErrConcurrentChange; the roles in the end are a
// winner's, and the account (its password) is intact.
func TestService_SetUserRolesConcurrent(t *testing.T) {
	s, _, _ := MustNew(t, nil)
	ctx := context.Background()
	uid := MustAuthenticate(t, s, MustSignup(t, s, "alice").AccessToken).UID
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.SetUserRoles(ctx, uid, []string{fmt.Sprintf("r%d", i)})
		}()
	}
	wg.Wait()
	won := map[string]bool{}
	for i, err := range errs {
		switch {
		case err == nil:
			won[fmt.Sprintf("r%d", i)] = true
		case !errors.Is(err, auth.ErrConcurrentChange):
			t.Errorf("SetUserRoles %d: %v", i, err)
		}
	}
	l, err := s.ListUsers(ctx, "", "", 0)
	if err != nil || len(l.Users) != 1 || len(l.Users[0].Roles) != 1 || !won[l.Users[0].Roles[0]] {
		t.Fatalf("after the race: %+v, %v; winners %v", l, err, won)
	}
	if _, err := s.Login(ctx, "alice", password, "10.0.0.1"); err != nil {
		t.Fatalf("login after the role changes: %v", err)
	}
}
