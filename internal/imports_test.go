// Package internal_test holds the rule of internal/: its packages are
// plumbing below the features.
package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/loomdb/loom/"

// TestImports: a package under internal/ may import the standard library,
// third-party modules, other internal/ packages and collections (the data
// model every layer shares: documents, paths, queries, indexes, the Store
// contract), never a feature package (server, triggers, rules, webhooks, an
// engine) — the features build on internal/, so the other way round would
// be a cycle waiting to happen. Tests are exempt: they may use a real
// engine.
func TestImports(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rest, ours := strings.CutPrefix(p, module)
			if ours && rest != "collections" && !strings.HasPrefix(rest, "internal/") {
				t.Errorf("%s imports %s: internal/ may import only the standard library, third-party modules, internal/ and collections", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
