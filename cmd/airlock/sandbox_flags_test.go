package main

import (
	"os"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestSandboxRunRefusesMeaninglessLimits: a limit given on the command line is either
// applied or refused; a negative, zero or non-numeric one used to be ignored silently, so
// the sandbox ran with the configured (or no) limit instead. Output files that cannot be
// written are refused before the command runs (the report used to be lost after it).
func TestSandboxRunRefusesMeaninglessLimits(t *testing.T) {
	cfg := writeConfig(t, "home: "+t.TempDir()+"\n")
	for _, tt := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--pids", "-3"}, "--pids -3"},
		{[]string{"--pids", "0"}, "--pids 0"},
		{[]string{"--cpus", "-1"}, "--cpus -1"},
		{[]string{"--cpus", "0"}, "--cpus 0"},
		{[]string{"--cpus", "NaN"}, "--cpus NaN"},
		{[]string{"--cpus", "+Inf"}, "--cpus +Inf"},
		{[]string{"--timeout", "-1s"}, "--timeout -1s"},
		// Sandbox ids have one spelling (identity.CheckID).
		{[]string{"--id", "SBX-A"}, "--id: invalid sandbox id \"SBX-A\""},
		{[]string{"--id", "sbx_a"}, "--id: invalid sandbox id"},
		{[]string{"--id", ""}, "--id: invalid sandbox id: empty"},
		{[]string{"--id", "default"}, "--id: invalid sandbox id \"default\""},
		{[]string{"--memory", "-5M"}, "--memory"},
		// A number without a unit counts bytes: far too little to start a shell.
		{[]string{"--memory", "1"}, `--memory: "1" is 1 bytes, below the minimum of 16M (a number without a unit counts bytes); want a size such as 512M or 2G`},
		{[]string{"--workspace", ".:xyz"}, `--workspace: ".:xyz": unknown mode "xyz"; want DIR (read-write), DIR:ro (read-only) or DIR:cow (copy-on-write)`},
		{[]string{"--policy", cfg}, "--policy: " + cfg + " is a file, not a policy; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL"},
		{[]string{"--patch", "p.diff"}, "--patch needs a copy-on-write workspace"},
		{[]string{"--patch", "p.diff", "--workspace", "."}, "--patch needs a copy-on-write workspace"},
		// Checked before the command runs, not after.
		{[]string{"--report", "/nonexistent/r.json"}, "--report: cannot write /nonexistent/r.json"},
		{[]string{"--report", os.TempDir()}, "is a directory"},
		{[]string{"--patch", "/nonexistent/p.diff", "--workspace", ".:cow"}, "--patch: cannot write"},
		{[]string{"--patch", "out.json", "--report", "./out.json", "--workspace", ".:cow"}, "name the same file"},
		{[]string{"--nofile", "0"}, "--nofile 0"},
		{[]string{"--ptys", "-1"}, "--ptys -1"},
		{[]string{"--inodes", "0"}, "--inodes 0"},
		{[]string{"--disk", "1k"}, "--disk: 1k: at least 16M"},
		{[]string{"--disk", "lots"}, "--disk"},
		{[]string{"--disk", "1G", "--workspace", "."}, "a read-write workspace writes the host directory itself"},
		{[]string{"--nofile", "1000000", "--pids", "1000"}, "quarter of the host's file table"},
		{[]string{"--protect", "../outside"}, "--protect: \"../outside\": want a path inside the workspace"},
		{[]string{"--protect", "/etc"}, "--protect"},
	} {
		root := newRoot()
		args := append([]string{"sandbox", "run", "--config", cfg}, tt.flags...)
		root.SetArgs(append(args, "--", "true"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("sandbox run %s: %v, want an error naming %q", strings.Join(tt.flags, " "), err, tt.want)
		}
	}
}

// TestOOMIsSaid: a command the kernel killed for want of memory gets a line from airlock
// naming the limit and how to raise it (the status alone, 137, does not say why).
func TestOOMIsSaid(t *testing.T) {
	var b strings.Builder
	sayOOM(&b, "sbx-1", sandbox.Result{ExitCode: 137, Usage: sandbox.Usage{OOMKilled: true}}, 64<<20)
	want := "airlock: sandbox sbx-1 ran out of memory: the kernel killed a process at its memory limit of 64M (exit status 137); raise it with --memory or sandbox.memory\n"
	if b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	sayOOM(&b, "sbx-1", sandbox.Result{ExitCode: 137, Signal: "SIGKILL"}, 64<<20)
	if b.Len() != 0 {
		t.Errorf("a kill that was not the OOM killer's: %q, want nothing", b.String())
	}
}
