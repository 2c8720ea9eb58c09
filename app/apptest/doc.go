// Package apptest is Loom's shared test kit: a whole node started the way
// loom serve starts it (Start, through the composition root in package
// app), a real webhook receiver verifying Standard Webhooks signatures
// (Receiver), and request scenario tables that assert what a request
// committed to the change log (Scenario).
//
// It is for tests only: external test packages (server_test,
// triggers_test, webhooks_test) import it instead of wiring the store,
// auth, triggers and server by hand, so every harness starts and stops a
// node in the one order the root owns.
package apptest
