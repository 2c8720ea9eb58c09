// Command loom is Loom's single binary: the server, a benchmark client and
// small admin helpers.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `Loom — realtime document database with trigger webhooks.

Usage:
  loom serve [flags]     run the server (loom serve -h for flags)
  loom agents [flags]    run the agent runtime's webhook handlers alone against a remote Loom (loom agents -h)
  loom bench [flags]     load-test a server over REST (loom bench -h)
  loom version           print the version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "agents":
		err = agents(ctx, args[1:], stdout, stderr)
	case "bench":
		err = bench(ctx, args[1:], stdout)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "loom", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "loom: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "loom:", err)
		return 1
	}
	return 0
}
