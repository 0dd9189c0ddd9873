package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

// mcpSession starts a session manager with one sandbox, destroyed at cleanup.
func mcpSession(t *testing.T) (*session.Manager, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	m, err := session.New(session.Options{
		Base:     sandbox.Options{Backend: &native.Native{StateDir: filepath.Join(os.TempDir(), "airlock-mcp-test-state")}},
		StateDir: t.TempDir(),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	info, err := m.Create(context.Background(), session.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return m, info.ID
}

func toolText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPWithSDKClient drives the tools with the official SDK's client.
func TestMCPWithSDKClient(t *testing.T) {
	m, id := mcpSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct, st := mcp.NewInMemoryTransports()
	srv := newMCPServer(localSessions{m}, id, false)
	go func() { _ = srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "exec,list_files,read_file,write_file" {
		t.Errorf("tools %v", names)
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	if r := call("write_file", map[string]any{"path": "notes.txt", "content": "one\n"}); r.IsError || !strings.Contains(toolText(t, r), "/tmp/notes.txt") {
		t.Errorf("write_file: %s", toolText(t, r))
	}
	if r := call("read_file", map[string]any{"path": "/tmp/notes.txt"}); r.IsError || toolText(t, r) != "one\n" {
		t.Errorf("read_file: %q", toolText(t, r))
	}
	r := call("exec", map[string]any{"command": "cat /tmp/notes.txt; echo oops >&2; exit 3"})
	if txt := toolText(t, r); !r.IsError || !strings.Contains(txt, "one\n") || !strings.Contains(txt, "oops") || !strings.Contains(txt, "[exit status 3]") {
		t.Errorf("exec: %v %q", r.IsError, txt)
	}
	if r := call("list_files", map[string]any{"path": "/tmp"}); r.IsError || !strings.Contains(toolText(t, r), "notes.txt") {
		t.Errorf("list_files: %s", toolText(t, r))
	}
	if r := call("read_file", map[string]any{"path": "/etc/passwd"}); !r.IsError || !strings.Contains(toolText(t, r), "outside the workspace") {
		t.Errorf("read_file outside: %s", toolText(t, r))
	}
}

// TestMCPRawJSONRPC speaks newline-delimited JSON-RPC over a pipe, as agent clients do
// over the stdio of `airlock mcp`.
func TestMCPRawJSONRPC(t *testing.T) {
	m, id := mcpSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := newMCPServer(localSessions{m}, id, false)
	go func() { _ = srv.Run(ctx, &mcp.IOTransport{Reader: inR, Writer: outW}) }()
	rd := bufio.NewReader(outR)
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() map[string]any {
		t.Helper()
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var msg map[string]any
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return msg
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-agent","version":"0.1"}}}`)
	if msg := recv(); msg["id"] != float64(1) || msg["result"] == nil {
		t.Fatalf("initialize: %v", msg)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if msg := recv(); !strings.Contains(toJSON(msg), `"name":"exec"`) {
		t.Fatalf("tools/list: %v", msg)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hello from the sandbox"}}}`)
	msg := recv()
	if s := toJSON(msg); !strings.Contains(s, "hello from the sandbox") || !strings.Contains(s, "[exit status 0]") || strings.Contains(s, `"isError":true`) {
		t.Errorf("tools/call: %s", s)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"exec","arguments":{}}}`)
	if s := toJSON(recv()); !strings.Contains(s, `"isError":true`) {
		t.Errorf("empty command: %s", s)
	}
	inW.Close()
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
