//go:build race

package main_test

// raceEnabled: this test binary runs under the race detector, so the loom
// binary it starts is built with -race too (TestMain).
const raceEnabled = true
