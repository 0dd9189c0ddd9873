package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/internal/termsafe"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/session"
)

// adminFlags are how the session commands reach airlock proxy's admin API.
type adminFlags struct{ addr, tokenFile string }

func (a *adminFlags) bind(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&a.addr, "admin", "http://127.0.0.1:9090", "admin API base URL of the airlock proxy that serves the sandboxes")
	cmd.PersistentFlags().StringVar(&a.tokenFile, "token-file", "", "file with an issuer token of proxy.issuers (or $AIRLOCK_ISSUER_TOKEN)")
}

func (a *adminFlags) client() (*session.Client, error) {
	tok := os.Getenv("AIRLOCK_ISSUER_TOKEN")
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = string(trimSpace(b))
	}
	if tok == "" {
		return nil, errors.New("an issuer token is required: --token-file or $AIRLOCK_ISSUER_TOKEN (one of the proxy's proxy.issuers)")
	}
	return &session.Client{BaseURL: a.addr, Token: tok}, nil
}

// specFlags are sandbox create's sandbox-shaping flags (those of sandbox run).
type specFlags struct {
	id, workspace, memory, backend, image, rootfs, ttl, idle, timeout string
	pids                                                              int64
	cpus                                                              float64
	labels, env                                                       []string
}

func (f *specFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.id, "id", "", "sandbox id: lower-case letters, digits and - (default: generated)")
	fl.StringVar(&f.workspace, "workspace", "", "host directory (on the proxy's host) mounted at /workspace: DIR, DIR:ro or DIR:cow")
	fl.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512M or 2G")
	fl.Int64Var(&f.pids, "pids", 0, "process limit")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores, e.g. 1.5")
	fl.StringArrayVar(&f.labels, "label", nil, "sandbox label K=V, seen by the policy as input.sandbox.labels (repeatable)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable K=V for every command (repeatable)")
	fl.StringVar(&f.backend, "backend", "", "native (default), docker (with --image: a local image of the proxy host's Docker daemon) or kubernetes (with --image: a pod of the proxy's cluster)")
	fl.StringVar(&f.image, "image", "", "container image (native and docker: an image of the proxy host's Docker engine, nothing is pulled; native also a tarball or OCI layout path under sessions.rootfs_roots; kubernetes: pulled by the cluster)")
	fl.StringVar(&f.rootfs, "rootfs", "", "native backend: a directory of the proxy's host (under sessions.rootfs_roots) shown read-only as the sandbox's root")
	fl.StringVar(&f.ttl, "ttl", "", "the sandbox ends this long after creation (default: the proxy's sessions.ttl, 1h)")
	fl.StringVar(&f.idle, "idle-timeout", "", "the sandbox ends after this long without a command (default: sessions.idle_timeout, 15m)")
	fl.StringVar(&f.timeout, "timeout", "", "default wall-clock limit of each command (default: none)")
}

