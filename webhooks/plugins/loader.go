package plugins

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
)

// Condition compilers, as variables so the package's tests can run the
// loader and engine with conditions of their own making.
var (
	celCompiler = compileCEL
	luaCompiler = compileLua
)

// loader accumulates one Load: what it read and every problem found.
type loader struct {
	opts    LoadOptions
	rules   []*Rule
	plugins []*Plugin
	errs    []error
	// standalone maps a standalone rule id to its file; pluginIDs a plugin
	// id to its manifest (uniqueness across builtin and directories).
	standalone map[string]string
	pluginIDs  map[string]string
}

func (l *loader) fail(file, rule, field, format string, args ...any) {
	l.errs = append(l.errs, &LoadError{File: file, Rule: rule, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// openDir opens a configured directory, which must exist, as a root
// (the caller closes it) that nothing read through it can leave:
// os.DirFS would follow a symlink (a rule file, a script, a plugin's
// directory) anywhere on the disk, and a rule's errors may quote what it
// read. Symlinks that stay inside the directory work.
func (l *loader) openDir(dir string) (*os.Root, bool) {
	st, err := os.Stat(dir)
	if err != nil {
		l.fail(dir, "", "", "cannot read the directory: %v", pathlessError(err))
		return nil, false
	}
	if !st.IsDir() {
		l.fail(dir, "", "", "not a directory")
		return nil, false
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		l.fail(dir, "", "", "cannot read the directory: %v", pathlessError(err))
		return nil, false
	}
	return root, true
}

// listDir lists dir of fsys (prefix names it in errors). The embedded
// tree may lack either directory; a configured one must be readable.
func (l *loader) listDir(fsys fs.FS, dir, prefix string, builtin bool) ([]fs.DirEntry, bool) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		if !builtin || !errors.Is(err, fs.ErrNotExist) {
			l.fail(prefix, "", "", "cannot list the directory: %v", pathlessError(err))
		}
		return nil, false
	}
	return entries, true
}

// loadRulesDir loads the standalone rules dir/*.toml of fsys.
func (l *loader) loadRulesDir(fsys fs.FS, dir, prefix string, builtin bool) {
	entries, ok := l.listDir(fsys, dir, prefix, builtin)
	if !ok {
		return
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".toml") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		// Errors and Rule.Source name the file as the admin knows it:
		// below the configured directory, or builtin:rules/<name>.
		name := path.Join(dir, e.Name())
		file := path.Join(prefix, e.Name())
		r := l.loadRule(fsys, dir, name, file, "")
		if r == nil {
			continue
		}
		if prev, dup := l.standalone[r.ID]; dup {
			l.fail(file, r.ID, "rule.id", "a standalone rule with this id is already in %s", prev)
			continue
		}
		l.standalone[r.ID] = file
		l.rules = append(l.rules, r)
	}
}

// loadPluginsDir loads dir/<id>/manifest.toml of fsys and their rules.
func (l *loader) loadPluginsDir(fsys fs.FS, dir, prefix string, builtin bool) {
	entries, ok := l.listDir(fsys, dir, prefix, builtin)
	if !ok {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue // a README next to the plugins, a .git
		}
		if len(l.plugins) >= maxPlugins {
			l.fail(prefix, "", "", "more than %d plugins", maxPlugins)
			return
		}
		pdir := path.Join(dir, e.Name())
		l.loadPlugin(fsys, pdir, e.Name(), func(name string) string {
			if builtin {
				return "builtin:" + name
			}
			return path.Join(prefix, strings.TrimPrefix(name, dir+"/"))
		}, builtin)
	}
}

