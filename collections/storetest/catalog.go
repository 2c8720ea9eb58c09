package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/loomdb/loom/collections"
)

// testCatalog: an engine that implements collections.Catalog lists the
// databases, child collections and collection groups that hold live
// documents, in byte order, paged by `after` at every page size; tombstones
// and system collections never make anything appear.
func testCatalog(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	c, ok := h.s.(collections.Catalog)
	if !ok {
		t.Skipf("%T does not implement collections.Catalog", h.s)
	}
	h.mustCommit("alpha",
		h.create("notes/n1", `{}`),
		h.create("notes/n3", `{}`),
		h.create("notes-x/a", `{}`), // sorts between "notes" and "notes/..."
		h.create("notes/n1/comments/c1", `{}`),
		h.create("notes/n1/comments/c1/deep/d1", `{}`),
		h.create("notes/n1/aa/x", `{}`),
		h.create("notes/n1/comments-2/y", `{}`),
		h.create("notes/n2/comments/c2", `{}`),
		h.create("notes/n2/tags/t1", `{}`),
		h.create("rooms/r1/messages/m1", `{}`), // no document in "rooms" itself
		h.create("a/b/c/d/e/f", `{}`),
		h.create("Zeta/z1", `{}`), // upper case sorts before "_"
		h.create("gone/g1", `{}`),
		h.create("_users/u1", `{}`),
		h.create("_users/u1/sessions/s1", `{}`),
		h.create("_outbox/o1", `{}`),
	)
	h.mustCommit("alpha", del("notes/n2/tags/t1"), del("gone/g1"), del("notes/n3"))
	h.mustCommit("beta", h.create("_users/u2", `{}`)) // system documents only
	h.mustCommit("gamma", h.create("notes/x", `{}`))
	h.mustCommit("gamma", del("notes/x")) // tombstones only
	h.mustCommit("zz", h.create("z/1", `{}`))
	h.mustCommit("Aa", h.create("b/1", `{}`), h.create("_outbox/o2", `{}`))

	// all pages through one listing at the given page size.
	all := func(what string, limit int, list func(ctx context.Context, after string, limit int) ([]string, error)) []string {
		t.Helper()
		var out []string
		after := ""
		for range 100 {
			ctx, cancel := ctxT()
			page, err := list(ctx, after, limit)
			cancel()
			if err != nil {
				t.Fatalf("%s after %q limit %d: %v", what, after, limit, err)
			}
			if len(page) > limit {
				t.Fatalf("%s after %q limit %d: %d names", what, after, limit, len(page))
			}
			out = append(out, page...)
			if len(page) < limit {
				return out
			}
			after = page[len(page)-1]
		}
		t.Fatalf("%s: no end after 100 pages: %v", what, out)
		return nil
	}
	check := func(what string, want []string, list func(ctx context.Context, after string, limit int) ([]string, error)) {
		t.Helper()
		for _, limit := range []int{1, 2, 3, 1000} {
			if got := all(what, limit, list); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("%s limit %d = %q, want %q", what, limit, got, want)
			}
		}
	}
	colls := func(db, parent string) func(ctx context.Context, after string, limit int) ([]string, error) {
		return func(ctx context.Context, after string, limit int) ([]string, error) {
			return c.Collections(ctx, db, parent, after, limit)
		}
	}
	shapes := func(db string) func(ctx context.Context, after string, limit int) ([]string, error) {
		return func(ctx context.Context, after string, limit int) ([]string, error) {
			return c.Shapes(ctx, db, after, limit)
		}
	}

	check("Databases", []string{"Aa", "alpha", "zz"}, c.Databases)
	check("Collections(alpha, top)", []string{"Zeta", "notes", "notes-x"}, colls("alpha", ""))
	check("Collections(alpha, notes/n1)", []string{"notes/n1/aa", "notes/n1/comments", "notes/n1/comments-2"}, colls("alpha", "notes/n1"))
	check("Collections(alpha, notes/n1/comments/c1)", []string{"notes/n1/comments/c1/deep"}, colls("alpha", "notes/n1/comments/c1"))
	check("Collections(alpha, notes/n2)", []string{"notes/n2/comments"}, colls("alpha", "notes/n2"))
	check("Collections(alpha, rooms/r1)", []string{"rooms/r1/messages"}, colls("alpha", "rooms/r1"))
	check("Collections(alpha, a/b)", nil, colls("alpha", "a/b"))
	check("Collections(alpha, a/b/c/d)", []string{"a/b/c/d/e"}, colls("alpha", "a/b/c/d"))
	check("Collections(alpha, notes/n3)", nil, colls("alpha", "notes/n3"))
	check("Collections(alpha, _users/u1)", nil, colls("alpha", "_users/u1"))
	check("Collections(beta, top)", nil, colls("beta", ""))
	check("Collections(gamma, top)", nil, colls("gamma", ""))
	check("Collections(nowhere, top)", nil, colls("nowhere", ""))
	check("Shapes(alpha)", []string{"a/*/c/*/e", "notes/*/aa", "notes/*/comments", "notes/*/comments-2", "notes/*/comments/*/deep", "rooms/*/messages"}, shapes("alpha"))
	check("Shapes(beta)", nil, shapes("beta"))
	check("Shapes(Aa)", nil, shapes("Aa"))

	// `after` need not be a listed name: it is a lower bound.
	ctx, cancel := ctxT()
	defer cancel()
	for _, tc := range []struct {
		what string
		got  func() ([]string, error)
		want []string
	}{
		{"Databases after b", func() ([]string, error) { return c.Databases(ctx, "b", 10) }, []string{"zz"}},
		{"Collections after m", func() ([]string, error) { return c.Collections(ctx, "alpha", "", "m", 10) }, []string{"notes", "notes-x"}},
		{"Collections after notes-", func() ([]string, error) { return c.Collections(ctx, "alpha", "", "notes-", 10) }, []string{"notes-x"}},
		{"Collections after notes/", func() ([]string, error) { return c.Collections(ctx, "alpha", "", "notes/", 10) }, nil},
		{"Collections under notes/n1 after notes/n1/b", func() ([]string, error) {
			return c.Collections(ctx, "alpha", "notes/n1", "notes/n1/b", 10)
		}, []string{"notes/n1/comments", "notes/n1/comments-2"}},
		{"Collections under notes/n1 after z", func() ([]string, error) { return c.Collections(ctx, "alpha", "notes/n1", "z", 10) }, nil},
		{"Shapes after notes/*/comments", func() ([]string, error) { return c.Shapes(ctx, "alpha", "notes/*/comments", 2) }, []string{"notes/*/comments-2", "notes/*/comments/*/deep"}},
		{"Databases limit 0", func() ([]string, error) { return c.Databases(ctx, "", 0) }, nil},
	} {
		got, err := tc.got()
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
		} else if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s = %q, want %q", tc.what, got, tc.want)
		}
	}
	for _, parent := range []string{"notes", "notes//x", "a/b/c"} {
		if _, err := c.Collections(ctx, "alpha", parent, "", 10); !errors.Is(err, collections.ErrInvalidPath) {
			t.Errorf("Collections(parent %q) error %v, want ErrInvalidPath", parent, err)
		}
	}

	// A cancelled context stops every listing.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := c.Databases(cctx, "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Databases on a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := c.Collections(cctx, "alpha", "", "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Collections on a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := c.Shapes(cctx, "alpha", "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Shapes on a cancelled context: %v, want context.Canceled", err)
	}

	// A collection reappears with its first live document again.
	h.mustCommit("alpha", h.create("gone/g2", `{}`))
	check("Collections(alpha, top) after a create", []string{"Zeta", "gone", "notes", "notes-x"}, colls("alpha", ""))
}