func (f *specFlags) spec() (session.Spec, error) {
	s := session.Spec{ID: f.id, Workspace: f.workspace, Memory: f.memory, Pids: f.pids, CPUs: f.cpus,
		Backend: f.backend, Image: f.image, Rootfs: f.rootfs, TTL: f.ttl, IdleTimeout: f.idle, Timeout: f.timeout}
	for _, kv := range f.labels {
		k, v, err := sandbox.ParseKV(kv)
		if err != nil {
			return s, fmt.Errorf("--label: %w", err)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
	env, err := parseEnvFlags(f.env)
	s.Env = env
	return s, err
}

func parseEnvFlags(kvs []string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want K=V", kv)
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}

// addSessionCmds adds create, exec, cp, ls, rm and patch to `airlock sandbox`.
func addSessionCmds(sb *cobra.Command) {
	var af adminFlags
	for _, c := range []*cobra.Command{newSessionCreateCmd(&af), newExecCmd(&af), newSessionCpCmd(&af),
		newSessionLsCmd(&af), newSessionRmCmd(&af), newSessionPatchCmd(&af)} {
		af.bind(c)
		sb.AddCommand(c)
	}
}

// newSessionCreateCmd is `airlock sandbox create`.
func newSessionCreateCmd(af *adminFlags) *cobra.Command {
	var sf specFlags
	create := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox on an airlock proxy and print its id (commands then run with 'sandbox exec')",
		Long: `Create a sandbox served by 'airlock proxy' (its admin API, with an issuer token) and print
its id. The sandbox lives until 'sandbox rm', its --ttl, or --idle-timeout without commands.
Policy, audit and listeners are the proxy's; the flags shape the sandbox only.`,
		Example: `  id=$(airlock sandbox create --token-file ~/.airlock-issuer --workspace /srv/repo:cow --label task=triage --ttl 2h)
  airlock sandbox exec "$id" -- make test
  airlock sandbox patch "$id" > changes.patch
  airlock sandbox rm "$id"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			spec, err := sf.spec()
			if err != nil {
				return err
			}
			info, err := c.Create(cmd.Context(), spec)
			if err != nil {
				return fmt.Errorf("create sandbox: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.ID)
			return nil
		},
	}
	sf.bind(create)
	return create
}

// newSessionCpCmd is `airlock sandbox cp`.
func newSessionCpCmd(af *adminFlags) *cobra.Command {
	cp := &cobra.Command{
		Use:   "cp SRC ID:PATH | ID:PATH DST",
		Short: "Copy a file into or out of a sandbox (PATH under /workspace or /tmp)",
		Example: `  airlock sandbox cp ./prompt.txt sbx-1a2b:/tmp/prompt.txt
  airlock sandbox cp sbx-1a2b:/workspace/out.json ./out.json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			src, dst := args[0], args[1]
			if id, p, ok := remotePath(dst); ok {
				b, err := os.ReadFile(src)
				if err != nil {
					return err
				}
				return c.PutFile(cmd.Context(), id, p, b)
			}
			if id, p, ok := remotePath(src); ok {
				b, err := c.GetFile(cmd.Context(), id, p)
				if err != nil {
					return err
				}
				if dst == "-" {
					_, err = cmd.OutOrStdout().Write(b)
					return err
				}
				return os.WriteFile(dst, b, 0o644)
			}
			return errors.New("one side must be ID:PATH (a sandbox path), the other a local file")
		},
	}
	return cp
}

// newSessionLsCmd is `airlock sandbox ls`.
func newSessionLsCmd(af *adminFlags) *cobra.Command {
	ls := &cobra.Command{
		Use: "ls", Short: "List the sandboxes of an airlock proxy", Args: cobra.NoArgs,
		Example: "  airlock sandbox ls --admin http://127.0.0.1:9090 --token-file ~/.airlock-issuer",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			infos, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tEXECS\tCREATED\tEXPIRES\tLABELS")
			for _, i := range infos {
				var labels []string
				for k, v := range i.Labels {
					labels = append(labels, k+"="+v)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", i.ID, i.State, i.Execs, i.Created.Format(time.RFC3339),
					i.Expires.Format(time.RFC3339), termsafe.Text(strings.Join(labels, ",")))
			}
			return tw.Flush()
		},
	}
	return ls
}

// newSessionRmCmd is `airlock sandbox rm`.
func newSessionRmCmd(af *adminFlags) *cobra.Command {
	rm := &cobra.Command{
		Use: "rm ID", Short: "Destroy a sandbox and print its run report (JSON)", Args: cobra.ExactArgs(1),
		Example: "  airlock sandbox rm sbx-1a2b > report.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			rep, err := c.Delete(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(rep, "", "  ")
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	return rm
}

// newSessionPatchCmd is `airlock sandbox patch`.
func newSessionPatchCmd(af *adminFlags) *cobra.Command {
	patch := &cobra.Command{
		Use: "patch ID", Short: "Print a copy-on-write sandbox's changes as a git-style patch", Args: cobra.ExactArgs(1),
		Example: "  airlock sandbox patch sbx-1a2b | git -C /srv/repo apply",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			b, err := c.Patch(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	return patch
}

// remotePath splits "ID:PATH" (PATH absolute).
func remotePath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || !strings.HasPrefix(p, "/") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}