func (l *loader) loadPlugin(fsys fs.FS, pdir, dirName string, file func(string) string, builtin bool) {
	mpath := path.Join(pdir, "manifest.toml")
	mfile := file(mpath)
	src, err := readBounded(fsys, mpath)
	if err != nil {
		l.fail(mfile, "", "", "%v", err)
		return
	}
	p, errs := parseManifest(mfile, dirName, src)
	l.errs = append(l.errs, errs...)
	if len(errs) > 0 {
		return
	}
	if prev, dup := l.pluginIDs[p.ID]; dup {
		l.fail(mfile, "", "plugin.id", "plugin %q is already defined by %s", p.ID, prev)
		return
	}
	l.pluginIDs[p.ID] = mfile
	p.Dir = file(pdir)
	p.Builtin = builtin

	seenFile := map[string]bool{}
	ids := map[string]string{}
	for i, g := range p.Include {
		matches, err := fs.Glob(fsys, path.Join(pdir, g))
		if err != nil {
			l.fail(mfile, "", fmt.Sprintf("rules.include[%d]", i), "bad pattern: %v", err)
			continue
		}
		if len(matches) == 0 {
			l.fail(mfile, "", fmt.Sprintf("rules.include[%d]", i), "%q matches no file", g)
			continue
		}
		sort.Strings(matches)
		for _, m := range matches {
			if seenFile[m] || m == mpath {
				continue // twice matched, or the manifest (include = ["*.toml"])
			}
			seenFile[m] = true
			if st, err := fs.Stat(fsys, m); err == nil && st.IsDir() {
				continue
			}
			if len(l.rules)+len(p.Rules) >= maxRules {
				l.fail(mfile, "", fmt.Sprintf("rules.include[%d]", i), "more than %d rules in all", maxRules)
				return
			}
			rfile := file(m)
			r := l.loadRule(fsys, pdir, m, rfile, p.ID)
			if r == nil {
				continue
			}
			if prev, dup := ids[r.ID]; dup {
				l.fail(rfile, r.ID, "rule.id", "plugin %s already has a rule with this id in %s", p.ID, prev)
				continue
			}
			ids[r.ID] = rfile
			p.Rules = append(p.Rules, r)
		}
	}
	for _, c := range p.Requires {
		if !slices.Contains(l.opts.Capabilities, c) {
			p.Missing = append(p.Missing, c)
		}
	}
	l.plugins = append(l.plugins, p)
	l.rules = append(l.rules, p.Rules...)
}

// loadRule reads, parses and compiles the rule file name of fsys (file is
// its name for errors; root the directory its script must stay in: the
// rules directory or the plugin's); nil when it has errors (recorded).
func (l *loader) loadRule(fsys fs.FS, root, name, file, pluginID string) *Rule {
	src, err := readBounded(fsys, name)
	if err != nil {
		l.fail(file, "", "", "%v", err)
		return nil
	}
	r, errs := parseRule(file, src)
	if r != nil {
		r.PluginID = pluginID
		r.Source = file
	}
	if len(errs) > 0 {
		l.errs = append(l.errs, errs...)
		return nil
	}
	if err := l.compileCondition(fsys, root, name, r); err != nil {
		l.errs = append(l.errs, err)
		return nil
	}
	return r
}

func (l *loader) compileCondition(fsys fs.FS, root, name string, r *Rule) error {
	if r.Condition != "" {
		c, err := celCompiler(r.Condition)
		if err != nil {
			return &LoadError{File: r.Source, Rule: r.ID, Field: "condition.expression", Msg: err.Error()}
		}
		r.cond = c
		return nil
	}
	spath := path.Join(path.Dir(name), r.Script)
	if !within(root, spath) {
		return &LoadError{File: r.Source, Rule: r.ID, Field: "condition.script", Msg: "must stay inside the rules directory or the plugin's directory"}
	}
	src, err := readBounded(fsys, spath)
	if err != nil {
		return &LoadError{File: r.Source, Rule: r.ID, Field: "condition.script", Msg: err.Error()}
	}
	c, err := luaCompiler(r.Script, src, l.opts.Lua)
	if err != nil {
		return &LoadError{File: r.Source, Rule: r.ID, Field: "condition.script", Msg: err.Error()}
	}
	r.cond = c
	return nil
}

// readBounded reads a regular file of at most maxFileBytes. Anything else
// is refused before it is opened: opening a FIFO blocks until a writer
// comes, which would hang every reload.
func readBounded(fsys fs.FS, name string) (string, error) {
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %v", name, pathlessError(err))
	}
	if st.IsDir() {
		return "", fmt.Errorf("%s is a directory", name)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", name)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %v", name, pathlessError(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %v", name, pathlessError(err))
	}
	if len(b) > maxFileBytes {
		return "", fmt.Errorf("%s is larger than %d bytes", name, maxFileBytes)
	}
	return string(b), nil
}

// pathlessError drops the path a *fs.PathError repeats (the LoadError names
// the file already).
func pathlessError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
