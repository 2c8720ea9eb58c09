// Package console holds Loom's web console: the built front end in dist/
// (sources in src/, built by build.mjs, committed so that building the Go
// binary needs no Node) embedded into the binary. The server serves it at
// /console/ (server.Config.Console).
package console

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// FS returns the built console: index.html and its hashed assets at the root.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// fs.Sub fails only on an invalid path; "dist" is valid.
		panic(err)
	}
	return sub
}
