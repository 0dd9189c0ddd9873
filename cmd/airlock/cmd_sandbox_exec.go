package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/internal/hostterm"
	"github.com/airlock-proxy/airlock/internal/termsafe"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/session"
)

// execFlags are sandbox exec's flags.
type execFlags struct {
	timeout, cwd     string
	env              []string
	interactive, raw bool
	tty              ttyMode
	af               *adminFlags
}

// newExecCmd is `airlock sandbox exec`; its admin flags are bound by addSessionCmds.
func newExecCmd(af *adminFlags) *cobra.Command {
	f := &execFlags{af: af}
	exec := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its status (124 on timeout)",
		Example: `  airlock sandbox exec sbx-1a2b -- sh -c 'cd /workspace && go test ./...'
  echo data | airlock sandbox exec sbx-1a2b -i -- sh -c 'cat > /tmp/in'
  airlock sandbox exec -it sbx-1a2b -- bash`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			// A closed terminal (SIGHUP) ends the exec as SIGINT and SIGTERM do.
			return onSignal(cmd, syscall.SIGHUP, func() error { return runExec(cmd.Context(), f, args[0], args[1:]) })
		},
	}
	fl := exec.Flags()
	fl.StringVar(&f.timeout, "timeout", "", "wall-clock limit of the command, e.g. 30s (exit status 124 when it passes)")
	fl.StringVar(&f.cwd, "cwd", "", "working directory inside (default /workspace, or $HOME without a workspace)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable K=V for this command (repeatable)")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "send this process's standard input to the command (with a terminal on airlock's terminal: always, its keys)")
	fl.BoolVar(&f.raw, "raw-output", false, "pass the command's output unchanged (see sandbox run)")
	fl.BoolVarP(&f.tty.force, "tty", "t", false, "give the command a terminal of the sandbox's own (its private devpts; never the host's), with airlock's terminal in raw mode while it runs; the default when stdin and stdout are terminals")
	fl.BoolVarP(&f.tty.refuse, "no-tty", "T", false, "never give the command a terminal: separate stdout and stderr, even when stdin and stdout are terminals")
	return exec
}

// runExec runs argv in sandbox id through the admin API and returns its status.
func runExec(ctx context.Context, f *execFlags, id string, argv []string) error {
	c, err := f.af.client()
	if err != nil {
		return err
	}
	e, err := parseEnvFlags(f.env)
	if err != nil {
		return err
	}
	useTTY, err := f.tty.want(os.Stdin, os.Stdout)
	if err != nil {
		return err
	}
	req := session.ExecRequest{Argv: argv, Env: e, Cwd: f.cwd, Timeout: f.timeout}
	stdout, stderr, done := commandOutput(f.raw)
	defer done()
	var res session.ExecResult
	if useTTY {
		res, err = execTTY(ctx, c, id, req, f.interactive, stdout)
	} else {
		var stdin io.Reader
		if f.interactive {
			stdin = os.Stdin
		}
		res, err = c.Exec(ctx, id, req, stdin, stdout, stderr)
	}
	done() // before airlock's own lines
	if err != nil {
		return err
	}
	return execStatus(id, res)
}

// execTTY runs req on a terminal of the sandbox tied to airlock's own (see hostTTY):
// the host terminal in raw mode until it returns, its keys sent when stdin is a terminal
// (or with -i), its size at start and on every SIGWINCH.
func execTTY(ctx context.Context, c *session.Client, id string, req session.ExecRequest, interactive bool, out io.Writer) (session.ExecResult, error) {
	tty := &hostTTY{in: os.Stdin, out: os.Stdout}
	defer tty.end()
	t, err := tty.start()
	if err != nil {
		return session.ExecResult{}, fmt.Errorf("terminal: %w", err)
	}
	req.TTYSize = &session.Resize{Rows: int(t.Size.Rows), Cols: int(t.Size.Cols)}
	if session.PlainTerm(t.Term) {
		req.Term = t.Term
	}
	var stdin io.Reader
	if interactive || hostterm.IsTerminal(os.Stdin) {
		// In raw mode nothing but the command reads the keys: Ctrl-C among them.
		stdin = os.Stdin
	}
	return c.ExecTTY(ctx, id, req, stdin, out, t.Resize)
}

// execStatus is airlock's status for an exec's result: the command's.
func execStatus(id string, res session.ExecResult) error {
	if res.TimedOut {
		fmt.Fprintf(os.Stderr, "airlock: command timed out in sandbox %s; its processes were killed\n", termsafe.Text(id))
		return exitCode(sandbox.ExitTimeout)
	}
	if res.Error != "" && res.ExitCode != session.ExitRefused {
		fmt.Fprintf(os.Stderr, "airlock: %s\n", termsafe.Text(res.Error))
	}
	if res.ExitCode != 0 {
		return exitCode(res.ExitCode)
	}
	return nil
}
