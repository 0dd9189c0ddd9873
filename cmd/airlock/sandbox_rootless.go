package main

import (
	"errors"
	"fmt"
	"io"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/spf13/cobra"
)

// sayUnenforced prints, once, what a sandbox does not enforce (a rootless one); the run
// report has the same list (unenforced).
func sayUnenforced(w io.Writer, sb *sandbox.Sandbox) {
	u := sb.Unenforced()
	if len(u) == 0 {
		return
	}
	fmt.Fprintf(w, "airlock: rootless sandbox %s: namespaces, seccomp, Landlock, no_new_privs, the timeout and what is not listed hold; not as root:\n", sb.ID())
	for _, s := range u {
		fmt.Fprintf(w, "airlock:   - %s\n", s)
	}
}

// newDelegateCgroupCmd is `airlock sandbox delegate-cgroup`: the one-time root step that
// gives a user's rootless sandboxes cgroup limits.
func newDelegateCgroupCmd() *cobra.Command {
	var name, path string
	cmd := &cobra.Command{
		Use:   "delegate-cgroup --user NAME [--path DIR]",
		Short: "As root, once: delegate a cgroup v2 subtree to a user, so that its rootless sandboxes get memory, pids and CPU limits",
		Long: `Creates a cgroup v2 directory (default: airlock-NAME under the cgroup v2 mount),
enables in it the memory, pids and cpu controllers the hierarchy has, and hands it and the
files the kernel names for delegation (cgroup.procs, cgroup.subtree_control,
cgroup.threads...) to the user. Set the printed sandbox.cgroup_parent in that user's
config. The kernel lets an ordinary user move a process only within a subtree it owns, so
that user's airlock must itself run in a cgroup under the directory (what starts it puts
it there: a service manager, or root writing its pid to DIR/LEAF/cgroup.procs). A
controller the hierarchy lacks stays a limit rootless sandboxes cannot enforce. An existing
directory is delegated only if it is the user's already or empty (no processes, no child
cgroups): the user could move whatever runs in it out of its cgroup.`,
		Example: "  sudo airlock sandbox delegate-cgroup --user alice",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := user.Lookup(name)
			if err != nil {
				return fmt.Errorf("--user %q: %w", name, err)
			}
			uid, err1 := strconv.Atoi(u.Uid)
			gid, err2 := strconv.Atoi(u.Gid)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("--user %q: %w", name, err)
			}
			if path == "" {
				if path = native.CgroupV2Mount(); path == "" {
					return errors.New("no cgroup v2 hierarchy is mounted (at /sys/fs/cgroup or /sys/fs/cgroup/unified): mount one, or give --path")
				}
				path = filepath.Join(path, "airlock-"+name)
			}
			got, err := native.DelegateCgroup(path, uid, gid)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "delegated %s to %s (uid %d)\n", path, name, uid)
			if len(got) == 0 {
				fmt.Fprintln(w, "controllers for its sandboxes: none (the hierarchy offers neither memory, pids nor cpu): memory and CPU limits stay unenforced; cgroup.kill still ends a sandbox's whole tree")
			} else {
				fmt.Fprintf(w, "controllers for its sandboxes: %s\n", strings.Join(got, " "))
			}
			fmt.Fprintf(w, "in %s's airlock config:\n  sandbox:\n    cgroup_parent: %s\n", name, path)
			fmt.Fprintf(w, "%s's airlock must run in a cgroup under %s (the kernel lets a user move processes only within a subtree it owns): e.g. as root, mkdir %s/session and echo PID > %s/session/cgroup.procs\n", name, path, path, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "user", "", "the user (name) whose rootless sandboxes get the subtree")
	cmd.Flags().StringVar(&path, "path", "", "the cgroup v2 directory to create and delegate (default: airlock-USER under the cgroup v2 mount)")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}
