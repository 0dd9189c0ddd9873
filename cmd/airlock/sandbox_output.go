package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/airlock-proxy/airlock/internal/hostfile"
	"github.com/airlock-proxy/airlock/internal/termsafe"
	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// commandOutput is where a sandboxed command's output goes: airlock's stdout and stderr,
// through a filter that drops escape sequences acting beyond the screen (internal/termsafe)
// unless raw. done ends both streams (endOutput); it may be called more than once.
func commandOutput(raw bool) (stdout, stderr io.Writer, done func()) {
	o := &termStream{file: os.Stdout}
	e := &termStream{file: os.Stderr}
	if !raw {
		o.filter, e.filter = termsafe.NewWriter(os.Stdout), termsafe.NewWriter(os.Stderr)
	}
	o.all = []*termsafe.Writer{o.filter, e.filter}
	e.all = o.all
	return o, e, func() { endOutput(o, e) }
}

// termStream is one of airlock's streams as it carries a sandboxed command's output.
type termStream struct {
	file   *os.File
	filter *termsafe.Writer   // nil: raw
	all    []*termsafe.Writer // the filters of every stream sharing the terminal
	once   sync.Once
}

func (t *termStream) Write(p []byte) (int, error) {
	if t.filter == nil {
		return t.file.Write(p)
	}
	return t.filter.Write(p)
}

// finish ends the command's output: an incomplete escape sequence is dropped, and a
// terminal is sent termsafe.Restore, so that what airlock prints next (warnings, the
// report's and the patch's notes) is seen whatever the command's output left set
// (concealed text, the alternate screen, another character set).
func (t *termStream) finish() {
	t.once.Do(func() {
		if t.filter != nil {
			t.filter.Close()
		}
		if _, err := unix.IoctlGetTermios(int(t.file.Fd()), unix.TCGETS); err == nil {
			_, _ = t.file.Write(termsafe.Restore(t.all...))
		}
	})
}

// endOutput ends the command's output on the streams given that carry it (termStream);
// call it before airlock writes its own lines after the command.
func endOutput(ws ...io.Writer) {
	for _, w := range ws {
		if t, ok := w.(*termStream); ok {
			t.finish()
		}
	}
}

// postRun is what airlock writes on the host once the command has run. Its failures and
// shortfalls are said on stderr, never silently, and never change the exit status, which
// stays the command's.
type postRun struct {
	report, patch *hostfile.Dest
}

func (p *postRun) close() {
	p.report.Close()
	p.patch.Close()
}

// writeReport writes the run report, if one was asked for; call it after Close.
func (p *postRun) writeReport(sb *sandbox.Sandbox, stderr io.Writer) {
	if p.report == nil {
		return
	}
	rep := sb.Report()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = p.report.WriteFile(append(b, '\n'))
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock: --report: not written: %s\n", termsafe.Text(err.Error()))
		return
	}
	if rep.ChangesIncomplete != "" {
		fmt.Fprintf(stderr, "airlock: --report %s: the change listing is incomplete: %s\n",
			termsafe.Text(p.report.Path()), termsafe.Text(rep.ChangesIncomplete))
	}
}

// warnSweep says loudly, after Close, when the sweep of a read-write workspace could not
// take away everything the sandbox left there that the host's git would run, read or
// block on (what it took away is logged as a warning). The exit status stays the
// command's: the run's contract; the report has it too (sweep_failed).
func warnSweep(sb *sandbox.Sandbox, stderr io.Writer) {
	if why := sb.Report().SweepFailed; why != "" {
		fmt.Fprintf(stderr, "airlock: WARNING: sandbox %s: the workspace sweep could not take away everything the host's git would run, read or block on (%s); check those paths before running git in the workspace\n",
			sb.ID(), termsafe.Text(why))
	}
}

// writePatch writes the sandbox's copy-on-write changes (an empty file when there are
// none); what the patch could not carry is named in it and said on stderr.
func (p *postRun) writePatch(sb *sandbox.Sandbox, stderr io.Writer) {
	pend, err := p.patch.Create()
	if err == nil {
		perr := sb.WritePatch(pend)
		if perr != nil && !errors.Is(perr, sandbox.ErrPatchIncomplete) {
			pend.Abort()
			err = perr
		} else if err = pend.Commit(); err == nil && perr != nil {
			// The patch is written; what it could not carry is said, not lost silently.
			fmt.Fprintf(stderr, "airlock: --patch %s: %s\n", termsafe.Text(p.patch.Path()), termsafe.Text(perr.Error()))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock: --patch: not written: %s\n", termsafe.Text(err.Error()))
	}
}

// openPostRun resolves the files written after the command now, before anything of the
// sandbox runs: their directory is opened once and never looked up by path again, and each
// is written under a fresh name and renamed into place (internal/hostfile). A report lost
// after a long run is a run lost, so an unwritable one is refused here. Close the result.
func openPostRun(sf *sandboxFlags) (*postRun, error) {
	out := &postRun{}
	for _, f := range []struct {
		flag, path string
		dest       **hostfile.Dest
	}{{"--report", sf.report, &out.report}, {"--patch", sf.patch, &out.patch}} {
		if f.path == "" {
			continue
		}
		d, err := hostfile.Open(f.path)
		if err != nil {
			out.close()
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.dest = d
	}
	return out, nil
}
