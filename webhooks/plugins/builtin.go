package plugins

import (
	"embed"
	"io/fs"
)

// builtinFiles are the shipped rules and plugins: builtin/rules/*.toml
// (standalone, core) and builtin/plugins/<id>/ (manifest, rules, scripts).
//
//go:embed builtin/rules/*.toml builtin/plugins
var builtinFiles embed.FS

// Builtin returns the shipped rules and plugins (embedded): the core rules
// under rules/ (on by default) and the plugins under plugins/<id>/ (off by
// default).
func Builtin() fs.FS {
	sub, err := fs.Sub(builtinFiles, "builtin")
	if err != nil {
		panic("plugins: embedded files: " + err.Error()) // cannot happen: a fixed, valid path
	}
	return sub
}
