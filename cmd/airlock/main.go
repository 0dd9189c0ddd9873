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

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/internal/redact"
	"github.com/airlock-proxy/airlock/internal/termsafe"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	reexec()
	stopProfile := startProfile()
	ctx, stop := signalContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	stopProfile()
	var ec exitCode
	var se signalError
	switch {
	case errors.As(err, &ec):
		os.Exit(int(ec))
	case err != nil && (errors.As(err, &se) || errors.As(context.Cause(ctx), &se)):
		// Stopped by a signal: the command cleaned up (a sandbox is destroyed, its
		// credentials revoked); exit as a shell reports a signal, 128+n.
		fmt.Fprintf(os.Stderr, "airlock: stopped by %s: %s\n", se, termsafe.Text(errorText(err)))
		os.Exit(128 + int(se.sig))
	case err != nil:
		// Errors may carry a sandbox's bytes (file names, its messages): quoted, so that
		// they can neither act on the terminal nor forge a line.
		// A config's problems are reported all at once, one line each.
		for _, line := range errorLines(err) {
			fmt.Fprintln(os.Stderr, "airlock:", termsafe.Text(redact.Text(line)))
		}
		os.Exit(1)
	}
}

// errorText is what main prints for err: an error may quote a config value (a URL with a
// user or a token, a database URL with a password), so it is redacted.
func errorText(err error) string { return redact.Text(err.Error()) }

// signalError is the cause of a context cancelled by a signal.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "signal " + unix.SignalName(e.sig) }

// signalContext is parent cancelled, with a signalError cause, by the first of sigs; a
// second signal gets the default action (an impatient operator can still kill airlock).
func signalContext(parent context.Context, sigs ...syscall.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	for _, sig := range sigs {
		signal.Notify(ch, sig)
	}
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(signalError{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

// exitCode ends the process with a status and no message (a sandboxed command's status).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// onSignal runs f with cmd's context cancelled by sig too; an error f returns after that
// carries the signal (for main's 128+n exit).
func onSignal(cmd *cobra.Command, sig syscall.Signal, f func() error) error {
	ctx, stop := signalContext(cmd.Context(), sig)
	defer stop()
	parent := cmd.Context()
	cmd.SetContext(ctx)
	defer cmd.SetContext(parent)
	err := f()
	var se signalError
	if err != nil && errors.As(context.Cause(ctx), &se) {
		return stoppedBy{se, err}
	}
	return err
}

// stoppedBy is an error of a command stopped by a signal: its text is the command's, and
// it matches both.
type stoppedBy struct {
	sig signalError
	err error
}

func (e stoppedBy) Error() string   { return e.err.Error() }
func (e stoppedBy) Unwrap() []error { return []error{e.sig, e.err} }
