// Package loom holds the files Loom ships at the top of its repository that
// the binary needs wherever it is started: go:embed cannot reach a parent
// directory, so they are embedded here.
package loom

import (
	_ "embed"
	"slices"
)

//go:embed triggers.json
var triggersJSON []byte

// Triggers returns the shipped triggers.json: the triggers that drive
// the agent runtime's built-in handlers under ${LOOM_URL}/webhooks/ (spec
// 05). `loom serve` uses it when no triggers file is given or found.
func Triggers() []byte { return slices.Clone(triggersJSON) }
