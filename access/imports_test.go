package access_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports: access sits below every surface. It may import collections,
// rules and internal/ of Loom's packages, and nothing of HTTP: statuses and
// codes are the server's (its toAPIError maps this package's errors).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"collections": true, "rules": true}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rest, ours := strings.CutPrefix(p, "github.com/loomdb/loom/")
			switch {
			case ours && !allowed[rest] && !strings.HasPrefix(rest, "internal/"):
				t.Errorf("%s imports %s: access may import only collections, rules and internal/ of Loom", path, p)
			case p == "net/http" || strings.HasPrefix(p, "github.com/gin-gonic/"):
				t.Errorf("%s imports %s: access knows no HTTP", path, p)
			}
		}
	}
}
