package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeCond is a condition of the tests' making: "true", "false", "error",
// "panic", or "turn>N" (context.turn.number > N).
type fakeCond struct{ expr string }

func (f fakeCond) Match(_ context.Context, c *Context) (bool, error) {
	switch f.expr {
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "error":
		return false, errors.New("fake failure")
	case "panic":
		panic("fake panic")
	}
	if strings.HasPrefix(f.expr, "turn>") {
		return c.Turn.Number > int64(len(f.expr)-5), nil
	}
	return false, errors.New("unknown fake")
}

// useFakeConditions makes Load compile conditions into fakeConds (an
// expression "bad" or a script "bad" fails to compile) for the test.
func useFakeConditions(t testing.TB) {
	t.Helper()
	cel, lua := celCompiler, luaCompiler
	celCompiler = func(expr string) (Condition, error) {
		if expr == "bad" {
			return nil, errors.New("fake compile error")
		}
		return fakeCond{expr}, nil
	}
	luaCompiler = func(name, src string, _ LuaLimits) (Condition, error) {
		src = strings.TrimSpace(src)
		if src == "bad" {
			return nil, errors.New("fake lua compile error")
		}
		return fakeCond{src}, nil
	}
	t.Cleanup(func() { celCompiler, luaCompiler = cel, lua })
}

// writeTree writes files (path → content) below a new temporary directory.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ruleTOML is a valid rule file with the id, trigger, priority and
// condition; extra is appended (more keys of [action], other tables).
func ruleTOML(id, trigger string, priority int, cond string) string {
	return "[rule]\nid = \"" + id + "\"\ntrigger = \"" + trigger + "\"\npriority = " + strconv.Itoa(priority) +
		"\n\n[condition]\nexpression = \"" + cond + "\"\n\n[action]\ntype = \"notify_self\"\nmessage = \"" + id + " fired at {{ context.turn.number }}\"\n"
}
