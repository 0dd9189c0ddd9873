package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

// sessionAPI is what the MCP server needs of sandbox sessions: the admin API's client
// (session.Client) or, without --admin, an embedded manager (localSessions).
type sessionAPI interface {
	Create(ctx context.Context, spec session.Spec) (session.Info, error)
	Exec(ctx context.Context, id string, req session.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (session.ExecResult, error)
	PutFile(ctx context.Context, id, p string, data []byte) error
	GetFile(ctx context.Context, id, p string) ([]byte, error)
	ListFiles(ctx context.Context, id, p string) ([]byte, error)
	Delete(ctx context.Context, id string) (sandbox.Report, error)
}

var _ sessionAPI = (*session.Client)(nil)

// localSessions serves sessionAPI from a manager in this process.
type localSessions struct{ m *session.Manager }

func (l localSessions) Create(ctx context.Context, spec session.Spec) (session.Info, error) {
	return l.m.Create(ctx, spec)
}

func (l localSessions) Exec(ctx context.Context, id string, req session.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (session.ExecResult, error) {
	return l.m.Exec(ctx, id, req, session.ExecIO{Stdin: stdin, Output: func(stream string, p []byte) error {
		w := stdout
		if stream == "stderr" {
			w = stderr
		}
		_, err := w.Write(p)
		return err
	}})
}

func (l localSessions) PutFile(ctx context.Context, id, p string, data []byte) error {
	return l.m.PutFile(ctx, id, p, data)
}

func (l localSessions) GetFile(ctx context.Context, id, p string) ([]byte, error) {
	return l.m.GetFile(ctx, id, p)
}

func (l localSessions) ListFiles(ctx context.Context, id, p string) ([]byte, error) {
	return l.m.ListFiles(ctx, id, p)
}

func (l localSessions) Delete(ctx context.Context, id string) (sandbox.Report, error) {
	return l.m.Delete(ctx, id)
}

func newMCPCmd() *cobra.Command {
	var af adminFlags
	var sf specFlags
	var pf proxyFlags
	var attach string
	cmd := &cobra.Command{
		Use:   "mcp [--admin URL --token-file F] [--sandbox ID | sandbox create's flags]",
		Short: "Serve MCP over stdio: an agent's tools (exec, read_file, write_file, list_files) run in one sandbox",
		Long: `Serve the Model Context Protocol over stdin and stdout, so that an agent client uses a
sandbox as its tool executor: exec ({command, timeout?}, run by sh -c), read_file ({path}),
write_file ({path, content}) and list_files ({path}). Relative paths are under /workspace
(or /tmp without a workspace). Every command is under the policy's exec phase and audited.

With --admin the sandbox is served by that airlock proxy (an issuer token in --token-file);
--sandbox attaches to an existing one, which is left running on exit; otherwise one is
created with the flags of 'sandbox create' and destroyed on exit. Without --admin an
embedded proxy and a local sandbox serve it, as 'sandbox run' does (needs root).`,
		Example: `  # in an agent client's MCP configuration
  {"command": "airlock", "args": ["mcp", "--workspace", "/srv/repo:cow", "--label", "task=triage"]}

  # attached to a sandbox of a running airlock proxy
  airlock mcp --admin http://127.0.0.1:9090 --token-file ~/.airlock-issuer --sandbox sbx-1a2b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onSignal(cmd, syscall.SIGHUP, func() error { return runMCP(cmd, &af, &sf, &pf, attach) })
		},
	}
	cmd.Flags().StringVar(&attach, "sandbox", "", "attach to this sandbox (left running on exit) instead of creating one")
	cmd.Flags().StringVar(&af.addr, "admin", "", "admin API base URL of an airlock proxy serving the sandbox (default: an embedded proxy)")
	cmd.Flags().StringVar(&af.tokenFile, "token-file", "", "file with an issuer token of proxy.issuers (or $AIRLOCK_ISSUER_TOKEN)")
	sf.bind(cmd)
	pf.bindCommon(cmd)
	return cmd
}

func runMCP(cmd *cobra.Command, af *adminFlags, sf *specFlags, pf *proxyFlags, attach string) error {
	ctx := cmd.Context()
	var api sessionAPI
	if af.addr != "" {
		c, err := af.client()
		if err != nil {
			return err
		}
		api = c
	} else {
		if attach != "" {
			return errors.New("--sandbox attaches to a sandbox of an airlock proxy: give its --admin URL")
		}
		m, stop, err := embeddedSessions(cmd, sf, pf)
		if err != nil {
			return err
		}
		defer stop()
		api = localSessions{m}
	}
	id := attach
	if id == "" {
		spec, err := sf.spec()
		if err != nil {
			return err
		}
		info, err := api.Create(ctx, spec)
		if err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		id = info.ID
		defer func() {
			if _, err := api.Delete(context.Background(), id); err != nil {
				fmt.Fprintf(os.Stderr, "airlock: destroy sandbox %s: %v\n", id, err)
			}
		}()
	}
	srv := newMCPServer(api, id, sf.workspace != "" || attach != "")
	err := srv.Run(ctx, &mcp.StdioTransport{})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// embeddedSessions starts a proxy stack and its session manager here, for airlock mcp
// without --admin. stop ends the sessions, then the stack.
func embeddedSessions(cmd *cobra.Command, sf *specFlags, pf *proxyFlags) (_ *session.Manager, stop func(), err error) {
	ctx := cmd.Context()
	cfg, _, err := pf.load(cmd)
	if err != nil {
		return nil, nil, err
	}
	if err := (&native.Native{}).Cleanup(ctx); err != nil {
		return nil, nil, err
	}
	cfg.Log.Level = "warn"
	log := newLogger(cfg, os.Stderr) // stdout carries MCP
	s, err := build(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() { s.close(context.Background()) })
	if cfg.Sessions.StateDir == "" {
		dir, err := os.MkdirTemp("", "airlock-mcp-")
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, func() { os.RemoveAll(dir) })
		cfg.Sessions.StateDir = dir
	}
	// Embedded, the operator who runs airlock mcp names the workspace and root, as with
	// sandbox run: those directories are roots.
	if spec, err := sf.spec(); err == nil && spec.Workspace != "" {
		if dir, _, err := sandbox.ParseWorkspace(spec.Workspace); err == nil {
			cfg.Sessions.WorkspaceRoots = append(cfg.Sessions.WorkspaceRoots, dir)
		}
	}
	if spec, err := sf.spec(); err == nil && spec.Rootfs != "" {
		cfg.Sessions.RootfsRoots = append(cfg.Sessions.RootfsRoots, spec.Rootfs)
	}
	if spec, err := sf.spec(); err == nil && filepath.IsAbs(spec.Image) {
		cfg.Sessions.RootfsRoots = append(cfg.Sessions.RootfsRoots, spec.Image)
	}
	m, err := s.startSessions(ctx, cmd)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, func() { m.Close(context.Background()) })
	return m, stop, nil
}

// mcpExecIn and the others are the tools' arguments.
type mcpExecIn struct {
	Command string `json:"command" jsonschema:"a shell command, run by sh -c in the sandbox"`
	Timeout string `json:"timeout,omitempty" jsonschema:"wall-clock limit such as 30s (default: none)"`
}

type mcpPathIn struct {
	Path string `json:"path" jsonschema:"a path under /workspace or /tmp; relative paths are under /workspace"`
}

type mcpWriteIn struct {
	Path    string `json:"path" jsonschema:"a path under /workspace or /tmp; relative paths are under /workspace"`
	Content string `json:"content" jsonschema:"the file's new content"`
}

// newMCPServer serves the four tools on sandbox id.
func newMCPServer(api sessionAPI, id string, hasWorkspace bool) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "airlock", Version: version}, nil)
	t := &mcpTools{api: api, id: id, hasWorkspace: hasWorkspace}
	mcp.AddTool(srv, &mcp.Tool{Name: "exec", Description: "Run a shell command (sh -c) in the sandbox; returns its output and exit status. Network access goes through airlock's policy."}, t.exec)
	mcp.AddTool(srv, &mcp.Tool{Name: "read_file", Description: "Read a file of the sandbox (under /workspace or /tmp)."}, t.readFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "write_file", Description: "Write a file of the sandbox (under /workspace or /tmp), replacing it whole."}, t.writeFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "list_files", Description: "List a directory of the sandbox (ls -la; under /workspace or /tmp)."}, t.listFiles)
	return srv
}

// mcpTools are the MCP tools on one sandbox.
type mcpTools struct {
	api          sessionAPI
	id           string
	hasWorkspace bool
}

// resolve makes a relative path absolute, under /workspace (or /tmp without one).
func (t *mcpTools) resolve(p string) string {
	if p == "" || path.IsAbs(p) {
		return p
	}
	if t.hasWorkspace {
		return path.Join("/workspace", p)
	}
	return path.Join("/tmp", p)
}

func mcpText(s string, isErr bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isErr}
}

func (t *mcpTools) exec(ctx context.Context, _ *mcp.CallToolRequest, in mcpExecIn) (*mcp.CallToolResult, any, error) {
	if strings.TrimSpace(in.Command) == "" {
		return mcpText("command is empty", true), nil, nil
	}
	var out bytes.Buffer
	w := &capWriter{b: &out, max: 1 << 20}
	res, err := t.api.Exec(ctx, t.id, session.ExecRequest{Argv: []string{"sh", "-c", in.Command}, Timeout: in.Timeout}, nil, w, w)
	if err != nil {
		return mcpText(err.Error(), true), nil, nil
	}
	s := out.String()
	if w.cut {
		s += "\n[output cut at 1 MiB]"
	}
	switch {
	case res.TimedOut:
		s += fmt.Sprintf("\n[timed out after %s; killed]", in.Timeout)
	case res.Error != "" && res.ExitCode != session.ExitRefused:
		s += "\n[" + res.Error + "]"
	}
	s += fmt.Sprintf("\n[exit status %d]", res.ExitCode)
	return mcpText(s, res.ExitCode != 0), nil, nil
}

func (t *mcpTools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in mcpPathIn) (*mcp.CallToolResult, any, error) {
	b, err := t.api.GetFile(ctx, t.id, t.resolve(in.Path))
	if err != nil {
		return mcpText(err.Error(), true), nil, nil
	}
	return mcpText(string(b), false), nil, nil
}

func (t *mcpTools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in mcpWriteIn) (*mcp.CallToolResult, any, error) {
	p := t.resolve(in.Path)
	if err := t.api.PutFile(ctx, t.id, p, []byte(in.Content)); err != nil {
		return mcpText(err.Error(), true), nil, nil
	}
	return mcpText(fmt.Sprintf("wrote %d bytes to %s", len(in.Content), p), false), nil, nil
}

func (t *mcpTools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in mcpPathIn) (*mcp.CallToolResult, any, error) {
	p := t.resolve(in.Path)
	if p == "" {
		p = "/tmp"
		if t.hasWorkspace {
			p = "/workspace"
		}
	}
	b, err := t.api.ListFiles(ctx, t.id, p)
	if err != nil {
		return mcpText(err.Error(), true), nil, nil
	}
	return mcpText(string(b), false), nil, nil
}

// capWriter keeps at most max bytes.
type capWriter struct {
	b   *bytes.Buffer
	max int
	cut bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); len(p) > room {
		c.cut = true
		c.b.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.b.Write(p)
}
