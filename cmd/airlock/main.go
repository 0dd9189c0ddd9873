// Command airlock is the one binary: the proxy, the sandbox runner, and the tools around
// them. It only wires flags, the config file and the environment to the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	reexec()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	var ec exitCode
	switch {
	case errors.As(err, &ec):
		os.Exit(int(ec))
	case err != nil:
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
}

// exitCode ends the process with a status and no message (a sandboxed command's status).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
